"""An MXNet build's venv on a training host: made there on first use, reused after.

The SSH launcher measures the build a DAG run asks for (``mxbench.builds.mxnet_builds``) on every SSH host,
so each host needs that build's MXNet beside its own. Run on the host as the SSH user, with the
host's training interpreter (the one that has ``mxbench_train``):

``python -P -m mxbench_train.host_build --workdir W --spec-json JSON [--pip-timeout S] [--check-only]``

- ``W`` is the work folder ``host_workdir`` made; it is checked again (its owner, no one else
  may write to it or swap a folder above it) and ``W/builds`` is made 0700 and checked the same
  way: another local user must not plant a venv that the roles would run.
- ``JSON`` names the build: ``{"package": "mxnet==1.9.0", "version": "1.9.0", "spec": [...]}``,
  ``spec`` being what pip installs (``mxbench.builds.mxnet_builds.install_spec``: the package first).
- The venv, ``W/builds/<distribution>-<version>-<hash>``, is made with this interpreter's
  ``venv`` module (from a venv's python it bases on the real base interpreter), so it never sees
  this interpreter's site-packages and their MXNet. pip installs the spec with the host's own pip
  configuration and ``PIP_*`` environment; then the ``mxbench_train`` this interpreter imports
  is copied into the venv's site-packages, and ``import mxnet, mxbench_train`` must work there.
- A stamp, ``.mxbench-build.json``, written last, marks the venv done; one lock file per venv
  beside it makes concurrent callers (two tasks, two hosts sharing an NFS home) wait for one
  make. A venv without a valid stamp is remade from scratch; a failed or stopped make removes
  the half venv. When ``mxbench_train`` changes on the host, the stamp's digest of it no longer
  matches and only the trainer is copied again.
- ``--check-only`` makes and copies nothing: a missing or stale venv is an error.

It prints one JSON line, ``{"python", "made", "seconds", "mxnet_version", "venv"}``; a refusal or
failure is one ``error:`` line naming the build and the step, and exit status 2. Reuse is cheap:
folder checks, the stamp, and a digest of the trainer's files (and of a ``file:`` wheel, which keys
the venv with the spec); no pip, no ``import mxnet``.

The orchestration side's build venvs (``mxbench.builds.mxnet_builds.ensure_venv``) are made with the same
pieces: ``wheel_digest``, ``run_step``, ``matching_stamp``, ``write_stamp`` and the stamp file, and,
where mxbench is installed with no checkout, ``install_trainer``. Stdlib only.
"""
from __future__ import annotations  # annotations stay unevaluated: no typing import, which costs reuse time

import argparse
import collections
import contextlib
import fcntl
import hashlib
import json
import os
import re
import signal
import sys
import time

from .errors import MxbenchError
from .host_folders import DEFAULT_WORKDIR, check_above, check_own
from .redaction import redact

FORMAT = 1  # bump when the way a venv is made changes: every venv made before is then remade
STAMP = ".mxbench-build.json"
PIP_LOG = ".mxbench-pip.log"  # pip's own debug log of the install, kept in the venv
TRAINER = os.path.dirname(os.path.abspath(__file__))  # the mxbench_train package this interpreter imports
DEFAULT_PIP_TIMEOUT_S = 1800.0
VENV_TIMEOUT_S = 600.0
IMPORT_TIMEOUT_S = 300.0
SPEC_KEYS = ("package", "version", "spec")

# any PEP 508 direct reference, name[extras] @ URL: a package or a pin
DIRECT_REFERENCE = re.compile(r"\s*[A-Za-z0-9][A-Za-z0-9._-]*\s*(?:\[[^\]]*\])?\s*@\s*(?P<url>[^\s;]+)")
_PROJECT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# pip's words when it cannot reach a host: while it retries they are warnings, and its --log has
# them always (with PIP_RETRIES=0 its console says no more than "from versions: none")
_UNREACHABLE = re.compile(r"connection error|NewConnectionError|Failed to establish a new connection|"
                          r"ConnectTimeoutError|Read timed out|Temporary failure in name resolution|"
                          r"Name or service not known|Network is unreachable|No route to host|ProxyError|"
                          r"connection broken by")
