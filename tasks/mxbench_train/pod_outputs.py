"""Run one role in a Kubernetes pod, then hand its output files back through the pod log.

A pod's files vanish with the pod, and the Airflow worker that launched it shares no folder
with it. The role writes its rank logs and telemetry into an ``emptyDir``; when it exits, this
wrapper prints that folder as one framed block (a base64 tar.gz between two marker lines) on
stdout, so it lands in the pod log, which the launcher reads again once the pod has ended and
unpacks into the run folder. The launcher trusts none of it: the block is read with a size
limit, and unpacking writes only regular files inside the run folder, never over the launcher's
own records, within size caps counted while extracting (the decompressed stream and tar's header
records included). The role's exit status is passed on (128 + n for signal n, as a shell and the
kubelet report it). Stdlib only.
"""
import base64
import hashlib
import io
import json
import os
import posixpath
import re
import signal
import socket
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

from .host_watch import POD_ENV
from .localhost import interfaces, network_namespace

BEGIN = "=== mxbench outputs v1 begin ==="
END = "=== mxbench outputs v1 end sha256="
# the block, compressed: base64 makes it a third bigger, and the kubelet rotates a container's log
# at 10 MiB by default (the API serves only the current file); past this the block says what it left out
MAX_BYTES = 4 * 1024 * 1024
LINE = 76
NETWORK_READINGS = "pod-network"  # the folder of each pod's reading of its own network


def run_role(outputs: str, argv: Sequence[str]) -> int:
    """Run ``argv``, forward SIGTERM/SIGINT to it, then print ``outputs``.

    The role stays in this process group: whatever stops the container's processes (the
    kubelet, or the stand-in, which signals the container's group) stops the role too."""
    Path(outputs).mkdir(parents=True, exist_ok=True)
    write_network_reading(Path(outputs))
    try:
        # the role's host watch must know it sees only the pod's processes, not its node's
        child = subprocess.Popen(list(argv), env={**os.environ, POD_ENV: "1"})
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


def write_network_reading(outputs: Path) -> None:
    """What this pod reads of its own network: its network namespace and interfaces (``localhost``),
    as ``pod-network/<HOSTNAME>.json`` of its outputs (HOSTNAME: the pod's name, its node's under
    hostNetwork), for the report to say which pod network the run used."""
    reading = {"netns": network_namespace(), "interfaces": interfaces()}
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", os.environ.get("HOSTNAME") or socket.gethostname())
    folder = outputs / NETWORK_READINGS
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(reading) + "\n")


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


# What the Airflow worker accepts back from a pod (its image and output are untrusted): the block
# is read into memory up to MAX_BLOCK_CHARS (MAX_BYTES as base64 lines, with room to spare), and
# unpacked up to these sizes, counted as it is extracted: 4 MiB of gzip can expand 1000:1
MAX_BLOCK_CHARS = 2 * MAX_BYTES
MAX_MEMBER_BYTES = 64 << 20  # one file (a rank log of a long run is a few MiB)
MAX_UNPACKED_BYTES = 256 << 20  # every file of one pod together
MAX_MEMBERS = 1000
# tarfile reads a header record (a GNU long name, pax attributes) whole into memory before unpack
# sees the member it describes: one longer than any real path needs is refused from its declared
# size, and what the whole stream decompresses to is capped too (the files, plus this much of
# headers and padding for each)
MAX_HEADER_RECORD_BYTES = 64 << 10
HEADER_RECORD_TYPES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                       tarfile.SOLARIS_XHDTYPE)
HEADER_BYTES_PER_MEMBER = 8 << 10


