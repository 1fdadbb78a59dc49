"""An S3-compatible server on loopback for tests: moto's standalone server (``.venv/s3``, made by
scripts/setup.sh from requirements-s3.txt), started on a free port and stopped by the test.
The code under test talks to it as to AWS: an Airflow connection of type ``aws`` whose extra
names the ``endpoint_url``."""
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from mxbench_train.localhost import free_port

REPO = Path(__file__).resolve().parents[1]
MOTO_SERVER = REPO / ".venv" / "s3" / "bin" / "moto_server"
# moto accepts any key; these only make the requests well-formed
ACCESS_KEY, SECRET_KEY = "mxbench-test-key", "mxbench-test-secret"


class S3Server:
    def __init__(self, log_path: Path):
        if not MOTO_SERVER.exists():
            raise RuntimeError(f"{MOTO_SERVER} is missing: run scripts/setup.sh --tests (it makes .venv/s3 from "
                               "requirements-s3.txt)")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_path)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(self.port)],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        end = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/", timeout=2).read()
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if self.proc.poll() is not None or time.monotonic() > end:
                    self.stop()
                    raise RuntimeError(f"moto's S3 server did not start: {self.log_path.read_text()[-2000:]}") from None
                time.sleep(0.2)

    def create_bucket(self, name: str) -> None:
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        urllib.request.urlopen(request, timeout=10).read()

    def connection(self, conn_id: str = "mxbench_artifacts") -> dict:
        """``AIRFLOW_CONN_<ID>``: an aws connection to this server, as JSON."""
        return {f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps({
            "conn_type": "aws", "login": ACCESS_KEY, "password": SECRET_KEY,
            "extra": {"endpoint_url": self.endpoint, "region_name": "us-east-1"}})}

    def keys(self, bucket: str, prefix: str = "") -> list:
        """Every object key under ``prefix`` (moto's ListObjectsV2, unpaged: tests hold few)."""
        import xml.etree.ElementTree as ET

        keys, token = [], None
        while True:
            query = f"list-type=2&prefix={urllib.request.quote(prefix)}"
            if token:
                query += f"&continuation-token={urllib.request.quote(token)}"
            tree = ET.fromstring(urllib.request.urlopen(f"{self.endpoint}/{bucket}?{query}", timeout=10).read())
            ns = {"s3": tree.tag.split("}")[0].strip("{")} if tree.tag.startswith("{") else {}
            find = (lambda e, tag, ns=ns: e.findall(f"s3:{tag}", ns)) if ns else (lambda e, tag: e.findall(tag))
            keys += [c.find("s3:Key", ns).text if ns else c.find("Key").text for c in find(tree, "Contents")]
            nxt = find(tree, "NextContinuationToken")
            if not nxt:
                return keys
            token = nxt[0].text

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
