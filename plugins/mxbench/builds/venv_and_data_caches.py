"""The caches mxbench fills, and their pruning: one training venv per MXNet build
(``$MXBENCH_HOME/envs``, about 700 MB each) and prepared data sets (``$MXBENCH_HOME/data``:
``synthetic-v*-N`` generated sources, ``rec-*`` RecordIO folders with their downloads).

Each cache entry ``<root>/<name>`` has a lock file beside it, ``<root>/<name>.lock``. Whoever
uses an entry holds it shared (a run training from a data set or with a build's venv,
``stages.run_stage.run_one``); whoever makes one holds it exclusively (``mxnet_builds.ensure_venv``); pruning
takes it exclusively without waiting, so an entry in use is skipped, never removed. A ``rec-*``
folder being converted is guarded by the converter's own lock (``<folder>/.lock``,
``mxbench_train.cifar10.prepare``), a ``synthetic-*`` source by its generator's
(``pipeline.synthetic_source``) and by its ``rec-`` twin's converter, which reads it; pruning
tries those too. Each use stamps ``<name>/.mxbench-last-used`` (its modification time is the
last use; an entry from before the stamp counts from its own modification time).

Pruning keeps the N most recently used entries of each kind (``MXBENCH_KEEP_BUILDS``,
``MXBENCH_KEEP_DATA``) and prints what it removed and the bytes freed: in a task, the task log.
Only entries whose names mxbench makes are touched; anything else under those folders (an
administrator's own archive) never is. No Airflow import.
"""
import contextlib
import dataclasses
import datetime as dt
import errno
import fcntl
import os
import re
import shutil
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

from mxbench import config
from mxbench_train.errors import MxbenchError

STAMP = ".mxbench-last-used"


@dataclasses.dataclass(frozen=True)
class Kind:
    """One kind of cache entry: what it is called in the log, which names are its, and the
    setting that says how many to keep."""

    what: str
    names: "re.Pattern[str]"
    setting: str
    default_keep: int
    setting_counts: str  # what the setting's number counts, for its error message


BUILD_VENVS = Kind("build venv", re.compile(r"mxnet[A-Za-z0-9._-]*-[0-9a-f]{10}"), "MXBENCH_KEEP_BUILDS", 3,
                   "build venvs")
_DATA_SETS = "data sets of each kind (synthetic sources, prepared data sets)"
SYNTHETIC_SOURCES = Kind("synthetic source", re.compile(r"synthetic-v[0-9]+-[0-9]+"), "MXBENCH_KEEP_DATA", 4,
                         _DATA_SETS)
PREPARED_DATA = Kind("prepared data set", re.compile(r"rec-[A-Za-z0-9._-]+"), "MXBENCH_KEEP_DATA", 4, _DATA_SETS)
DATA_KINDS = (SYNTHETIC_SOURCES, PREPARED_DATA)


@dataclasses.dataclass(frozen=True)
class Pruned:
    path: Path
    kind: str
    bytes: int
    last_used: float


def keep_count(kind: Kind) -> int:
    """How many entries of ``kind`` to keep: its setting, a whole number of at least 1."""
    text = os.environ.get(kind.setting, "").strip()
    if not text:
        return kind.default_keep
    if not text.isdigit() or int(text) < 1:
        raise MxbenchError(f"{kind.setting}={text!r}: expected a whole number of at least 1 "
                           f"(how many {kind.setting_counts} to keep; default {kind.default_keep})")
    return int(text)


def _roots():
    return ((config.home() / "envs", (BUILD_VENVS,)), (config.data_dir(), DATA_KINDS))


