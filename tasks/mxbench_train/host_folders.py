"""Folder checks on a training host, shared by ``host_workdir`` (the run folders) and ``host_build``
(the builds folder): a folder must be the SSH user's own and closed to others, and so must every
folder above it unless sticky (see ``host_workdir`` for the rule and why). Stdlib only."""
import grp
import os
import pwd
import stat

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
