"""Connection ids from the trigger form reach only connections an administrator marked for mxbench,
and an SSH host never gets the worker's ssh-agent keys unless its connection asks.

Real components: Airflow connections from AIRFLOW_CONN_* through the providers' hooks, two real
sshd on loopback (standins.sshd), a real ssh-agent, the Kubernetes stand-in, and a plain
TCP listener that counts whoever connects (an unmarked connection must never reach it).
"""
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import kubernetes_connection, train_python
from mxbench.airflow_glue import connections
from mxbench.launchers.ssh.ssh_launcher import connect
from mxbench_train.errors import MxbenchError
from support.counting_listener import counting_listener

MARKING = 'an administrator marks a connection by an id starting with \'mxbench_\' or by "mxbench": true in its extra'


@pytest.fixture
def listener():
    with counting_listener() as (port, seen):
        yield port, seen


def _use(monkeypatch, conn_id, conn):
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


@pytest.mark.parametrize("kind", ["ssh", "kubernetes", "results"])
def test_an_unmarked_connection_is_refused_before_it_is_used(monkeypatch, listener, tmp_path, kind):
    """On main a trigger user could name any connection: another service's database for Alembic to
    migrate, another team's SSH host to run commands on, another cluster."""
    port, seen = listener
    key = tmp_path / "key"
    key.write_text("not used")
    conns = {
        "ssh": {"conn_type": "ssh", "host": "127.0.0.1", "port": port, "login": "ops",
                "extra": {"key_file": str(key), "no_host_key_check": True}},
        "kubernetes": {"conn_type": "kubernetes", "extra": {"in_cluster": False, "mxbench_pod": {}}},
        "results": {"conn_type": "postgres", "host": "127.0.0.1", "port": port, "login": "billing",
                    "password": "b1ll1ng-pw", "schema": "billing"},
    }
    _use(monkeypatch, "team_b_thing", conns[kind])
    call = {"ssh": lambda: connections.launcher_for("ssh", {"ssh_connections": ["team_b_thing"]}).target(),
            "kubernetes": lambda: connections.launcher_for("kubernetes", {"kubernetes_connection": "team_b_thing"}),
            "results": lambda: connections.results_url({"results_connection": "team_b_thing"})}[kind]
    with pytest.raises(MxbenchError) as refused:
        call()
    assert str(refused.value) == (f"{kind} connection 'team_b_thing' is not marked for mxbench (or does not "
                                  f"exist): {MARKING}")
    assert "b1ll1ng-pw" not in str(refused.value)
    time.sleep(0.3)
    assert seen == []
    # a connection that does not exist reads the same: nothing to learn about other connections
    monkeypatch.delenv("AIRFLOW_CONN_TEAM_B_THING")
    with pytest.raises(MxbenchError) as missing:
        call()
    assert str(missing.value) == str(refused.value)


@pytest.mark.parametrize("kind, wrong_type", [("results", "ssh"), ("ssh", "postgres"), ("kubernetes", "ssh"),
                                              ("results", "kubernetes")])
def test_a_marked_connection_is_used_only_as_its_type(monkeypatch, listener, tmp_path, kind, wrong_type):
    """On main a marked SSH host's connection was taken as the results store (its URI handed to
    SQLAlchemy), a database's as an SSH host: the mark says mxbench may use it, its type says how."""
    port, seen = listener
    key = tmp_path / "key"
    key.write_text("not used")
    conn = {"conn_type": wrong_type, "host": "127.0.0.1", "port": port, "login": "ops", "password": "0ps-pw",
            "schema": "x", "extra": {"key_file": str(key), "no_host_key_check": True, "in_cluster": False,
                                     "mxbench_pod": {}}}
    _use(monkeypatch, "mxbench_other", conn)
    call = {"ssh": lambda: connections.launcher_for("ssh", {"ssh_connections": ["mxbench_other"]}).target(),
            "kubernetes": lambda: connections.launcher_for("kubernetes", {"kubernetes_connection": "mxbench_other"}),
            "results": lambda: connections.results_url({"results_connection": "mxbench_other"})}[kind]
    with pytest.raises(MxbenchError) as refused:
        call()
    assert str(refused.value).startswith(f"{kind} connection 'mxbench_other' is of type '{wrong_type}', not ")
    assert "0ps-pw" not in str(refused.value)
    time.sleep(0.3)
    assert seen == []


def test_connections_marked_in_their_extra_are_used(monkeypatch, ssh_hosts, kube_standin):
    host = ssh_hosts.connection(0, mxbench_python=train_python(), mxbench=True)
    _use(monkeypatch, "gpu_box", host)
    target = connections.launcher_for("ssh", {"ssh_connections": ["gpu_box"]}).target()
    assert target.hosts == 1
    cluster = kubernetes_connection(kube_standin)
    cluster["extra"]["mxbench"] = "true"
    _use(monkeypatch, "lab_cluster", cluster)
    assert connections.launcher_for("kubernetes", {"kubernetes_connection": "lab_cluster"}).target().hosts == 2
    _use(monkeypatch, "lab_results", {"conn_type": "postgres", "host": "db.lab", "login": "bench",
                                      "schema": "results", "extra": {"mxbench": True}})
    assert connections.results_url({"results_connection": "lab_results"}) == "postgresql+psycopg2://bench@db.lab/results"


# --- the worker's ssh-agent ------------------------------------------------------------------

@pytest.fixture
def agent_holding_the_fleet_key(ssh_hosts, tmp_path, monkeypatch):
    """A real ssh-agent that holds the key every loopback host accepts, as SSH_AUTH_SOCK."""
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        added = subprocess.run(["ssh-add", str(ssh_hosts.client_key)], env=env, capture_output=True, text=True)
        assert added.returncode == 0, added.stderr
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        yield sock
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=10)


def test_an_agent_key_is_not_offered_unless_the_connection_asks(ssh_hosts, agent_holding_the_fleet_key,
                                                                  monkeypatch, tmp_path):
    """The connection's own key is refused by the host; the agent holds one it accepts. On main
    the login went through with the agent's key."""
    refused_key = tmp_path / "refused_ed25519"
    made = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(refused_key)],
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    conn = ssh_hosts.connection(0)
    conn["extra"]["key_file"] = str(refused_key)
    _use(monkeypatch, "mxbench_ssh_1", conn)
    with pytest.raises(MxbenchError, match="authentication failed"):
        connect(connections.ssh_host("mxbench_ssh_1"))

    conn["extra"]["allow_agent"] = True  # asked for: the agent's key gets in
    _use(monkeypatch, "mxbench_ssh_1", conn)
    client = connect(connections.ssh_host("mxbench_ssh_1"))
    try:
        _, out, _ = client.exec_command("echo in")
        assert out.read().strip() == b"in"
    finally:
        client.close()