# failures an unreachable index explains: nothing found, or a download that broke off
_NOT_FOUND = re.compile(r"Could not find a version|No matching distribution|" + _UNREACHABLE.pattern)
# the trainer's own version rule (mxbench_train.train.mxnet_version), and where the trainer came from
_IMPORT_CHECK = ("import json, mxnet, mxbench_train\n"
                 "from mxbench_train.train import mxnet_version\n"
                 "print(json.dumps({'mxnet_version': mxnet_version(mxnet), 'trainer': mxbench_train.__file__}))\n")


# the build --spec-json names, checked (parse_spec); distribution: the pip project, normalised (mxnet-cu112)
BuildSpec = collections.namedtuple("BuildSpec", "package version spec distribution")


class Stopped(BaseException):
    """SIGTERM, SIGHUP or SIGINT arrived (a killed task, a dropped SSH session): unwind and tidy up."""


# --- helpers the orchestration side shares (mxbench.builds.mxnet_builds imports them, and those below) ----

def clean_env() -> dict:
    """The environment for venv/pip: no PYTHONPATH/PYTHONHOME/VIRTUAL_ENV (the caller's) and no
    DMLC_* (importing mxnet with DMLC_ROLE set would start a kvstore role); PIP_* stay."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("DMLC_")}


def last_error_lines(output: str, count: int = 3) -> str:
    """The last ``count`` ERROR lines of a tool's output (else its last lines), joined by `` | ``,
    redacted: pip quotes the URL it failed on, credentials and all."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return redact(" | ".join((errors or lines)[-count:])) or "(no output)"


# --- the build, its venv and its stamp -------------------------------------------------------

def _one_line(value, what: str) -> str:
    if not isinstance(value, str):
        raise MxbenchError(f"--spec-json: {what} must be a string, not {type(value).__name__} {value!r}")
    if not value.strip():
        raise MxbenchError(f"--spec-json: {what} is empty")
    if any(ord(char) < 0x20 or char == "\x7f" for char in value):
        raise MxbenchError(f"--spec-json: {what} {redact(value)!r} is not a one-line string")
    return value


def parse_spec(text: str) -> BuildSpec:
    """``--spec-json``: an object with exactly package, version and spec; spec a non-empty list of
    one-line requirement strings whose first is the package. Anything else is refused by name."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise MxbenchError(f"--spec-json is not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise MxbenchError(f"--spec-json must be an object with {', '.join(SPEC_KEYS)}, not {type(raw).__name__}")
    unknown, missing = sorted(set(raw) - set(SPEC_KEYS)), [key for key in SPEC_KEYS if key not in raw]
    if unknown or missing:
        raise MxbenchError(f"--spec-json: {'unknown key(s) ' + ', '.join(unknown) if unknown else ''}"
                           f"{'; ' if unknown and missing else ''}{'missing ' + ', '.join(missing) if missing else ''}"
                           f"; expected {', '.join(SPEC_KEYS)}")
    spec = raw["spec"]
    if not isinstance(spec, list) or not spec:
        raise MxbenchError(f"--spec-json: spec must be a non-empty list of requirement strings, "
                           f"not {redact(repr(spec))}")
    for index, line in enumerate(spec):
        _one_line(line, f"spec[{index}]")
        if line.lstrip().startswith("-"):  # pip would take it as an option (--index-url=..., -e ...)
            raise MxbenchError(f"--spec-json: spec[{index}] {redact(line)!r} is a pip option, not a requirement")
    package, version = _one_line(raw["package"], "package"), _one_line(raw["version"], "version")
    if package != spec[0]:
        raise MxbenchError(f"--spec-json: package {redact(package)!r} must be spec[0], which is {redact(spec[0])!r}")
    name = _PROJECT_NAME.match(package)
    if not name:
        raise MxbenchError(f"--spec-json: package {redact(package)!r} does not start with a project name")
    return BuildSpec(package, version, list(spec), re.sub(r"[-_.]+", "-", name.group(0)).lower())


def file_sha256(path: str) -> str:
    """The SHA-256 of a file's bytes (OSError when it cannot be read)."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def wheel_digest(package: str) -> str | None:
    """The SHA-256 of the wheel ``package`` installs, which its venv is keyed by: a URL's ``#sha256=``, else a
    ``file:`` wheel's bytes, hashed on every call (a rebuilt wheel at the same path is another venv; about 0.1 s
    for a 100 MB CPU wheel); OSError when that file cannot be read. None for an index pin (and for a download
    without ``#sha256=``, which the orchestration side refuses before any venv is made)."""
    import urllib.parse

    direct = DIRECT_REFERENCE.match(package)
    if not direct:
        return None
    parts = urllib.parse.urlsplit(direct["url"])
    if parts.fragment.startswith("sha256="):
        return parts.fragment[len("sha256="):]
    if parts.scheme != "file":
        return None
    return file_sha256(urllib.parse.unquote(parts.path))


