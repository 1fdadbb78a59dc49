"""prepare-cifar10 on untrusted input: crafted pickles, hostile download servers, archive bombs."""
import base64
import hashlib
import http.server
import io
import json
import os
import pickle
import pickletools
import shutil
import subprocess
import tarfile
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import run_trainer, train_python
from mxbench.run_folder import DagRunFolder
from mxbench_train import download, redaction

BATCHES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


def _env(**extra):
    return {**os.environ, **{k: str(v) for k, v in extra.items()}}


def _one_error_line(done):
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    return lines[0]


# --- crafted pickles ---------------------------------------------------------------------------

class _Payload:
    """Unpickling this calls ``func(*args)``: what a crafted batch does to plain pickle.loads."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _copy_with(tmp_path, cifar_source, name, raw, layout):
    """A copy of the synthetic source whose batch ``name`` is ``raw``: a folder, or a .tar.gz of it."""
    folder = tmp_path / "src" / "cifar-10-batches-py"
    shutil.copytree(cifar_source, folder)
    (folder / name).write_bytes(raw)
    if layout == "folder":
        return folder
    archive = tmp_path / "crafted.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        tar.add(folder, arcname="cifar-10-batches-py")
    return archive


@pytest.mark.parametrize("layout, func, kind", [("folder", os.system, "command"),
                                                ("archive", open, "open")])
def test_crafted_batch_is_refused_without_running_it(tmp_path, cifar_source, layout, func, kind):
    marker = tmp_path / "pwned"
    args = (f"touch {marker}",) if kind == "command" else (str(marker), "w")
    raw = pickle.dumps({"batch_label": _Payload(func, *args), "labels": [0], "data": b""}, protocol=2)
    refused = f"{func.__module__}.{func.__qualname__}"  # posix.system, io.open
    assert refused.encode() in raw.replace(b"\n", b".")
    source = _copy_with(tmp_path, cifar_source, "data_batch_3", raw, layout)
    done = run_trainer("prepare-cifar10", "--source", source, "--out", tmp_path / "out", "--allow-unverified")
    assert not marker.exists(), "the crafted batch ran its payload"
    line = _one_error_line(done)
    assert str(source) in line and "data_batch_3 refers to a Python global" in line
    assert refused not in line  # never quoted: it could be a hard-linked file's first two lines
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("batch", [[1, 2, 3], {"data": 5, "labels": 7}])
def test_batch_of_the_wrong_shape_is_one_line_error(tmp_path, cifar_source, batch):
    source = _copy_with(tmp_path, cifar_source, "test_batch", pickle.dumps(batch, protocol=2), "folder")
    done = run_trainer("prepare-cifar10", "--source", source, "--out", tmp_path / "out", "--allow-unverified")
    assert "test_batch" in _one_error_line(done)


def test_batches_pickled_by_numpy_2_with_bytes_keys_still_load(tmp_path):
    """This process has numpy 2 (pickles name numpy._core); the training env has numpy 1."""
    src = run_trainer("synthetic-cifar10", "--out", tmp_path / "src", "--train", 50, "--test", 10)
    assert src.returncode == 0, src.stderr
    folder = tmp_path / "src" / "cifar-10-batches-py"
    for name in BATCHES:
        with open(folder / name, "rb") as f:
            batch = pickle.load(f)
        # the official batches are Python 2 pickles: bytes keys and bytes strings
        batch = {k.encode(): (v.encode() if isinstance(v, str) else v) for k, v in batch.items()}
        raw = pickle.dumps(batch, protocol=2)
        if name == "data_batch_1":
            globals_ = {arg for op, arg, _ in pickletools.genops(raw) if op.name == "GLOBAL"}
            assert "numpy._core.multiarray _reconstruct" in globals_ and "_codecs encode" in globals_, globals_
        (folder / name).write_bytes(raw)
    done = run_trainer("prepare-cifar10", "--source", folder, "--out", tmp_path / "out", "--allow-unverified")
    assert done.returncode == 0, done.stderr[-2000:]
    manifest = json.loads(done.stdout)
    assert manifest["synthetic"] is True and manifest["splits"]["train"]["records"] == 50


# --- archive bombs -----------------------------------------------------------------------------

def _zeros_archive(path, members):
    """A .tar.gz of {name: size} members, each a run of zeros: kilobytes on disk."""
    with tarfile.open(path, "w:gz", compresslevel=9) as tar:
        for name, size in members.items():
            info = tarfile.TarInfo(name)
            info.size = size
            tar.addfile(info, io.BytesIO(bytes(size)))
    return path


def test_tar_member_above_the_cap_is_refused(tmp_path):
    archive = _zeros_archive(tmp_path / "bomb.tar.gz", {"cifar-10-batches-py/data_batch_1": 3 << 20})
    assert archive.stat().st_size < 64 << 10
    done = run_trainer("prepare-cifar10", "--source", archive, "--out", tmp_path / "out", "--allow-unverified",
                       env=_env(MXBENCH_TAR_MEMBER_MAX_BYTES=1 << 20))
    line = _one_error_line(done)
    assert str(archive) in line and "data_batch_1" in line and str(3 << 20) in line
    assert "MXBENCH_TAR_MEMBER_MAX_BYTES" in line


def test_archive_that_unpacks_past_the_total_cap_is_refused(tmp_path):
    members = {f"cifar-10-batches-py/junk_{i}": 1 << 20 for i in range(4)}  # each under the member cap
    archive = _zeros_archive(tmp_path / "bomb.tar.gz", members)
    done = run_trainer("prepare-cifar10", "--source", archive, "--out", tmp_path / "out", "--allow-unverified",
                       env=_env(MXBENCH_TAR_MAX_BYTES=2 << 20))
    line = _one_error_line(done)
    assert str(archive) in line and str(2 << 20) in line and "MXBENCH_TAR_MAX_BYTES" in line


# --- downloads ---------------------------------------------------------------------------------

class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        route = self.server.routes.get(self.path)
        if route is None:
            self.send_error(404)
        else:
            route(self)

    def log_message(self, *args):
        pass


@pytest.fixture
def serve():
    """serve({path: handler -> None}) -> (server, 'http://127.0.0.1:PORT'); stopped after the test."""
    servers = []

    def start(routes):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.routes, server.seen = routes, []
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server, f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _send(body, length=True):
    def route(handler):
        handler.send_response(200)
        if length is not None:
            handler.send_header("Content-Length", str(len(body) if length is True else length))
        handler.end_headers()
        handler.wfile.write(body)
    return route


def _trickle(handler):
    handler.send_response(200)
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    for _ in range(300):  # one byte every 0.1 s: every read succeeds, the download never ends
        try:
            handler.wfile.write(b"x")
        except OSError:
            return
        time.sleep(0.1)


def _no_partial_left(out):
    return not list((out / "downloads").glob("*.part")) if (out / "downloads").exists() else True


def test_trickling_server_hits_the_total_deadline(tmp_path, serve):
    _, base = serve({"/cifar-10-python.tar.gz": _trickle})
    started = time.monotonic()
    done = run_trainer("prepare-cifar10", "--source", f"{base}/cifar-10-python.tar.gz", "--out", tmp_path / "out",
                       env=_env(MXBENCH_DOWNLOAD_TIMEOUT_S=1.5), timeout=60)
    line = _one_error_line(done)
    assert time.monotonic() - started < 15
    assert f"{base}/cifar-10-python.tar.gz" in line and "1.5 s" in line and "MXBENCH_DOWNLOAD_TIMEOUT_S" in line
    assert _no_partial_left(tmp_path / "out")


@pytest.mark.parametrize("length, expect", [(True, "announces 5000 bytes"), (None, "more than 1000 bytes")])
def test_download_larger_than_the_cap_is_refused(tmp_path, serve, length, expect):
    _, base = serve({"/big.tar.gz": _send(bytes(5000), length)})
    done = run_trainer("prepare-cifar10", "--source", f"{base}/big.tar.gz", "--out", tmp_path / "out",
                       env=_env(MXBENCH_DOWNLOAD_MAX_BYTES=1000))
    line = _one_error_line(done)
    assert f"{base}/big.tar.gz" in line and expect in line and "MXBENCH_DOWNLOAD_MAX_BYTES" in line
    assert _no_partial_left(tmp_path / "out")


def test_redirect_from_https_to_http_is_refused():
    handler = download.SafeRedirect()
    request = urllib.request.Request("https://data.example/cifar-10-python.tar.gz")
    with pytest.raises(urllib.error.URLError, match="refused redirect from https to http://mirror.example/c.tgz"):
        handler.redirect_request(request, None, 302, "Found", {}, "http://mirror.example/c.tgz")
    followed = handler.redirect_request(request, None, 302, "Found", {}, "https://mirror.example/c.tgz")
    assert followed.full_url == "https://mirror.example/c.tgz"
    plain = urllib.request.Request("http://data.example/cifar-10-python.tar.gz")
    assert handler.redirect_request(plain, None, 301, "Moved", {}, "https://data.example/c.tgz") is not None
    with pytest.raises(urllib.error.URLError, match="refused redirect"):
        handler.redirect_request(plain, None, 301, "Moved", {}, "ftp://data.example/c.tgz")


USER, PASSWORD = "bench", "p%40ss-s3cret"  # the password is p@ss-s3cret
SECRETS = ("s3cret", "p%40ss", "p@ss", base64.b64encode(b"bench:p@ss-s3cret").decode())


def test_credentials_in_the_url_authenticate_but_are_never_written(tmp_path, serve):
    src = run_trainer("synthetic-cifar10", "--out", tmp_path / "src", "--train", 50, "--test", 10, "--archive")
    body = open(src.stdout.strip(), "rb").read()
    expected = "Basic " + base64.b64encode(b"bench:p@ss-s3cret").decode()

    def authenticated(handler):
        if handler.headers.get("Authorization") != expected:
            handler.send_error(401)
        else:
            _send(body)(handler)

    server, base = serve({"/cifar-10-python.tar.gz": authenticated})
    url = f"{base}/cifar-10-python.tar.gz".replace("//", f"//{USER}:{PASSWORD}@", 1)
    out = tmp_path / "out"
    done = run_trainer("prepare-cifar10", "--source", url, "--out", out, "--allow-unverified")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["source"] == f"{base}/cifar-10-python.tar.gz"
    written = [done.stdout, done.stderr, (out / "manifest.json").read_text(),
               *(str(p.relative_to(tmp_path)) for p in out.rglob("*"))]
    assert not [s for s in SECRETS if any(s in text for text in written)]
    # a failure names the URL without them too: a 404 here, no connection (and no port to mis-parse) below
    for failing, shown in [(url.replace(".tar.gz", ".tgz"), f"{base}/cifar-10-python.tgz"),
                           (f"http://{USER}:{PASSWORD}@127.0.0.1/c.tgz", "http://127.0.0.1/c.tgz")]:
        done = run_trainer("prepare-cifar10", "--source", failing, "--out", out)
        line = _one_error_line(done)
        assert f"cannot download CIFAR-10 from {shown}:" in line
        assert not [s for s in SECRETS if s in done.stderr + done.stdout]


def test_credentials_do_not_follow_a_redirect(tmp_path, serve):
    other, other_base = serve({"/c.tgz": _send(b"not an archive")})

    def moved(handler):
        handler.send_response(302)
        handler.send_header("Location", f"{other_base}/c.tgz")
        handler.end_headers()

    first, base = serve({"/c.tgz": moved})
    url = f"{base}/c.tgz".replace("//", f"//{USER}:{PASSWORD}@", 1)
    done = run_trainer("prepare-cifar10", "--source", url, "--out", tmp_path / "out")
    assert done.returncode == 2 and "not the official archive" in done.stderr
    assert first.seen[0][1] and first.seen[0][1].startswith("Basic ")  # sent to the host it was given for
    assert other.seen == [("/c.tgz", None)]  # not to the host the redirect pointed at


HUGE_ARRAY_BATCH = r"""
import pickle, sys
import numpy as np

