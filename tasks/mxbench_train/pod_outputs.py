"""Run one role in a Kubernetes pod, then hand its output files back through the pod log.

A pod's files vanish with the pod, and the Airflow worker that launched it shares no folder
with it. The role writes its rank logs and telemetry into an ``emptyDir``; when it exits, this
wrapper prints that folder as one framed block (a base64 tar.gz between two marker lines) on
stdout, so it lands in the pod log, which the launcher fetches whole once the pod has ended and
unpacks into the run folder. The role's exit status is passed on (128 + n for signal n, as a
shell and the kubelet report it). Stdlib only.
"""
import base64
import hashlib
import io
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

BEGIN = "=== mxbench outputs v1 begin ==="
END = "=== mxbench outputs v1 end sha256="
# the block, compressed: base64 makes it a third bigger, and the kubelet rotates a container's log
# at 10 MiB by default (the API serves only the current file); past this the block says what it left out
MAX_BYTES = 4 * 1024 * 1024
LINE = 76


def run_role(outputs: str, argv: Sequence[str]) -> int:
    """Run ``argv``, forward SIGTERM/SIGINT to it, then print ``outputs``.

    The role stays in this process group: whatever stops the container's processes (the
    kubelet, or the stand-in, which signals the container's group) stops the role too."""
    Path(outputs).mkdir(parents=True, exist_ok=True)
    try:
        child = subprocess.Popen(list(argv))
    except OSError as exc:
        print(f"error: cannot start {argv[0]!r}: {exc.strerror}", file=sys.stderr, flush=True)
        return 127

    def forward(signum, _frame):  # a SIGTERM to this process alone (PID 1 of a container) reaches the role
        try:
            os.kill(child.pid, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    code = child.wait()
    sys.stdout.flush()
    print_bundle(outputs)
    return 128 - code if code < 0 else code


def print_bundle(folder: str, out=None) -> None:
    out = out or sys.stdout
    data, skipped = pack(Path(folder))
    encoded = base64.b64encode(data).decode()
    print(BEGIN, file=out)
    for i in range(0, len(encoded), LINE):
        print(encoded[i:i + LINE], file=out)
    print(f"{END}{hashlib.sha256(data).hexdigest()} skipped={','.join(skipped) or '-'} ===", file=out, flush=True)


def pack(folder: Path) -> Tuple[bytes, List[str]]:
    """Every regular file under ``folder`` as a tar.gz of at most MAX_BYTES, the biggest files left
    out first when it would be more; (data, names left out)."""
    files = sorted((p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()), key=lambda p: p.stat().st_size)
    skipped = []
    while True:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for path in files:
                tar.add(path, arcname=str(path.relative_to(folder)))
        if len(buffer.getvalue()) <= MAX_BYTES or not files:
            return buffer.getvalue(), skipped
        skipped.append(str(files.pop().relative_to(folder)))


class BundleError(ValueError):
    pass


def split_log(lines: Iterable[str]) -> Tuple[List[str], Optional[bytes], List[str]]:
    """(the log without the bundle, the bundle's bytes or None, files it left out). A bundle that
    is cut off or whose checksum fails raises BundleError."""
    kept, body, data, skipped, inside = [], [], None, [], False
    for line in lines:
        if line == BEGIN:
            inside, body = True, []
        elif inside and line.startswith(END):
            inside = False
            checksum, _, rest = line[len(END):].partition(" skipped=")
            data = base64.b64decode("".join(body))
            if hashlib.sha256(data).hexdigest() != checksum:
                raise BundleError("the outputs block in the pod log fails its checksum")
            skipped = [s for s in rest.rstrip(" =").split(",") if s and s != "-"]
        elif inside:
            body.append(line)
        elif line.startswith(END):
            raise BundleError("the outputs block in the pod log has lost its beginning (a rotated log?)")
        else:
            kept.append(line)
    if inside:
        raise BundleError("the outputs block in the pod log is cut off")
    return kept, data, skipped


def unpack(data: bytes, dest: Path, keep: Iterable[str] = ()) -> List[str]:
    """Extract a bundle into ``dest``; plain files only, nothing outside ``dest``, and nothing
    whose first path part is in ``keep`` (the launcher's own records). Returns the names written."""
    dest = Path(dest).resolve()
    written, keep = [], set(keep)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            target = (dest / member.name).resolve()
            if not member.isfile() or dest not in target.parents or member.name.split("/")[0] in keep:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tar.extractfile(member).read())
            written.append(member.name)
    return written


def files_of(data: bytes) -> Dict[str, int]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: m.size for m in tar.getmembers() if m.isfile()}
