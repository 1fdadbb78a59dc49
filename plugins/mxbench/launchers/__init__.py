"""Launchers: each executes a variant's role plan on its own kind of machines.

``base`` says what a launcher is (the ``Launcher`` and ``RoleHandle`` protocols) and holds what
they share. ``local`` is the embedded default; the ``ssh`` package runs each role on an SSH host
(``commands``: its pure part, every command line; ``transfer``: the data set and the run's
outputs over SFTP); the ``kubernetes`` package runs each role as a pod (``role_pods``: a run's pods
and each role's; ``pods``: its pure part, settings and manifests), with the pod building of the
DAG's run operator (``mxbench.airflow_glue.operators``). ``mxbench.airflow_glue.connections``
makes the ssh and kubernetes ones from Airflow connections. No launcher imports another.
"""
from mxbench.launchers.base import Launched, Launcher
from mxbench.launchers.kubernetes.kubernetes_launcher import KubernetesLauncher
from mxbench.launchers.local import LocalLauncher
from mxbench.launchers.ssh.ssh_launcher import SshLauncher
from mxbench.matrix.variants import LAUNCHERS as NAMES
from mxbench_train.errors import MxbenchError

# the one map of launcher names to classes; the names are the trigger form's choices (variants.LAUNCHERS)
LAUNCHERS = {"local": LocalLauncher, "ssh": SshLauncher, "kubernetes": KubernetesLauncher}
assert tuple(LAUNCHERS) == tuple(NAMES), "variants.LAUNCHERS and the launcher classes disagree"


def get(name: str, **settings) -> Launcher:
    try:
        launcher = LAUNCHERS[name]
    except KeyError:
        raise ValueError(f"unknown launcher {name!r}; known: {', '.join(LAUNCHERS)}") from None
    try:
        return launcher(**settings)
    except TypeError as exc:
        raise MxbenchError(f"launcher {name!r} needs settings: {exc}") from None


__all__ = ["LAUNCHERS", "Launched", "Launcher", "get"]
