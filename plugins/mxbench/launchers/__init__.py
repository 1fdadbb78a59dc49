"""Launchers: each executes a variant's role plan on its own kind of machines.

A launcher offers ``target()`` (what its machines have, for the up-front
check), ``execute(variant, data_dir, run_dir, deadline_s)`` and
``reap(run_dir)`` (stop what an earlier, killed attempt left running). ``local`` is
the embedded default; SSH and Kubernetes launchers register here too.
"""
from .local import LocalLauncher

LAUNCHERS = {"local": LocalLauncher}


def get(name: str):
    try:
        return LAUNCHERS[name]()
    except KeyError:
        raise ValueError(f"unknown launcher {name!r}; known: {', '.join(LAUNCHERS)}") from None
