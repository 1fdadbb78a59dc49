"""Airflow Connections -> launchers and the results database's URL.

Part of the Airflow glue (see ``mxbench.airflow_glue``: the only package that imports Airflow,
``artifacts.object_store`` aside, as tests/orchestration/test_layers.py holds); the stages never
do. Called inside tasks only.

SSH hosts are SSH connections (apache-airflow-providers-ssh): the provider's SSHHook reads
login, key, password and host key; mxbench reads its own extras (``mxbench_python``,
``mxbench_workdir``, ``mxbench_data_dir``, ``mxbench_address``, ``mxbench_env``) and hands the
launcher plain settings plus ``SSHHook.get_conn``. Credentials come from the connection only
(never the worker's ~/.ssh keys). Host key checking follows the hook: on unless the connection's
extra says ``"no_host_key_check": true``, which the report then states.

The Kubernetes cluster is a ``kubernetes`` connection (apache-airflow-providers-cncf-kubernetes):
the provider's KubernetesHook reads its kubeconfig or in-cluster settings; its extra
``mxbench_pod`` says how role pods look (``launchers.kubernetes.pods.SETTINGS_SCHEMA``).

Connection ids come from trigger params, which anyone who may trigger a DAG run chooses: every
connection mxbench uses (hosts, cluster, results database) must be marked for mxbench by an
administrator, by its id (``mxbench_...``) or by ``"mxbench": true`` in its extra
(``marked_connection``), and is used only as what its type says (an SSH connection is never the
results store). An ssh-agent's keys are offered only when the connection's extra says
``"allow_agent": true``.
"""
import contextvars
import functools

from mxbench import launchers
from mxbench.launchers.kubernetes.kubernetes_launcher import KubernetesLauncher
from mxbench.launchers.kubernetes.pods import PodSettings, pod_settings
from mxbench.launchers.ssh.commands import SshHost, host_settings
from mxbench.launchers.ssh.ssh_launcher import SshLauncher
from mxbench.matrix.variants import DEFAULT_KUBERNETES_CONNECTION
from mxbench_train.errors import MxbenchError

# one attempt: Airflow's task retries are the retry policy, and a dead host is reported at once
CONNECT_ATTEMPTS = 1
MARK_PREFIX = "mxbench_"
MARK_EXTRA = "mxbench"
# the connection types each use accepts (a results connection's URI becomes a SQLAlchemy URL, so
# a database type: Airflow spells postgresql:// "postgres"; a driver may follow, postgresql+psycopg2)
CONN_TYPES = {"ssh": ("ssh",), "kubernetes": ("kubernetes",),
              "results": ("postgres", "postgresql", "sqlite", "mysql")}


def _is_true(value) -> bool:
    return value is True or str(value).lower() == "true"


def marked_connection(conn_id: str, kind: str):
    """The Airflow connection ``conn_id``, if an administrator marked it for mxbench: its id starts
    with ``mxbench_``, or its extra has ``"mxbench": true``. Every connection a trigger param names
    comes through here, before any hook is made, so an unmarked one is never used. ``kind`` (ssh,
    kubernetes, results) names it in errors and says which connection types it may be (CONN_TYPES):
    a marked SSH host is not a results store."""
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:  # AirflowNotFoundException
        if conn_id.startswith(MARK_PREFIX):
            raise MxbenchError(f"{kind} connection {conn_id!r}: {exc}") from None
        conn = None
    if conn_id.startswith(MARK_PREFIX) or (conn is not None and _is_true(conn.extra_dejson.get(MARK_EXTRA))):
        conn_type = str(conn.conn_type or "")
        if conn_type.split("+")[0] not in CONN_TYPES[kind]:
            raise MxbenchError(f"{kind} connection {conn_id!r} is of type {conn_type!r}, not "
                               f"{' or '.join(map(repr, CONN_TYPES[kind]))}: mxbench uses a marked connection only "
                               f"as what its type says")
        return conn
    # one message whether it exists or not: a trigger user learns nothing about other connections
    raise MxbenchError(f"{kind} connection {conn_id!r} is not marked for mxbench (or does not exist): an "
                       f"administrator marks a connection by an id starting with {MARK_PREFIX!r} or by "
                       f'"{MARK_EXTRA}": true in its extra')


# SSHHook 7.0.1 never passes allow_agent to paramiko's SSHClient.connect, whose default offers
# every key a running ssh-agent holds: a host that refuses the connection's own key would still
# let the worker in with the agent's. mxbench's own connects set this, and the wrapper below
# hands it to paramiko; any other SSHClient user in the process leaves it unset and is untouched.
_ALLOW_AGENT = contextvars.ContextVar("mxbench_ssh_allow_agent", default=None)


def _install_agent_switch() -> None:
    import paramiko

    connect = paramiko.SSHClient.connect
    if getattr(connect, "mxbench_agent_switch", False):
        return

    @functools.wraps(connect)
    def switched(self, *args, **kwargs):
        allowed = _ALLOW_AGENT.get()
        if allowed is not None:
            kwargs["allow_agent"] = allowed
        return connect(self, *args, **kwargs)

    switched.mxbench_agent_switch = True
    paramiko.SSHClient.connect = switched


def _connect(hook, allow_agent: bool):
    """``hook.get_conn()``, paramiko offering an ssh-agent's keys only if ``allow_agent``."""
    _install_agent_switch()
    token = _ALLOW_AGENT.set(allow_agent)
    try:
        return hook.get_conn()
    finally:
        _ALLOW_AGENT.reset(token)


def ssh_host(conn_id: str) -> SshHost:
    from airflow.providers.ssh.hooks.ssh import SSHHook

    extra = marked_connection(conn_id, "ssh").extra_dejson
    try:
        hook = SSHHook(ssh_conn_id=conn_id, conn_retry_attempts=CONNECT_ATTEMPTS)
    except Exception as exc:  # an extra the hook refuses
        raise MxbenchError(f"ssh connection {conn_id!r}: {exc}") from None
    if not (hook.key_file or hook.pkey or hook.password):
        raise MxbenchError(f"ssh connection {conn_id!r} has no key or password: give key_file or private_key in "
                           "its extra, or a password (mxbench does not fall back on the worker's own keys)")
    if hook.allow_host_key_change:
        raise MxbenchError(f"ssh connection {conn_id!r} sets allow_host_key_change, which accepts any host key: "
                           "to turn host key checking off, say so with no_host_key_check: true")
    hook.look_for_keys = False  # credentials come from the connection only, not from ~/.ssh
    connect = functools.partial(_connect, hook, _is_true(extra.get("allow_agent")))
    return host_settings(conn_id, hook.remote_host, extra, connect=connect,
                         checks_host_key=not hook.no_host_key_check)


def kubernetes_hook(conn_id: str):
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    marked_connection(conn_id, "kubernetes")
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
    from mxbench import store

    conn_id = (params or {}).get("results_connection")
    if not conn_id:
        return store.default_url()
    return store.url_of_connection(marked_connection(conn_id, "results").get_uri())


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