class OutputsBlock:
    """Picks the outputs block out of a pod log read line by line; every other line is the log's own.

    Keeps at most ``max_chars`` of the block, so that a log of any size reads in bounded memory;
    the last block wins (the real one is printed after everything the role printed)."""

    def __init__(self, max_chars: int = MAX_BLOCK_CHARS):
        self.max_chars = max_chars
        self.inside = False
        self._body: List[str] = []
        self._chars = 0
        self._data: Optional[bytes] = None
        self._skipped: List[str] = []
        self._error: Optional[str] = None

    def feed(self, line: str) -> bool:
        """Take one line (without its newline); whether it is outside the block."""
        if line == BEGIN:
            self.inside, self._body, self._chars = True, [], 0
            self._data, self._skipped, self._error = None, [], None
            return False
        if not self.inside:
            if line.startswith(END):
                self._error = "the outputs block in the pod log has lost its beginning (a rotated log?)"
            return True
        if line.startswith(END):
            self.inside = False
            self._end(line)
        else:
            self._chars += len(line)
            if self._chars <= self.max_chars:
                self._body.append(line)
            else:
                self._body = []  # over: what came is dropped, the block is refused at its end
        return False

    def _end(self, line: str) -> None:
        if self._chars > self.max_chars:
            self._error = f"the outputs block in the pod log is over {self.max_chars} characters"
            return
        checksum, _, rest = line[len(END):].partition(" skipped=")
        try:
            data = base64.b64decode("".join(self._body))
        except ValueError:
            data = b""
        self._body = []
        if hashlib.sha256(data).hexdigest() != checksum:
            self._error = "the outputs block in the pod log fails its checksum"
            return
        self._data = data
        self._skipped = [s for s in rest.rstrip(" =").split(",") if s and s != "-"]

    def result(self) -> Tuple[Optional[bytes], List[str]]:
        """(the bundle's bytes or None, files it left out); BundleError for a block cut off, too big,
        or failing its checksum."""
        if self.inside:
            raise BundleError("the outputs block in the pod log is cut off")
        if self._error:
            raise BundleError(self._error)
        return self._data, self._skipped


def member_path(name: str) -> Optional[str]:
    """A member's name as a path inside the folder it is unpacked into (``./a`` and ``x/../a`` are
    ``a``); None when it names the folder itself or anything outside it."""
    normal = posixpath.normpath(name) if name else "."
    if normal.startswith("/") or normal == "." or normal == ".." or normal.startswith("../"):
        return None
    return normal


def unpack(data: bytes, dest: Path, keep: Iterable[str] = (), max_member: int = MAX_MEMBER_BYTES,
           max_total: int = MAX_UNPACKED_BYTES, max_members: int = MAX_MEMBERS) -> List[str]:
    """Extract a bundle into ``dest``: regular files only, nothing outside ``dest``, nothing whose
    first path part (after normalising) is in ``keep`` (the launcher's own records), each file at
    most ``max_member`` bytes and all of them ``max_total``. Returns the names written; raises
    BundleError naming what it refused (after writing the rest), or at once when the sizes the
    members declare pass ``max_total``, when the whole stream decompresses past ``max_total`` and
    HEADER_BYTES_PER_MEMBER for each member, or on a header record over MAX_HEADER_RECORD_BYTES
    or a sparse file (nothing more is decompressed)."""
    dest = Path(dest).resolve()
    keep = set(keep)
    written, refused, declared = [], [], 0
    stream = _CappedGunzip(data, max_total + max_members * HEADER_BYTES_PER_MEMBER + tarfile.RECORDSIZE)
    try:
        # streamed ("r|"): the archive is decompressed as it is read, never listed first
        with tarfile.open(fileobj=stream, mode="r|", tarinfo=_BundleMember) as tar:
            for count, member in enumerate(tar, 1):
                if count > max_members:
                    raise BundleError(f"the outputs hold more than {max_members} files")
                declared += max(0, member.size)  # a refused member is decompressed too, to skip it
                if declared > max_total:
                    raise BundleError(f"the outputs expand past {max_total} bytes: nothing more was unpacked")
                name = member_path(member.name)
                why = ("is not a regular file" if not member.isfile()
                       else "leaves the run folder" if name is None
                       else "would overwrite the launcher's own records" if name.split("/")[0] in keep
                       else f"is over {max_member} bytes" if member.size > max_member
                       else None)
                target = dest / name if why is None else None
                if target is not None and not _inside(target.parent, dest):
                    why = "leaves the run folder (through a link)"
                if why:
                    refused.append(f"{_shown(member.name)} {why}")
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                _copy_capped(tar.extractfile(member), target, max_member)
                written.append(name)
    except BundleError:
        raise
    # tarfile reads a chain of header records by recursion, and some malformed headers raise ValueError
    except (tarfile.TarError, OSError, EOFError, zlib.error, RecursionError, ValueError) as exc:
        raise BundleError(f"the outputs bundle cannot be unpacked: {exc}") from None
    if refused:
        more = f" (and {len(refused) - 3} more)" if len(refused) > 3 else ""
        raise BundleError(f"files of the outputs were refused: {'; '.join(refused[:3])}{more}")
    return written


