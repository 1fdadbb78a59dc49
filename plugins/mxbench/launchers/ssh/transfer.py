"""Files between this worker and an SSH host over SFTP, for ``ssh.SshLauncher``: the prepared data
set staged on a host (skipped when the host's manifest already matches), and a run's rank logs and
telemetry brought back, bounded in names, bytes and files (``fetch_outputs``: what a host lists is
untrusted)."""
import itertools
import json
import os
import posixpath
import tempfile
import threading
from pathlib import Path
from typing import Optional

from mxbench.launchers.ssh.commands import DATA_FILES, SshHost, output_name_ok
from mxbench.run_folder import RunFolder, sha256_of
from mxbench_train.errors import MxbenchError

MANIFEST = "MANIFEST.json"  # on a host: what was copied, by checksum
# what a run brings back from its hosts: rank logs and GPU CSVs of a 300-epoch, 8-GPU run are
# tens of MB; these only stop a host that sends without end (env overrides, in bytes)
FETCH_FILE_MAX_BYTES = 256 << 20  # MXBENCH_FETCH_FILE_MAX_BYTES
FETCH_RUN_MAX_BYTES = 1 << 30  # MXBENCH_FETCH_RUN_MAX_BYTES, all hosts of one run together
FETCH_HOST_MAX_NAMES = 1000  # names read from one host's run folder listing (a real one lists a few per role)
FETCH_FILE_OVERHEAD = 4096  # what each file costs the run's byte budget besides its bytes: empty files are not free
FETCH_CHUNK = 1 << 16
# what a set-up command (probe, quiet probe, build, work folder) may print on its stdout, and on its
# stderr: its answer is one JSON line, its error a few lines
ANSWER_MAX_BYTES = 1 << 20  # MXBENCH_SSH_ANSWER_MAX_BYTES
FETCHING = ".fetching-"  # a fetched file's temporary name, in the run folder, until it is whole


def local_manifest(data_dir: Path) -> dict:
    """{file: {size, sha256}} of the data set, checksums cached beside it by size and mtime."""
    cache_path = data_dir / ".sha256.json"
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    manifest, changed = {}, False
    for name in DATA_FILES:
        try:
            st = (data_dir / name).stat()
        except OSError:
            raise MxbenchError(f"the prepared data set {data_dir} lacks {name}") from None
        entry = cache.get(name, {})
        if entry.get("size") != st.st_size or entry.get("mtime_ns") != st.st_mtime_ns:
            entry = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256_of(data_dir / name)}
            cache[name], changed = entry, True
        manifest[name] = {"size": entry["size"], "sha256": entry["sha256"]}
    if changed:
        tmp = cache_path.with_name(f".sha256.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(cache))
        tmp.replace(cache_path)
    return manifest


def _remote_json(sftp, path: str):
    try:
        with sftp.open(path, "r") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


def stage(sftp, remote_dir: str, data_dir: Path, want: dict) -> bool:
    """Copy the data set into ``remote_dir`` unless it is there already; copied?

    "There" means: the host's manifest lists the same checksums, and each file still has the size
    and modification time it had when copied (a file changed since is copied again).
    """
    manifest = posixpath.join(remote_dir, MANIFEST)
    have = _remote_json(sftp, manifest) or {}
    if have.get("files") == want and all(
            _size_mtime(sftp, posixpath.join(remote_dir, name)) == [want[name]["size"], have["mtimes"].get(name)]
            for name in want):
        return False
    _makedirs(sftp, remote_dir)
    try:
        sftp.remove(manifest)  # a copy cut short must not look complete
    except OSError:
        pass
    mtimes = {}
    for name in want:  # under a temporary name, so a half-copied file never looks complete
        tmp = posixpath.join(remote_dir, f".{name}.partial")
        sftp.put(str(data_dir / name), tmp, confirm=True)
        sftp.posix_rename(tmp, posixpath.join(remote_dir, name))
        mtimes[name] = _size_mtime(sftp, posixpath.join(remote_dir, name))[1]
    tmp = posixpath.join(remote_dir, f".{MANIFEST}.partial")
    with sftp.open(tmp, "w") as f:
        f.write(json.dumps({"files": want, "mtimes": mtimes}, indent=1, sort_keys=True))
    sftp.posix_rename(tmp, manifest)
    return True


def _size_mtime(sftp, path: str):
    try:
        st = sftp.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime]


def check_shared(sftp, host: SshHost, remote_dir: str, want: dict):
    wrong = [name for name in want if _size(sftp, posixpath.join(remote_dir, name)) != want[name]["size"]]
    if wrong:
        raise MxbenchError(f"{host}: the shared data folder {remote_dir} (mxbench_data_dir) lacks the prepared "
                           f"{', '.join(wrong)} (or holds other versions of them)")


def _size(sftp, path: str) -> Optional[int]:
    try:
        return sftp.stat(path).st_size
    except OSError:
        return None


def _makedirs(sftp, path: str):
    parts = []
    while path not in ("/", ""):
        parts.append(path)
        path = posixpath.dirname(path)
    for part in reversed(parts):
        try:
            sftp.mkdir(part)
        except OSError:
            if _size(sftp, part) is None:
                raise


def fetch_file_max_bytes() -> int:
    return _env_bytes("MXBENCH_FETCH_FILE_MAX_BYTES", FETCH_FILE_MAX_BYTES)


def fetch_run_max_bytes() -> int:
    return _env_bytes("MXBENCH_FETCH_RUN_MAX_BYTES", FETCH_RUN_MAX_BYTES)