def _wheel_digest(build: BuildSpec) -> str | None:
    try:
        return wheel_digest(build.package)
    except OSError as exc:
        raise _failed(build, f"cannot read its wheel {exc.filename}: {exc.strerror or exc}") from None


def venv_path(builds: str, build: BuildSpec, digest: str | None = None) -> str:
    """``<builds>/<distribution>-<version>-<12 hex>``: the hash covers the way venvs are made, the
    spec, the wheel's SHA-256 (``digest``, from ``wheel_digest``) and this interpreter (major.minor
    and its base installation), so a changed pin, a rebuilt wheel or a new Python gets a new venv."""
    fields = {"format": FORMAT, "spec": build.spec, "python": "%d.%d" % sys.version_info[:2],
              "base_prefix": sys.base_prefix}
    if digest:  # an index pin's key stays as it was: its venvs are not remade
        fields["wheel_sha256"] = digest
    key = json.dumps(fields, sort_keys=True)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{build.distribution}-{build.version}")[:80]
    return os.path.join(builds, f"{safe}-{hashlib.sha256(key.encode()).hexdigest()[:12]}")


def _python(venv: str) -> str:
    return os.path.join(venv, "bin", "python")


def _trainer_files(source: str) -> list[str]:
    """The trainer package's files, relative to it and sorted; ``__pycache__`` is this host's
    bytecode, not the trainer."""
    files = []
    for folder, subfolders, names in os.walk(source):
        subfolders[:] = [name for name in subfolders if name != "__pycache__"]
        files += [os.path.relpath(os.path.join(folder, name), source) for name in names]
    return sorted(files)