class Huge:
    # what a crafted batch can ask numpy for: an array of 2**40 objects
    def __reduce__(self):
        from numpy.core.multiarray import _reconstruct
        return (_reconstruct, (np.ndarray, (2 ** 40,), np.dtype(sys.argv[2])))

out = sys.argv[1]
for name in ["data_batch_%d" % i for i in range(1, 6)] + ["test_batch"]:
    with open(f"{out}/{name}", "wb") as f:
        pickle.dump({b"data": Huge(), b"labels": [0]}, f, protocol=2)
"""


@pytest.mark.parametrize("dtype, refusal", [
    ("u1", "data_batch_1 holds an array reconstruction with shape (1099511627776,)"),
    ("O", "data_batch_1 holds an array of type dtype('O')"),
])
def test_a_batch_asking_for_a_huge_or_object_array_is_refused(tmp_path, dtype, refusal):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    made = subprocess.run([train_python(), "-c", HUGE_ARRAY_BATCH, folder, dtype], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    done = run_trainer("prepare-cifar10", "--source", folder, "--out", tmp_path / "out", "--allow-unverified")
    assert done.returncode == 2, done.stderr[-2000:]
    assert refusal in done.stderr


def test_query_credentials_are_redacted_too():
    url = "https://store.example/cifar.tar.gz?X-Amz-Signature=abc123&token=t0k&version=2"
    assert redaction.redact(url) == "https://store.example/cifar.tar.gz?X-Amz-Signature=REDACTED&token=REDACTED&version=2"


def test_a_credential_url_never_reaches_the_process_list(tmp_path, monkeypatch):
    from mxbench.stages import pipeline
    from mxbench_train.errors import MxbenchError

    argv_log = tmp_path / "argv.log"
    spy = tmp_path / "python"
    spy.write_text(f'#!/usr/bin/env bash\necho "$@" >> {argv_log}\nexec {train_python()} "$@"\n')
    spy.chmod(0o755)
    monkeypatch.setenv("MXBENCH_TRAIN_PYTHON", str(spy))
    monkeypatch.setenv("MXBENCH_DATASET_PRIVATE_HOSTS", "127.0.0.1")  # a loopback address: allowed here
    url = "http://alice:s3cret@127.0.0.1:9/cifar-10-python.tar.gz?token=t0k"  # port 9: nobody there
    with pytest.raises(MxbenchError) as failure:
        pipeline.prepare_data({"dataset": url}, DagRunFolder(tmp_path / "run"), tmp_path / "data")
    assert "data preparation failed: cannot download CIFAR-10 from http://127.0.0.1:9/" in str(failure.value)
    recorded = argv_log.read_text() + str(failure.value) + (tmp_path / "run" / "stages.json").read_text()
    assert "prepare-cifar10 --source-env MXBENCH_SOURCE" in recorded
    assert "s3cret" not in recorded and "alice" not in recorded and "t0k" not in recorded


# --- a dataset param from the trigger form reaches only what an administrator allowed ------------

SECRET = b"-----BEGIN OPENSSH PRIVATE KEY----- worker secret 7f3a9c\n"


def _secret_file(tmp_path):
    secret = tmp_path / "elsewhere" / "id_ed25519"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    return secret


def _holds_secret(folder):
    """Files (not the test's own symlinks) under ``folder`` that hold a copy of the secret."""
    return [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink() and SECRET in p.read_bytes()]


@pytest.mark.parametrize("form", ["path", "file URL", "symlink in the data folder"])
def test_a_worker_file_outside_the_allowed_folders_is_refused_unread(tmp_path, form):
    """On main a trigger user got any worker-readable file copied into the data folder (file://),
    and the refusal printed its MD5."""
    from mxbench.stages import pipeline
    from mxbench_train.errors import MxbenchError

    secret, data_root = _secret_file(tmp_path), tmp_path / "data"
    dataset = {"path": str(secret), "file URL": f"file://{secret}"}.get(form)
    if form == "symlink in the data folder":
        data_root.mkdir()
        (data_root / "cifar-10-python.tar.gz").symlink_to(secret)
        dataset = str(data_root / "cifar-10-python.tar.gz")
    with pytest.raises(MxbenchError) as refused:
        pipeline.prepare_data({"dataset": dataset, "allow_unverified": True}, DagRunFolder(tmp_path / "run"), data_root)
    message = str(refused.value)
    assert f"CIFAR-10 source {dataset} is not under a folder allowed for data sets ({data_root}" in message
    assert "MXBENCH_DATASET_ROOTS" in message
    assert hashlib.md5(SECRET).hexdigest() not in message
    assert not _holds_secret(data_root)


def test_a_batch_that_links_out_of_an_allowed_folder_is_refused(tmp_path, cifar_source):
    from mxbench.stages import pipeline
    from mxbench_train.errors import MxbenchError

    data_root = tmp_path / "data"
    folder = data_root / "mine" / "cifar-10-batches-py"
    shutil.copytree(cifar_source, folder)
    (folder / "data_batch_2").unlink()
    (folder / "data_batch_2").symlink_to(_secret_file(tmp_path))
    with pytest.raises(MxbenchError, match=f"CIFAR-10 source {folder}: data_batch_2 links outside the folders "
                                           "allowed for data sets; refused"):
        pipeline.prepare_data({"dataset": str(folder), "allow_unverified": True}, DagRunFolder(tmp_path / "run"),
                              data_root)
    assert not _holds_secret(data_root) and not list(data_root.glob("rec-*/*.rec"))


@pytest.mark.parametrize("secret, cause", [
    (SECRET, "is not a readable batch"),
    # pickle's GLOBAL opcode is "c", then two lines: a module and a name, which find_class was given
    (b"cdb_user=mxbench\npassword=hunter2-7f3a9c\nmore\n", "refers to a Python global"),
], ids=["load key", "GLOBAL opcode"])
def test_a_worker_file_hard_linked_into_an_allowed_folder_is_named_not_quoted(tmp_path, cifar_source, secret,
                                                                              cause):
    """A hard link passes the folder check (it is a file there); the parse error names the batch
    and never quotes its bytes (pickle's own message gives the first one: "invalid load key, '-'";
    a file starting with "c" had its first two lines quoted as the global it named)."""
    from mxbench.stages import pipeline
    from mxbench_train.errors import MxbenchError

    data_root = tmp_path / "data"
    folder = data_root / "mine" / "cifar-10-batches-py"
    shutil.copytree(cifar_source, folder)
    (folder / "data_batch_1").unlink()
    secret_file = _secret_file(tmp_path)
    secret_file.write_bytes(secret)
    os.link(secret_file, folder / "data_batch_1")
    with pytest.raises(MxbenchError) as refused:
        pipeline.prepare_data({"dataset": str(folder), "allow_unverified": True}, DagRunFolder(tmp_path / "run"),
                              data_root)
    message = str(refused.value)
    assert f"CIFAR-10 source {folder}: data_batch_1 {cause}" in message
    assert "'-'" not in message and "load key" not in message, message
    for line in secret.splitlines():
        assert line[1:].decode() not in message, message


def test_folders_an_administrator_lists_are_allowed(tmp_path, monkeypatch):
    from mxbench.stages import pipeline

    shared = tmp_path / "shared datasets"
    src = run_trainer("synthetic-cifar10", "--out", shared, "--train", 50, "--test", 10, "--archive")
    assert src.returncode == 0, src.stderr
    monkeypatch.setenv("MXBENCH_DATASET_ROOTS", os.pathsep.join(["/nonexistent", str(shared)]))
    data = pipeline.prepare_data({"dataset": src.stdout.strip(), "allow_unverified": True},
                                 DagRunFolder(tmp_path / "run"),
                                 tmp_path / "data")
    assert data["records"] == {"train": 50, "val": 10} and data["verified"] is False


def test_an_unverified_download_is_deleted_and_its_digest_never_shown(tmp_path, serve):
    body = b"\x1f\x8b" + b"not the archive" * 100
    _, base = serve({"/cifar-10-python.tar.gz": _send(body)})
    out = tmp_path / "out"
    done = run_trainer("prepare-cifar10", "--source", f"{base}/cifar-10-python.tar.gz", "--out", out)
    line = _one_error_line(done)
    assert "is not the official archive" in line and "--allow-unverified" in line
    assert hashlib.md5(body).hexdigest() not in done.stdout + done.stderr
    assert not [p for p in (out / "downloads").iterdir()], "the refused download was kept"


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "2130706433", "[::ffff:127.0.0.1]"])
def test_a_url_to_a_loopback_address_is_refused_before_any_request(tmp_path, serve, host):
    from mxbench.stages import pipeline
    from mxbench_train.errors import MxbenchError

    server, base = serve({"/cifar-10-python.tar.gz": _send(b"x")})
    url = f"http://{host}:{server.server_port}/cifar-10-python.tar.gz"
    with pytest.raises(MxbenchError) as refused:
        pipeline.prepare_data({"dataset": url}, DagRunFolder(tmp_path / "run"), tmp_path / "data")
    assert f"cannot download CIFAR-10 from {url}: {host.strip('[]')} resolves to " in str(refused.value)
    assert "a loopback, private, link-local or reserved address: refused" in str(refused.value)
    assert "MXBENCH_DATASET_PRIVATE_HOSTS" in str(refused.value)
    assert server.seen == []


