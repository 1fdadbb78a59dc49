"""Airflow Connections -> launchers: the one module of the library that imports Airflow.

Called inside tasks only. SSH hosts are SSH connections (apache-airflow-providers-ssh): the
provider's SSHHook reads login, key, password and host key; mxbench reads its own extras
(``mxbench_python``, ``mxbench_workdir``, ``mxbench_data_dir``, ``mxbench_address``,
``mxbench_env``) and hands the launcher plain settings plus ``SSHHook.get_conn``. Credentials
come from the connection only (never the worker's ~/.ssh keys). Host key checking follows the
hook: on unless the connection's extra says ``"no_host_key_check": true``, which the report
then states.

The Kubernetes cluster is a ``kubernetes`` connection (apache-airflow-providers-cncf-kubernetes):
the provider's KubernetesHook reads its kubeconfig or in-cluster settings; its extra
``mxbench_pod`` says how role pods look (``launchers.kubernetes.SETTINGS_SCHEMA``).
"""
from mxbench_train.errors import MxbenchError

from . import launchers
from .launchers.kubernetes import KubernetesLauncher, PodSettings, pod_settings
from .launchers.ssh import SshHost, SshLauncher, host_settings
from .variants import DEFAULT_KUBERNETES_CONNECTION

# one attempt: Airflow's task retries are the retry policy, and a dead host is reported at once
CONNECT_ATTEMPTS = 1


def ssh_host(conn_id: str) -> SshHost:
    from airflow.providers.ssh.hooks.ssh import SSHHook

    try:
        hook = SSHHook(ssh_conn_id=conn_id, conn_retry_attempts=CONNECT_ATTEMPTS)
        extra = hook.get_connection(conn_id).extra_dejson
    except Exception as exc:  # AirflowNotFoundException, or an extra the hook refuses
        raise MxbenchError(f"ssh connection {conn_id!r}: {exc}") from None
    if not (hook.key_file or hook.pkey or hook.password):
        raise MxbenchError(f"ssh connection {conn_id!r} has no key or password: give key_file or private_key in "
                           "its extra, or a password (mxbench does not fall back on the worker's own keys)")
    if hook.allow_host_key_change:
        raise MxbenchError(f"ssh connection {conn_id!r} sets allow_host_key_change, which accepts any host key: "
                           "to turn host key checking off, say so with no_host_key_check: true")
    hook.look_for_keys = False  # credentials come from the connection only, not from ~/.ssh
    return host_settings(conn_id, hook.remote_host, extra, connect=hook.get_conn,
                         checks_host_key=not hook.no_host_key_check)


def kubernetes_hook(conn_id: str):
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    try:
        hook = KubernetesHook(conn_id=conn_id)
        hook.get_connection(conn_id)
    except Exception as exc:  # AirflowNotFoundException
        raise MxbenchError(f"kubernetes connection {conn_id!r}: {exc}") from None
    return hook


def kubernetes_settings(params: dict) -> PodSettings:
    """The role pods' settings: the connection's ``mxbench_pod`` extra, the image param over its image."""
    conn_id = params.get("kubernetes_connection") or DEFAULT_KUBERNETES_CONNECTION
    hook = kubernetes_hook(conn_id)
    extra = hook.get_connection(conn_id).extra_dejson
    return pod_settings(conn_id, extra, namespace=hook.get_namespace(), image=params.get("kubernetes_image"))


def results_url(params: dict) -> str:
    """The results database: the ``results_connection`` param's Airflow connection (its URI), else
    MXBENCH_RESULTS_URL, else the SQLite file under MXBENCH_HOME."""
    from . import store

    conn_id = (params or {}).get("results_connection")
    if not conn_id:
        return store.default_url()
    from airflow.sdk import BaseHook

    try:
        uri = BaseHook.get_connection(conn_id).get_uri()
    except Exception as exc:  # AirflowNotFoundException
        raise MxbenchError(f"results connection {conn_id!r}: {exc}") from None
    return store.url_of_connection(uri)


def launcher_for(name: str, params: dict):
    """The launcher ``name`` with its machines as this DAG run's params and connections say (the
    run task makes its Kubernetes launcher itself, with the operator's pod building)."""
    if name == "ssh":
        return SshLauncher([ssh_host(conn_id) for conn_id in params.get("ssh_connections") or []])
    if name == "kubernetes":
        settings = kubernetes_settings(params)
        try:
            client = kubernetes_hook(settings.conn_id).core_v1_client
        except Exception as exc:  # a kubeconfig that does not load
            raise MxbenchError(f"kubernetes connection {settings.conn_id!r}: {exc}") from None
        return KubernetesLauncher(settings, client)
    return launchers.get(name)