def trainer_digest(source: str = TRAINER, copy_to: str | None = None) -> str:
    """SHA-256 over the trainer's file names and bytes. With ``copy_to``, the same bytes are
    written there as they are read, so the digest is the copy's even when the trainer changes
    meanwhile."""
    digest = hashlib.sha256()
    for relative in _trainer_files(source):
        with open(os.path.join(source, relative), "rb") as file:
            data = file.read()
        digest.update(f"{relative}\0{len(data)}\0".encode())
        digest.update(data)
        if copy_to:
            target = os.path.join(copy_to, relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as file:
                file.write(data)
    return digest.hexdigest()


def matching_stamp(venv: str, spec: list, digest: str | None = None) -> dict | None:
    """The venv's stamp (``STAMP``, written last when it was made) when it names ``spec`` and the wheel SHA-256
    ``digest`` (what was checked when it was made) and the venv's python still runs from there, else None. Both
    sides' check on every use: here and ``mxbench.builds.mxnet_builds``."""
    try:
        with open(os.path.join(venv, STAMP)) as file:
            stamp = json.load(file)
    except (OSError, ValueError):
        return None
    if not (isinstance(stamp, dict) and stamp.get("spec") == spec and stamp.get("wheel_sha256") == digest):
        return None
    return stamp if os.path.exists(_python(venv)) else None  # exists() follows the venv's symlink to its base


def read_stamp(venv: str, build: BuildSpec, digest: str | None = None) -> dict | None:
    """The venv's stamp when it marks a finished venv of ``build`` (and of the wheel with SHA-256
    ``digest``) whose python still runs from there, else None (no stamp, another spec, wheel or
    format, or its base interpreter is gone)."""
    stamp = matching_stamp(venv, build.spec, digest)
    if stamp is None or not (stamp.get("format") == FORMAT and isinstance(stamp.get("mxnet_version"), str)
                             and isinstance(stamp.get("trainer_digest"), str)):
        return None
    return stamp


def write_stamp(venv: str, stamp: dict) -> None:
    """Atomically: a reader sees the old stamp or the new one, never half of one."""
    tmp = os.path.join(venv, STAMP + ".tmp")
    with open(tmp, "w") as file:
        file.write(json.dumps(stamp, indent=1) + "\n")
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, os.path.join(venv, STAMP))


@contextlib.contextmanager
def _locked(venv: str):
    """Hold ``<venv>.lock`` exclusively: fcntl (POSIX) locks also hold across NFS clients."""
    fd = os.open(venv + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    import shutil  # here and in run_step, not at the top: only making needs them, and reuse must start fast

    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)  # never follows a symlink inside


# --- making ----------------------------------------------------------------------------------

def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _failed(build: BuildSpec, why: str) -> MxbenchError:
    return MxbenchError(f"cannot make the venv of MXNet build {redact(build.package)} on this host: {why}")


def _cannot_make_venvs(why: str) -> MxbenchError:
    return MxbenchError(f"{sys.executable} on this host cannot make venvs ({why}): install python3-venv there, "
                        "or give prebuilt interpreters in the connection's mxbench_builds")


def index_unreachable(output: str, pip_log: str) -> bool:
    """Did pip fail because it could not reach an index (or a wheel's host)? Its output or log
    says it could not connect, and it failed the way that makes it fail (nothing found, or a
    download broke off), not some other way."""
    return bool(_UNREACHABLE.search(output) or _UNREACHABLE.search(pip_log)) and bool(
        _NOT_FOUND.search(last_error_lines(output)))


def run_step(argv: list[str], step: str, timeout: float, failed, pip_log: str | None = None):
    """``argv`` run to completion in ``clean_env`` (a CompletedProcess, output as text); a failure raises
    ``failed(why)``: ``step`` and its last ERROR lines (and, for pip with ``pip_log``, whether no index could be
    reached). Both sides' runner: here and ``mxbench.builds.mxnet_builds``."""
    import subprocess

    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=clean_env(),
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise failed(f"{step} took over {timeout:.0f} s") from None
    except OSError as exc:
        raise failed(f"{step}: {exc}") from None
    if done.returncode:
        output = done.stdout + done.stderr
        hint = ""
        if pip_log is not None:
            try:
                with open(pip_log, errors="replace") as file:
                    log = file.read()
            except OSError:
                log = ""
            if index_unreachable(output, log):
                hint = ("pip could not reach a package index from this host (set PIP_INDEX_URL or the "
                        "connection's mxbench_builds map): ")
        raise failed(f"{hint}{step} failed (exit {done.returncode}): {last_error_lines(output)}")
    return done


def _run(argv: list[str], step: str, build: BuildSpec, timeout: float, pip_log: str | None = None):
    return run_step(argv, step, timeout, lambda why: _failed(build, why), pip_log)


