"""standins.sshd: real Debian sshd processes on loopback addresses, driven by real paramiko
and by Airflow's SSHHook. No mocks: each assertion is about a live server."""
import base64
import getpass
import json
import os
import socket
import subprocess
import sys
import time

import paramiko
import pytest

from mxbench_train import localhost
from standins import sshd

SSHD_CLI = [sys.executable, "-m", "standins.sshd"]


def _client(host, key_file, host_key_line=None):
    """A connected SSHClient that verifies the server against host_key_line (RejectPolicy)."""
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    if host_key_line:
        kind, data = host_key_line.split()[:2]
        key = paramiko.PKey.from_type_string(kind, base64.b64decode(data))
        client.get_host_keys().add(f"[{host.address}]:{host.port}", kind, key)
    try:
        client.connect(host.address, port=host.port, username=getpass.getuser(),
                       key_filename=str(key_file), look_for_keys=False, allow_agent=False, timeout=5,
                       banner_timeout=5, auth_timeout=5)
    except BaseException:
        client.close()
        raise
    return client


def _run(client, command):
    _, out, err = client.exec_command(command, timeout=10)
    text = out.read().decode()
    status = out.channel.recv_exit_status()
    assert status == 0, (command, status, err.read().decode())
    return text


def _refused(address, port):
    try:
        socket.create_connection((address, port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def test_each_host_accepts_the_client_key_with_host_key_checking(ssh_hosts):
    assert [h.address for h in ssh_hosts.hosts] == ["127.0.0.1", "127.0.0.2"]
    assert len({h.pid for h in ssh_hosts.hosts}) == 2
    assert len({h.host_key for h in ssh_hosts.hosts}) == 2
    for host in ssh_hosts.hosts:
        assert host.host_key.startswith("ssh-ed25519 AAAA")
        with _client(host, ssh_hosts.client_key, host.host_key) as client:
            lines = _run(client, "echo $SSH_CONNECTION; id -u; test -d " + str(host.workdir)
                         + " && echo ok").split("\n")
        client_ip, _, server_ip, server_port = lines[0].split()
        assert (server_ip, int(server_port)) == (host.address, host.port)
        assert client_ip.startswith("127.")
        assert int(lines[1]) == os.geteuid()
        assert lines[2] == "ok"
        assert host.workdir == ssh_hosts.root / host.name / "work"


def test_unknown_host_is_rejected_when_checking(ssh_hosts):
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        _client(ssh_hosts.hosts[0], ssh_hosts.client_key, None)


def test_host2_key_does_not_verify_host1(ssh_hosts):
    host1, host2 = ssh_hosts.hosts
    with pytest.raises(paramiko.BadHostKeyException):
        _client(host1, ssh_hosts.client_key, host2.host_key)


def test_wrong_client_key_is_refused(ssh_hosts, tmp_path):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    host = ssh_hosts.hosts[1]
    with pytest.raises(paramiko.AuthenticationException):
        _client(host, other, host.host_key)


def test_password_and_keyboard_interactive_are_refused(ssh_hosts):
    host = ssh_hosts.hosts[0]
    transport = paramiko.Transport((host.address, host.port))
    try:
        transport.start_client(timeout=5)
        with pytest.raises(paramiko.BadAuthenticationType) as refused:
            transport.auth_password(getpass.getuser(), "not-a-password")
        assert refused.value.allowed_types == ["publickey"]
    finally:
        transport.close()


def test_sftp_into_the_host_workdir(ssh_hosts):
    host = ssh_hosts.hosts[1]
    payload = b"mxbench sftp " * 1000
    with _client(host, ssh_hosts.client_key, host.host_key) as client:
        sftp = client.open_sftp()
        try:
            remote = f"{host.workdir}/sftp-probe.bin"
            with sftp.open(remote, "wb") as f:
                f.write(payload)
            assert sftp.stat(remote).st_size == len(payload)
            assert "sftp-probe.bin" in sftp.listdir(str(host.workdir))
        finally:
            sftp.close()
    assert (host.workdir / "sftp-probe.bin").read_bytes() == payload


def test_stop_kills_listeners_and_session_children(tmp_path):
    fleet = sshd.start(tmp_path / "fleet", addresses=("127.0.0.3", "127.0.0.4"))
    try:
        host = fleet.hosts[0]
        client = _client(host, fleet.client_key, host.host_key)
        # A command that would outlive its sshd if only the listener's process group were killed
        # (sshd's connection children call setsid()).
        _, out, _ = client.exec_command("echo $$; exec sleep 300")
        sleeper = int(out.readline())
        assert localhost.is_running(sleeper)
        listeners = [(h.pid, h.address, h.port) for h in fleet.hosts]
    finally:
        fleet.stop()
    client.close()
    for pid, address, port in listeners:
        assert not localhost.is_running(pid)
        assert _refused(address, port)
    assert not localhost.is_running(sleeper)
    assert not sshd._session_pids(host.address, host.port)
    fleet.stop()  # idempotent


def test_unavailable_reason_when_sshd_is_missing(monkeypatch, tmp_path):
    assert sshd.unavailable() is None  # this machine (and CI) can run it
    monkeypatch.setattr(sshd, "SSHD", str(tmp_path / "no-sshd"))
    assert "no-sshd" in sshd.unavailable()
    with pytest.raises(RuntimeError, match="no-sshd"):
        sshd.start(tmp_path / "fleet")
    assert not (tmp_path / "fleet").exists()


def test_cli_start_is_idempotent_and_stop_kills(tmp_path):
    root = tmp_path / "cli-fleet"
    check = subprocess.run([*SSHD_CLI, "check"], capture_output=True, text=True, timeout=30)
    assert (check.returncode, check.stdout.strip()) == (0, "ok")

    def start_via_shell():
        # eval in a real shell: the exports must survive shell quoting
        script = (f"eval \"$({' '.join(SSHD_CLI)} start --root {root} --conn-ids a_one,b_two "
                  "--extra '{\"conn_timeout\": \"7\"}')\" && env")
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        env = dict(line.split("=", 1) for line in done.stdout.splitlines() if line.startswith("AIRFLOW_CONN_"))
        return {k: json.loads(v) for k, v in env.items()}

    try:
        first = start_via_shell()
        assert sorted(first) == ["AIRFLOW_CONN_A_ONE", "AIRFLOW_CONN_B_TWO"]
        fleet = sshd.Fleet.load(root)
        assert fleet is not None and fleet.alive()  # outlived the CLI
        conn = first["AIRFLOW_CONN_B_TWO"]
        assert (conn["host"], conn["port"]) == ("127.0.0.2", fleet.hosts[1].port)
        assert conn["extra"]["conn_timeout"] == "7"
        assert conn["extra"]["host_key"] == fleet.hosts[1].host_key
        with _client(fleet.hosts[1], conn["extra"]["key_file"], conn["extra"]["host_key"]) as client:
            assert _run(client, "echo $SSH_CONNECTION").split()[2] == "127.0.0.2"

        second = start_via_shell()
        assert second == first  # reused: same ports, keys
        assert [h.pid for h in sshd.Fleet.load(root).hosts] == [h.pid for h in fleet.hosts]
    finally:
        stop = subprocess.run([*SSHD_CLI, "stop", "--root", str(root)], capture_output=True, text=True, timeout=60)
    assert stop.returncode == 0, stop.stderr
    deadline = time.monotonic() + 5
    while any(localhost.is_running(h.pid) for h in fleet.hosts) and time.monotonic() < deadline:
        time.sleep(0.05)
    for h in fleet.hosts:
        assert not localhost.is_running(h.pid)
        assert _refused(h.address, h.port)
    assert not (root / "fleet.json").exists()


def test_airflow_ssh_hook_resolves_the_env_connection(ssh_hosts, monkeypatch):
    from airflow.providers.ssh.hooks.ssh import SSHHook

    for key, value in ssh_hosts.airflow_env().items():
        monkeypatch.setenv(key, value)
    host = ssh_hosts.hosts[1]
    hook = SSHHook(ssh_conn_id="mxbench_ssh_2")
    assert (hook.remote_host, hook.port, hook.key_file) == (host.address, host.port, str(ssh_hosts.client_key))
    assert hook.host_key is not None and not hook.no_host_key_check
    client = hook.get_conn()
    try:
        assert _run(client, "echo $SSH_CONNECTION").split()[2:] == [host.address, str(host.port)]
    finally:
        client.close()

    # the wrong host's key in the connection: the hook must refuse the server
    wrong = ssh_hosts.connection(0)
    wrong["extra"]["host_key"] = ssh_hosts.hosts[1].host_key
    monkeypatch.setenv("AIRFLOW_CONN_MXBENCH_SSH_BAD", json.dumps(wrong))
    bad = SSHHook(ssh_conn_id="mxbench_ssh_bad", conn_retry_attempts=1)
    with pytest.raises(paramiko.BadHostKeyException):
        bad.get_conn()
