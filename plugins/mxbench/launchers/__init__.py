"""Launchers: each executes a variant's role plan on its own kind of machines.

A launcher offers ``target()`` (what its machines have, for the up-front
check), ``execute(variant, data_dir, run_dir, deadline_s)`` and
``reap(run_dir)`` (stop what an earlier, killed attempt left running). ``local`` is
the embedded default; ``ssh`` takes its hosts as settings (``mxbench.connections``
makes them from Airflow connections); ``kubernetes`` runs each role as a pod, with the pod
building of the DAG's run operator (``mxbench.operators``).
"""
from mxbench_train.errors import MxbenchError

from .kubernetes import KubernetesLauncher
from .local import LocalLauncher
from .ssh import SshLauncher

LAUNCHERS = {"local": LocalLauncher, "ssh": SshLauncher, "kubernetes": KubernetesLauncher}


def get(name: str, **settings):
    try:
        launcher = LAUNCHERS[name]
    except KeyError:
        raise ValueError(f"unknown launcher {name!r}; known: {', '.join(LAUNCHERS)}") from None
    try:
        return launcher(**settings)
    except TypeError as exc:
        raise MxbenchError(f"launcher {name!r} needs settings: {exc}") from None