def test_a_listed_private_host_may_serve_but_not_redirect_to_an_unlisted_one(tmp_path, serve, monkeypatch):
    from mxbench.stages import pipeline
    from mxbench_train.errors import MxbenchError

    inner, inner_base = serve({"/c.tgz": _send(b"x")})

    def moved(handler):
        handler.send_response(302)
        handler.send_header("Location", f"{inner_base}/c.tgz")  # 127.0.0.1: not listed
        handler.end_headers()

    mirror, _ = serve({"/c.tgz": moved})
    monkeypatch.setenv("MXBENCH_DATASET_PRIVATE_HOSTS", "localhost")
    with pytest.raises(MxbenchError, match="127.0.0.1 resolves to 127.0.0.1, a loopback"):
        pipeline.prepare_data({"dataset": f"http://localhost:{mirror.server_port}/c.tgz"},
                              DagRunFolder(tmp_path / "run"),
                              tmp_path / "data")
    assert mirror.seen == [("/c.tgz", None)] and inner.seen == []


def test_a_name_that_rebinds_to_loopback_after_the_check_never_reaches_it(tmp_path, serve, monkeypatch):
    """DNS rebinding: the name answers a public address first, loopback afterwards. The connection
    goes to the address that was checked, and every lookup is checked."""
    import socket

    from mxbench_train.errors import MxbenchError

    server, _ = serve({"/c.tgz": _send(b"x")})
    answers = []

    def rebinding(host, port, *args, **kwargs):
        address = "192.88.99.1" if not answers else "127.0.0.1"  # 192.88.99.1: public, nobody listening here
        answers.append(address)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    monkeypatch.setenv("MXBENCH_DOWNLOAD_TIMEOUT_S", "2")
    policy = download.SourcePolicy.from_env([tmp_path])
    with pytest.raises(MxbenchError, match="cannot download CIFAR-10 from http://rebind.example"):
        download.fetch(f"http://rebind.example:{server.server_port}/c.tgz", tmp_path / "downloads", policy)
    assert answers and server.seen == []