def entry_of(path, roots=None) -> Optional[Path]:
    """The cache entry that ``path`` lies in (``<envs>/<venv>/bin/python`` -> ``<envs>/<venv>``),
    or None for a path outside the caches (``.venv/train``, an administrator's data folder)."""
    # absolute, not resolved: a venv's bin/python is a link to the base interpreter
    path = Path(os.path.abspath(path))
    for root, kinds in roots or _roots():
        try:
            first = path.relative_to(os.path.abspath(root)).parts[:1]
        except ValueError:
            continue
        if first and any(kind.names.fullmatch(first[0]) for kind in kinds):
            return Path(os.path.abspath(root)) / first[0]
    return None


def lock_path(entry: Path) -> Path:
    return entry.parent / f"{entry.name}.lock"


def _lock(path: Path, flags: int, create: bool = True) -> Optional[int]:
    """A descriptor holding ``flock(flags)`` on the file now at ``path``; None when ``LOCK_NB``
    finds it held (or, with ``create=False``, when there is no such file). Pruning unlinks lock
    files, and a lock on an unlinked one guards nothing: after waiting, check the path still
    names the file locked, else lock the new one."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0), 0o644)
        except FileNotFoundError:
            if create:
                raise
            return None
        try:
            fcntl.flock(fd, flags)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def _stamp(entry: Path) -> None:
    if entry.is_dir():
        (entry / STAMP).write_text(dt.datetime.now(dt.timezone.utc).isoformat() + "\n")


def last_used(entry: Path) -> float:
    try:
        return (entry / STAMP).stat().st_mtime
    except OSError:
        return entry.stat().st_mtime


@contextlib.contextmanager
def using(entry: Path) -> Iterator[Path]:
    """Hold cache entry ``entry`` shared while the block uses it (pruning then skips it), and
    stamp its last use."""
    entry = Path(entry)
    entry.parent.mkdir(parents=True, exist_ok=True)
    fd = _lock(lock_path(entry), fcntl.LOCK_SH)
    try:
        _stamp(entry)
        yield entry
    finally:
        os.close(fd)


@contextlib.contextmanager
def making(entry: Path) -> Iterator[Path]:
    """Hold cache entry ``entry`` exclusively while the block makes it: concurrent makers wait
    for one another, and pruning skips it."""
    entry = Path(entry)
    entry.parent.mkdir(parents=True, exist_ok=True)
    fd = _lock(lock_path(entry), fcntl.LOCK_EX)
    try:
        yield entry
    finally:
        os.close(fd)


@contextlib.contextmanager
def in_use(*paths, roots=None) -> Iterator[None]:
    """Hold, shared, every cache entry that one of ``paths`` lies in (a data set folder, a build
    venv's python); paths outside the caches, and None, are ignored."""
    entries = sorted({entry for path in paths if path and (entry := entry_of(path, roots))})
    with contextlib.ExitStack() as stack:
        for entry in entries:
            stack.enter_context(using(entry))
        yield


def pruned_since_made(data: dict, build_python: Optional[str]) -> Optional[str]:
    """Why a run cannot train when its prepared data set or its build's venv was pruned
    after prepare_data or resolve_build made it: a cleared or retried run task of an
    older DAG run. None when both are there (or lie outside the caches). Asked while the run holds
    them, so that they stay."""
    def pruned(path) -> bool:
        entry = entry_of(path) if path else None
        return entry is not None and not entry.is_dir()

    if pruned(data["dir"]):
        return (f"the prepared data {data['dir']} was pruned since prepare_data ran "
                f"({PREPARED_DATA.setting}): clear prepare_data too")
    if pruned(build_python):
        return (f"the MXNet build's training interpreter {build_python} was pruned since resolve_build ran "
                f"({BUILD_VENVS.setting}): clear resolve_build too")
    return None


def _guards(entry: Path, kind: Kind) -> List[Path]:
    """The lock files whose holders are using ``entry``, beyond its own: the converter's lock of a
    ``rec-*`` folder (it reads and writes there); for a synthetic source, the generator's lock
    (``pipeline.synthetic_source``) and the converter's lock of its ``rec-`` twin, which reads it."""
    if kind is PREPARED_DATA:
        return [entry / ".lock"]
    if kind is SYNTHETIC_SOURCES:
        return [entry.parent / f".{entry.name}.lock", entry.parent / f"rec-{entry.name}" / ".lock"]
    return []


def _hold_unused(entry: Path, kind: Kind) -> Optional[List[int]]:
    """Descriptors holding every lock of ``entry`` exclusively, or None when one is held by
    someone (the entry is in use; a guard that vanishes meanwhile counts as in use too)."""
    held: List[int] = []
    locks = [(lock_path(entry), True)] + [(guard, False) for guard in _guards(entry, kind) if guard.exists()]
    for path, create in locks:
        fd = _lock(path, fcntl.LOCK_EX | fcntl.LOCK_NB, create)
        if fd is None:
            for other in held:
                os.close(other)
            return None
        held.append(fd)
    return held


def _size(entry: Path) -> int:
    total = 0
    for folder, dirs, files in os.walk(entry):  # links are not followed: a venv links its python
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                pass
    return total


def _human(count: int) -> str:
    size = float(count)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{count} B"


def _when(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def prune(root, kind: Kind, keep: Optional[int] = None, log=print) -> List[Pruned]:
    """Remove the entries of ``kind`` under ``root`` beyond the ``keep`` most recently used (default:
    its setting), skipping any in use; print each removal, each entry kept because in use, and the
    total freed. Returns what was removed. A removal that fails is printed, not raised: pruning
    never fails the task that asked for it."""
    keep = keep_count(kind) if keep is None else keep
    root = Path(root)
    try:
        entries = [p for p in root.iterdir()
                   if kind.names.fullmatch(p.name) and p.is_dir() and not p.is_symlink()]
    except FileNotFoundError:
        return []
    used = {entry: last_used(entry) for entry in entries}
    ranked = sorted(entries, key=lambda e: (used[e], e.name), reverse=True)
    removed: List[Pruned] = []
    for entry in ranked[keep:]:
        held = _hold_unused(entry, kind)
        if held is None:
            log(f"mxbench: kept {kind.what} {entry.name} (past the {keep} most recently used): in use")
            continue
        try:
            if last_used(entry) != used[entry]:
                continue  # used between ranking and locking: no longer a candidate
            size = _size(entry)
            shutil.rmtree(entry)
            lock_path(entry).unlink(missing_ok=True)
            removed.append(Pruned(entry, kind.what, size, used[entry]))
            log(f"mxbench: pruned {kind.what} {entry} (last used {_when(used[entry])}): {_human(size)} freed")
        except OSError as exc:
            if exc.errno == errno.ENOENT and not entry.exists():
                continue  # another pruner removed it first
            log(f"mxbench: could not prune {kind.what} {entry}: {exc.strerror or exc}")
        finally:
            for fd in held:
                os.close(fd)
    if removed:
        log(f"mxbench: pruned {len(removed)} {kind.what}(s) under {root}, {_human(sum(p.bytes for p in removed))} "
            f"freed; keeping the {keep} most recently used ({kind.setting}={keep})")
    return removed


def prune_builds(root=None, current: Optional[Path] = None, log=print) -> List[Pruned]:
    """Prune the build venvs under ``root`` (default ``$MXBENCH_HOME/envs``), holding ``current``
    (the build just picked) in use meanwhile."""
    root = Path(root) if root is not None else config.home() / "envs"
    with contextlib.ExitStack() as stack:
        if current is not None:
            stack.enter_context(using(current))
        return prune(root, BUILD_VENVS, log=log)


def prune_data(data_root, used: Sequence = (), log=print) -> List[Pruned]:
    """Prune the data sets under ``data_root``, holding those that ``used`` lie in (the data set
    just prepared, its synthetic source) in use meanwhile."""
    data_root = Path(data_root)
    with in_use(*used, roots=[(data_root, DATA_KINDS)]):
        return [p for kind in DATA_KINDS for p in prune(data_root, kind, log=log)]