def _site_packages(venv: str, build: BuildSpec) -> str:
    site = _run([_python(venv), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                "finding the venv's site-packages", build, 60).stdout.strip()
    if os.path.commonpath([os.path.realpath(site), os.path.realpath(venv)]) != os.path.realpath(venv):
        raise _failed(build, f"the venv's site-packages {site!r} is not inside it")
    return site


def install_trainer(venv: str, build: BuildSpec) -> str:
    """Copy this interpreter's ``mxbench_train`` into the venv's site-packages, replacing a copy
    there by renames (a role starting meanwhile sees the old copy or the new one); its digest."""
    target = os.path.join(_site_packages(venv, build), "mxbench_train")
    staging, old = target + ".new", target + ".old"  # not importable names
    try:
        for leftover in (staging, old):  # from a copy that was stopped
            _remove(leftover)
        digest = trainer_digest(copy_to=staging)
        if os.path.lexists(target):
            os.rename(target, old)
        os.rename(staging, target)
        _remove(old)
    except OSError as exc:
        raise _failed(build, f"copying the trainer {TRAINER} into {target}: {exc}") from None
    return digest


def _make(venv: str, build: BuildSpec, pip_timeout: float, wheel: str | None = None) -> dict:
    """Make the venv from scratch and stamp it (``wheel``: the SHA-256 its key has); its stamp."""
    import importlib.util

    started = time.monotonic()
    missing = [module for module in ("venv", "ensurepip") if importlib.util.find_spec(module) is None]
    if missing:
        raise _cannot_make_venvs(f"no {' or '.join(missing)} module")
    _remove(venv)  # a stale or half venv
    try:
        _run([sys.executable, "-I", "-m", "venv", venv], f"{sys.executable} -m venv", build, VENV_TIMEOUT_S)
    except MxbenchError as exc:
        if "ensurepip" in str(exc):  # Debian's python3 without python3-venv says so
            raise _cannot_make_venvs(str(exc)) from None
        raise
    pip_log = os.path.join(venv, PIP_LOG)
    _run([_python(venv), "-I", "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
          "--progress-bar", "off", "--log", pip_log, *build.spec],
         "pip install " + " ".join(map(redact, build.spec)), build, pip_timeout, pip_log=pip_log)
    digest = install_trainer(venv, build)
    done = _run([_python(venv), "-I", "-c", _IMPORT_CHECK], "import mxnet, mxbench_train", build, IMPORT_TIMEOUT_S)
    try:
        imported = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise _failed(build, "import mxnet, mxbench_train printed no version: "
                             f"{last_error_lines(done.stdout + done.stderr)}") from None
    if not os.path.realpath(imported["trainer"]).startswith(os.path.realpath(venv) + os.sep):
        raise _failed(build, f"the venv imports mxbench_train from {imported['trainer']}, not its own copy")
    stamp = {"format": FORMAT, "package": build.package, "version": build.version, "spec": build.spec,
             "python": list(sys.version_info[:2]), "base_prefix": sys.base_prefix,
             "wheel_sha256": wheel, "mxnet_version": imported["mxnet_version"], "trainer_digest": digest,
             "seconds": round(time.monotonic() - started, 1),
             "made_at": _utc_now()}
    write_stamp(venv, stamp)
    return stamp


def builds_folder(workdir: str, create: bool) -> str:
    """``<workdir>/builds``, the work folder (made 0700 when missing, with ``create``) checked as
    ``host_workdir`` checks it and the builds folder made (``create``) 0700 and checked the same way."""
    wanted = os.path.expanduser(workdir)
    if not os.path.isabs(wanted):
        raise MxbenchError(f"work folder {workdir!r} is not absolute here (is HOME set?)")
    try:
        if create:  # a host's first build may come before its first run (expand_variants makes it)
            os.makedirs(wanted, mode=0o700, exist_ok=True)
        real = os.path.realpath(wanted)
        if not os.path.isdir(real):
            raise MxbenchError(f"work folder {wanted} does not exist on this host (host_workdir makes it)")
        check_above(real)
        check_own(real, "work folder")
        builds = os.path.join(real, "builds")
        if create:
            try:
                os.mkdir(builds, 0o700)
            except FileExistsError:
                pass
        elif not os.path.lexists(builds):
            return builds  # nothing made yet: --check-only says so
        check_own(builds, "builds folder")
    except OSError as exc:
        raise MxbenchError(f"work folder {wanted}: {exc.strerror or exc}"
                           f"{' (' + exc.filename + ')' if exc.filename else ''}") from None
    return builds


def ensure(workdir: str, build: BuildSpec, pip_timeout: float = DEFAULT_PIP_TIMEOUT_S,
           check_only: bool = False) -> dict:
    """The build's venv on this host, made or updated unless ``check_only``; what ``main`` prints."""
    started = time.monotonic()
    wheel = _wheel_digest(build)
    venv = venv_path(builds_folder(workdir, create=not check_only), build, wheel)
    made = False
    stamp = read_stamp(venv, build, wheel)
    if check_only:
        if stamp is None:
            why = "not made" if not os.path.lexists(venv) else "its stamp is missing or for another spec"
            raise MxbenchError(f"MXNet build {redact(build.package)} has no venv on this host yet ({venv}: {why}); "
                               "run without --check-only to make it")
        if stamp["trainer_digest"] != trainer_digest():
            raise MxbenchError(f"MXNet build {redact(build.package)} has no venv on this host yet ({venv}: its copy "
                               f"of mxbench_train differs from {TRAINER}); run without --check-only to update it")
    elif stamp is None or stamp["trainer_digest"] != trainer_digest():
        try:
            with _locked(venv):
                stamp = read_stamp(venv, build, wheel)  # another caller may have made or updated it meanwhile
                if stamp is None:
                    try:
                        stamp, made = _make(venv, build, pip_timeout, wheel), True
                    except BaseException:
                        _remove(venv)  # no half venv stays behind, whatever stopped the make
                        raise
                elif stamp["trainer_digest"] != trainer_digest():
                    # the stamp keeps the old digest until the copy is whole: a stopped copy is redone next time
                    stamp["trainer_digest"] = install_trainer(venv, build)
                    stamp["trainer_copied_at"] = _utc_now()
                    write_stamp(venv, stamp)
        except Stopped as exc:
            raise MxbenchError(f"stopped by {exc} while making or updating the venv of MXNet build "
                               f"{redact(build.package)}; nothing half done will be used ({venv})") from None
        except OSError as exc:
            raise _failed(build, f"{exc.strerror or exc}{' (' + exc.filename + ')' if exc.filename else ''}") from None
    return {"python": _python(venv), "made": made, "seconds": round(time.monotonic() - started, 3),
            "mxnet_version": stamp["mxnet_version"], "venv": venv}


def _stop(signum, frame):
    raise Stopped(signal.Signals(signum).name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -P -m mxbench_train.host_build",
                                     description="Make (on first use) or reuse an MXNet build's venv on this host; "
                                                 "print its python as one JSON line")
    parser.add_argument("--workdir", default=DEFAULT_WORKDIR, help="absolute, or ~/... (default %(default)s)")
    parser.add_argument("--spec-json", required=True,
                        help='the build: {"package": ..., "version": ..., "spec": [package, requirement, ...]}')
    parser.add_argument("--pip-timeout", type=float, default=DEFAULT_PIP_TIMEOUT_S,
                        help="seconds pip install may take (default %(default)s)")
    parser.add_argument("--check-only", action="store_true",
                        help="make and copy nothing: fail unless the venv is ready")
    args = parser.parse_args(argv)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, _stop)
    try:
        if not args.pip_timeout > 0:
            raise MxbenchError(f"--pip-timeout must be a number of seconds > 0, not {args.pip_timeout}")
        print(json.dumps(ensure(args.workdir, parse_spec(args.spec_json), args.pip_timeout, args.check_only)))
    except MxbenchError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except Stopped as exc:  # outside a make: nothing to tidy up
        print(f"error: stopped by {exc}", file=sys.stderr, flush=True)
        return MxbenchError.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