def answer_max_bytes() -> int:
    return _env_bytes("MXBENCH_SSH_ANSWER_MAX_BYTES", ANSWER_MAX_BYTES)


def _env_bytes(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else default


class ByteBudget:
    """Bytes one run may still bring back, over all its hosts."""

    def __init__(self, total: int):
        self.total = self.left = total


class FetchProblems(MxbenchError):
    """What ``fetch_outputs`` refused or could not bring back. ``whole``: everything it would take
    was fetched, and only names it never takes were left (the host's folder holds nothing more to
    fetch, so it may go)."""

    def __init__(self, message: str, whole: bool):
        super().__init__(message)
        self.whole = whole


def fetch_outputs(sftp, remote_dir: str, run_folder: RunFolder, where: str = "the host",
                  budget: Optional[ByteBudget] = None, done: Optional[set] = None):
    """Bring the rank logs and telemetry back (plain files only: not ``pids/``).

    What a host lists is untrusted: only the first FETCH_HOST_MAX_NAMES names are read; a name is
    taken only when ``output_name_ok``; a file is only ever created, never written over an existing
    one or through a symlink, and lands whole or not at all (``_fetch_file``); at most fetch_file_max_bytes() a file and
    ``budget`` a run are read, each file costing FETCH_FILE_OVERHEAD more (so that empty files
    cannot fill the worker's inodes). Whatever was refused or cut, the rest is still fetched, then
    one error (FetchProblems) names ``where`` and each file. ``done``: the names an earlier try of
    this fetch brought (skipped; each one fetched now is added), so a retry after a lost link goes on.
    """
    import errno
    import stat

    budget = budget or ByteBudget(fetch_run_max_bytes())
    done = set() if done is None else done
    file_max = fetch_file_max_bytes()
    problems, refused = [], 0
    # read lazily, never past the cap: a host may list names without end. Stopped early, the
    # listing leaves its folder handle open; it goes with the SFTP session, closed after the fetch.
    listing = sftp.listdir_iter(remote_dir)
    try:
        entries = list(itertools.islice(listing, FETCH_HOST_MAX_NAMES + 1))
    except UnicodeDecodeError:
        raise MxbenchError(f"{where}: the run folder {remote_dir} lists a name that is not UTF-8") from None
    finally:
        listing.close()
    if len(entries) > FETCH_HOST_MAX_NAMES:
        entries.pop()
        problems.append(f"it lists more than {FETCH_HOST_MAX_NAMES} names: the rest were not read")
    for entry in entries:
        name = entry.filename
        if not stat.S_ISREG(entry.st_mode or 0) or name in done:
            continue
        shown = repr(name)[:80]
        if not output_name_ok(name):
            problems.append(f"refused {shown}: not a plain name of a run output")
            refused += 1
            continue
        if budget.left < FETCH_FILE_OVERHEAD:
            problems.append(f"{shown} not fetched: the run's {budget.total} bytes (MXBENCH_FETCH_RUN_MAX_BYTES) "
                            f"are used up (each file counts {FETCH_FILE_OVERHEAD} bytes more than its size)")
            continue
        limit = min(file_max, budget.left - FETCH_FILE_OVERHEAD)
        try:
            written, cut = _fetch_file(sftp, posixpath.join(remote_dir, name), run_folder.path / name, limit,
                                       entry.st_size)
        except FileExistsError:
            problems.append(f"refused {shown}: the run folder has a file of that name already")
            continue
        except OSError as exc:
            if exc.errno != errno.ENAMETOOLONG:  # a file system with a shorter limit than NAME_MAX_BYTES
                raise
            problems.append(f"refused {shown}: a longer name than this file system takes")
            refused += 1
            continue
        done.add(name)
        budget.left -= FETCH_FILE_OVERHEAD + written
        if cut:
            cap = "MXBENCH_FETCH_FILE_MAX_BYTES" if limit == file_max else "MXBENCH_FETCH_RUN_MAX_BYTES"
            problems.append(f"{shown} cut at {limit} bytes ({cap}); the rest was not read")
    if problems:
        more = f"; and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise FetchProblems(f"{where}: fetching the run folder {remote_dir}: {'; '.join(problems[:10])}{more}",
                            whole=refused == len(problems))


def _fetch_file(sftp, remote_path: str, local_path: Path, limit: int, size_hint=None):
    """At most ``limit`` bytes of a remote file into a new local one: (bytes written, whether more
    was there). Raises FileExistsError where the local name is taken (a symlink included). The bytes
    go to a temporary file of a name no host can give (``.fetching-*``: mkstemp, O_EXCL), linked to
    the name once complete (a link never replaces a file), so a fetch cut short leaves no half file."""
    if os.path.lexists(local_path):
        raise FileExistsError(local_path)
    fd, tmp = tempfile.mkstemp(prefix=FETCHING, dir=local_path.parent)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as out, sftp.open(remote_path, "rb") as src:
            written, cut = _copy(src, out, limit, size_hint)
        os.link(tmp, local_path)
        return written, cut
    finally:
        os.unlink(tmp)


def _copy(src, out, limit: int, size_hint) -> tuple:
    if size_hint:
        src.prefetch(min(size_hint, limit))  # requests in flight together, as sftp.get does
    written = 0
    while True:
        chunk = src.read(min(FETCH_CHUNK, limit + 1 - written))
        if not chunk:
            return written, False
        if written + len(chunk) > limit:
            out.write(chunk[:limit - written])
            return limit, True
        out.write(chunk)
        written += len(chunk)