@pytest.mark.parametrize("address, reached", [
    ("64:ff9b::a9fe:a9fe", "169.254.169.254"),  # NAT64, well-known prefix: the cloud metadata service
    ("64:ff9b::a00:1", "10.0.0.1"),
    ("64:ff9b:1::a00:1", None),  # NAT64, local-use prefix: refused whatever it embeds
    ("64:ff9b:1:ffff::808:808", None),
    ("2002:a9fe:a9fe::1", "169.254.169.254"),  # 6to4
    ("2002:c0a8:0101::1", "192.168.1.1"),
    ("::a9fe:a9fe", "169.254.169.254"),  # IPv4-compatible (::169.254.169.254)
    ("::7f00:1", "127.0.0.1"),
    ("::ffff:a00:1", "10.0.0.1"),  # IPv4-mapped
    ("::ffff:0:a9fe:a9fe", "169.254.169.254"),  # SIIT's IPv4-translated form (::ffff:0:a.b.c.d)
    ("::ffff:0:7f00:1", "127.0.0.1"),
    ("fec0::1", None),  # site-local (deprecated, RFC 3879): private to a site, ipaddress calls it global
    ("feff:ffff::1", None),
])
def test_an_ipv6_address_that_reaches_a_private_ipv4_one_is_refused(tmp_path, monkeypatch, address, reached):
    """A name resolving to an IPv6 address that a NAT64 translator, a 6to4 relay or the IPv4 stack
    turns into a private or link-local IPv4 address is refused like that IPv4 address."""
    import socket

    answer = [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, 80, 0, 0))]
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port, *a, **k: answer)
    policy = download.SourcePolicy.from_env([tmp_path])
    with pytest.raises(download.RefusedAddress, match="a loopback, private, link-local or reserved address") as refused:
        policy.addresses("inside.example", 80)
    if reached:
        assert f"(IPv4 {reached})" in str(refused.value)


@pytest.mark.parametrize("address", ["64:ff9b::808:808", "2002:808:808::1", "2606:4700:4700::1111", "8.8.8.8",
                                     "::ffff:0:808:808"])
def test_an_address_that_reaches_a_public_one_is_allowed(tmp_path, monkeypatch, address):
    import socket

    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    monkeypatch.setattr(socket, "getaddrinfo",
                        lambda host, port, *a, **k: [(family, socket.SOCK_STREAM, 6, "", (address, port))])
    assert download.SourcePolicy.from_env([tmp_path]).addresses("public.example", 80)
