"""The SSH launcher's work folder on a host: private to the SSH user, checked before every run.

Another local user of a shared GPU host must not be able to plant or swap what the roles read:
a ``mxbench_train`` package in the run folder, a data file, a symlink in place of a folder. So,
run on the host as the SSH user, before a run:

- the work folder (default ``~/.cache/mxbench``) is made 0700 when missing; it must be owned by
  this user and writable by no one else, and every folder above it owned by this user or root
  and writable by no one else unless sticky (like ``/tmp``): the rule OpenSSH's StrictModes
  applies to ``~/.ssh``, with Debian's allowance for user private groups (a folder writable by
  its group is fine when that group is the user's own: named after the user, no other member;
  under umask 002 ``~/.cache`` is often 0775). Symlinks are resolved first, so each real folder
  is judged;
- ``runs/<dag run>/<run>/`` and a fresh ``runs/<dag run>/<run>/<host>/`` (with ``pids/``) are made
  0700 and checked the same way. ``<host>`` is the host's connection id: where homes are one NFS
  mount, every host of a run has the same work folder, and each must still have its own folder.

``python -P -m mxbench_train.host_workdir --workdir W --dag-run D --run R --host H`` (``-I``
before Python 3.11) prints one JSON line, ``{"workdir", "run_dir", "python": [major, minor]}``
(with ``--build-json``, also ``"build"``: the MXNet build's venv there, ``host_build``'s answer); a
refusal is one ``error:`` line naming the folder and why. Stdlib only.
"""
import argparse
import json
import os
import shutil
import sys

from .errors import MxbenchError
from .host_build import ensure, parse_spec
from .host_folders import DEFAULT_WORKDIR, check_above, check_own


def _own_folder(path: str, what: str) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    check_own(path, what)


def _plain_name(name: str, what: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise MxbenchError(f"{what} {name!r} is not a plain folder name")
    return name


def prepare(workdir: str, dag_run: str, run: str, host: str) -> dict:
    """Make and check the work folder and a fresh folder for this host's part of the run; what
    ``main`` prints."""
    wanted = os.path.expanduser(workdir)
    if not os.path.isabs(wanted):
        raise MxbenchError(f"work folder {workdir!r} is not absolute here (is HOME set?)")
    _plain_name(dag_run, "dag run folder")
    _plain_name(run, "run folder")
    _plain_name(host, "host folder")
    try:
        os.makedirs(wanted, mode=0o700, exist_ok=True)  # 0700 for the folder itself; those above as usual
        real = os.path.realpath(wanted)
        check_above(real)
        check_own(real, "work folder")
        runs = os.path.join(real, "runs")
        _own_folder(runs, "runs folder")
        _own_folder(os.path.join(runs, dag_run), "dag run folder")
        _own_folder(os.path.join(runs, dag_run, run), "run folder")  # other hosts may share it (NFS homes)
        run_dir = os.path.join(runs, dag_run, run, host)
        if os.path.islink(run_dir) or os.path.isfile(run_dir):
            os.unlink(run_dir)
        elif os.path.isdir(run_dir):
            shutil.rmtree(run_dir)  # an earlier attempt's; rmtree never follows a symlink inside
        os.mkdir(run_dir, 0o700)
        check_own(run_dir, "host's run folder")
        os.mkdir(os.path.join(run_dir, "pids"), 0o700)
    except OSError as exc:
        raise MxbenchError(f"work folder {wanted}: {exc.strerror or exc}"
                           f"{' (' + exc.filename + ')' if exc.filename else ''}") from None
    return {"workdir": real, "run_dir": run_dir, "python": list(sys.version_info[:2])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -P -m mxbench_train.host_workdir",
                                     description="Make and check the SSH launcher's work folder and a fresh "
                                                 "folder for this host's part of a run in it; print them as "
                                                 "one JSON line")
    parser.add_argument("--workdir", default=DEFAULT_WORKDIR, help="absolute, or ~/... (default %(default)s)")
    parser.add_argument("--dag-run", required=True, help="the DAG run's folder name")
    parser.add_argument("--run", required=True, help="the run's folder name")
    parser.add_argument("--host", required=True, help="this host's folder name in the run's (its connection id)")
    parser.add_argument("--build-json", help="also find this MXNet build's venv in the work folder, made before "
                                             "(mxbench_train.host_build --check-only, in the same process: a run "
                                             "pays no extra round trip for its build)")
    args = parser.parse_args(argv)
    try:
        ready = prepare(args.workdir, args.dag_run, args.run, args.host)
        if args.build_json:
            ready["build"] = ensure(ready["workdir"], parse_spec(args.build_json), check_only=True)
        print(json.dumps(ready))
    except MxbenchError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