class _CappedGunzip:
    """The bundle's gzip, decompressed as tarfile reads it, ``limit`` bytes at most: past that it raises."""

    def __init__(self, data: bytes, limit: int):
        self._data = memoryview(data)
        self._read_to = 0
        self._pending = b""  # input fed to zlib that it has not decompressed yet
        self._inflate = zlib.decompressobj(31)  # 31: a gzip wrapper
        self.limit = limit
        self.total = 0

    def read(self, size: int) -> bytes:
        out = b""
        while not out and not self._inflate.eof:
            if not self._pending:  # fed in small pieces: zlib copies what is left of its input on each call
                self._pending = self._data[self._read_to:self._read_to + (64 << 10)]
                self._read_to += len(self._pending)
                if not self._pending:
                    break  # cut off: tarfile says so
            out = self._inflate.decompress(self._pending, size)
            self._pending = self._inflate.unconsumed_tail
        self.total += len(out)
        if self.total > self.limit:
            raise BundleError(f"the outputs bundle decompresses past {self.limit} bytes (its files and their tar "
                              "headers together): nothing more was unpacked")
        return out


class _BundleMember(tarfile.TarInfo):
    """tarfile's member, refusing what tarfile would read whole into memory before unpack sees it."""

    @classmethod
    def frombuf(cls, buf, encoding, errors):
        info = super().frombuf(buf, encoding, errors)
        if info.type in HEADER_RECORD_TYPES and info.size > MAX_HEADER_RECORD_BYTES:
            raise BundleError(f"the outputs bundle holds a tar header record (a long name or pax attributes) of "
                              f"{info.size} bytes, over the {MAX_HEADER_RECORD_BYTES} allowed: nothing more was "
                              "unpacked")
        if info.type == tarfile.GNUTYPE_SPARSE:
            raise _sparse(info.name)
        return info

    def _proc_gnusparse_10(self, next, pax_headers, tarfile):  # a sparse file announced by pax attributes
        raise _sparse(next.name)


def _sparse(name: str) -> BundleError:
    # tarfile reads a sparse file's map whole into memory, unbounded for GNU sparse 1.0; pack never writes one
    return BundleError(f"the outputs bundle holds a sparse file ({_shown(name)}): nothing more was unpacked")


def _inside(folder: Path, root: Path) -> bool:
    resolved = folder.resolve()
    return resolved == root or root in resolved.parents


def _shown(name: str) -> str:
    """A member name as an error may quote it: printable, and short."""
    text = ascii(name)
    return text if len(text) <= 80 else text[:77] + "..."


def _copy_capped(source, target: Path, limit: int) -> None:
    """Copy at most ``limit`` bytes, counted as they come; more removes the file and raises."""
    # O_NOFOLLOW: a link planted at the target's name is not followed
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    copied = 0
    with os.fdopen(fd, "wb") as out:
        while chunk := source.read(1 << 20):
            copied += len(chunk)
            if copied > limit:
                break
            out.write(chunk)
    if copied > limit:
        target.unlink()
        raise BundleError(f"{_shown(target.name)} is over {limit} bytes")
