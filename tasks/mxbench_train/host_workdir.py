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
import grp
import json
import os
import pwd
import shutil
import stat
import sys

from .errors import MxbenchError

DEFAULT_WORKDIR = "~/.cache/mxbench"


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def private_group(gid: int, uid: int) -> bool:
    """Is ``gid`` the user's own group (a user private group, as Debian/Ubuntu make one for each
    user): named after the user, and no one else in it, as a supplementary or a primary group?"""
    try:
        user, group = pwd.getpwuid(uid), grp.getgrgid(gid)
    except KeyError:
        return False
    return (group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}
            and all(p.pw_uid == uid for p in pwd.getpwall() if p.pw_gid == gid))


def _others_write(st, uid: int) -> int:
    """The write bits of ``st`` that let someone else in: others', and its group's unless the
    folder is this user's and its group is the user's private group."""
    if st.st_uid == uid and private_group(st.st_gid, uid):
        return st.st_mode & 0o002
    return st.st_mode & 0o022


def check_above(folder: str) -> None:
    """Every real folder above ``folder`` is owned by root or this user and, unless sticky, not
    writable by anyone else (they could rename ``folder`` away and put another there)."""
    uid = os.geteuid()
    parent = os.path.dirname(folder)
    while True:
        st = os.lstat(parent)
        if st.st_uid not in (0, uid):
            raise MxbenchError(f"work folder {folder}: {parent} above it belongs to {_user(st.st_uid)}, "
                               f"not to {_user(uid)} or root: that user could swap the folder")
        writers = _others_write(st, uid)
        if writers and not st.st_mode & stat.S_ISVTX:
            raise MxbenchError(f"work folder {folder}: {parent} above it is writable by "
                               f"{_who_writes(writers)} and not sticky: they could swap the folder")
        if parent == "/":
            return
        parent = os.path.dirname(parent)


def check_own(path: str, what: str) -> None:
    """``path`` is a real folder (no symlink) of this user's, writable by no one else."""
    uid = os.geteuid()
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise MxbenchError(f"{what} {path} is not a folder (a symlink or a file is there)")
    if st.st_uid != uid:
        raise MxbenchError(f"{what} {path} belongs to {_user(st.st_uid)}, not to {_user(uid)}: another "
                           "user could plant files there; use a folder of the SSH user's own (mxbench_workdir)")
    writers = _others_write(st, uid)
    if writers:
        raise MxbenchError(f"{what} {path} is writable by {_who_writes(writers)} (mode {st.st_mode & 0o7777:04o}): "
                           f"another user could plant files there; chmod 700 it")


def _who_writes(bits: int) -> str:
    return " and ".join(who for who, bit in (("its group", 0o020), ("others", 0o002)) if bits & bit)


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
            from .host_build import ensure, parse_spec  # not at the top: host_build imports this module

            ready["build"] = ensure(ready["workdir"], parse_spec(args.build_json), check_only=True)
        print(json.dumps(ready))
    except MxbenchError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
