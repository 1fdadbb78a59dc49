"""standins.netns and the sshd fleet in network namespaces: real namespaces, veth links, a bridge
and tbf, real sshd reached by paramiko; the fallback to loopback hosts where namespaces cannot be
made. Each test checks that nothing it made is left: namespaces, links, listeners."""
import getpass
import ipaddress
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import paramiko
import pytest

from mxbench_train import localhost
from standins import netns, sshd

SSHD_CLI = [sys.executable, "-m", "standins.sshd"]
REPO = Path(__file__).resolve().parents[2]


def _ssh(fleet, host, command):
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    try:
        client.connect(host.address, port=host.port, username=getpass.getuser(), key_filename=str(fleet.client_key),
                       look_for_keys=False, allow_agent=False, timeout=5, banner_timeout=5, auth_timeout=5)
        _, out, err = client.exec_command(command, timeout=20)
        text = out.read().decode()
        assert out.channel.recv_exit_status() == 0, (command, err.read().decode())
        return text
    finally:
        client.close()


def _left_behind(network: netns.Network):
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    return ([line.split()[0] for line in names.splitlines() if line.startswith(network.prefix)]
            + [line.split(":")[1].strip().split("@")[0] for line in links.splitlines()  # "name@if3"
               if line.split(":")[1].strip().startswith(network.root_link)])


def _gone(fleet, network):
    assert not _left_behind(network)
    routes = subprocess.run(["ip", "-4", "route", "show", "to", "match", network.root_address],
                            capture_output=True, text=True, check=True).stdout
    assert network.subnet not in routes  # the route went with the root link
    for host in fleet.hosts:
        assert not localhost.is_running(host.pid, host.starttime)
        assert not sshd._session_pids(host.address, host.port)


def test_hosts_answer_over_ssh_in_namespaces_of_their_own_behind_a_shaped_link(tmp_path):
    assert netns.unavailable() is None  # root with iproute2: this machine and CI
    fleet = sshd.start(tmp_path / "fleet", link_rate="1gbit")
    try:
        assert fleet.network["kind"] == "netns" and fleet.network["rate"] == "1gbit"
        network = netns.Network.from_json(fleet.network)
        answers = []
        for host in fleet.hosts:
            assert ipaddress.ip_address(host.address) in netns.BENCHMARK_RANGE and host.port == 22
            answers.append(_ssh(fleet, host, "echo $SSH_CONNECTION; readlink /proc/self/ns/net").split())
        for (client, _, server, port, stack), host in zip(answers, fleet.hosts):
            assert client == network.root_address  # from Airflow's side of the link
            assert (server, port) == (host.address, "22")
            assert stack != os.readlink("/proc/self/ns/net")
        assert answers[0][4] != answers[1][4]
        # host 1 reaches host 2 through the bridge, and every port is shaped
        other = fleet.hosts[1]
        banner = _ssh(fleet, fleet.hosts[0], f"{sys.executable} -c \"import socket; "
                      f"print(socket.create_connection(('{other.address}', 22), timeout=5).recv(8))\"")
        assert "SSH-2.0" in banner
        for i in range(2):
            for where, dev in ((network.namespace(i), "eth0"), (network.switch, f"host{i + 1}")):
                shown = subprocess.run(["tc", "-n", where, "qdisc", "show", "dev", dev], capture_output=True,
                                       text=True, check=True).stdout
                assert "tbf" in shown and "rate 1Gbit" in shown, (where, dev, shown)
        # a host's network is its own, its mounts are the machine's: its roles get cgroups of their own
        ours = [line for line in open("/proc/self/mounts") if " cgroup2 " in line]
        assert ours and _ssh(fleet, fleet.hosts[0], "grep ' cgroup2 ' /proc/self/mounts").splitlines() == \
            [line.rstrip("\n") for line in ours]
        extra = fleet.connection(0)["extra"]
        assert "shaped to 1gbit" in extra["mxbench_network"]
    finally:
        fleet.stop()
    _gone(fleet, network)
    fleet.stop()  # idempotent


def test_a_second_link_joins_the_hosts_on_addresses_of_its_own_shaped_to_its_rate(tmp_path):
    """``--link slow=4mbit``: every host's eth1 into a bridge of its own, shaped to 4 Mbit/s both
    ways, on a /24 only the hosts reach; each connection lists it in ``mxbench_links``; a start that
    asks for the same links reuses the fleet; stop leaves nothing of either link."""
    root = tmp_path / "fleet"
    argv = [*SSHD_CLI, "start", "--root", str(root), "--link-rate", "1gbit", "--link", "slow=4mbit"]
    started = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    fleet = sshd.Fleet.load(root)
    try:
        assert started.returncode == 0, started.stderr
        network = netns.Network.from_json(fleet.network)
        slow = network.link_addresses("slow")
        assert network.links["slow"]["rate"] == "4mbit" and network.links["slow"]["subnet"] != network.subnet
        assert fleet.connection(1)["extra"]["mxbench_links"] == {"slow": {"address": slow[1], "rate": "4mbit"}}
        assert "a second link 'slow' into a bridge of its own, shaped to 4mbit" in fleet.describe_network()
        # host 1 reaches host 2 over the slow link: host 2's stack answers there (sshd listens on the
        # first link's address only, so it refuses: ECONNREFUSED, not a timeout or no route)
        errno = _ssh(fleet, fleet.hosts[0], f"{sys.executable} -c \"import socket; s = socket.socket(); "
                     f"s.bind(('{slow[0]}', 0)); s.settimeout(5); print(s.connect_ex(('{slow[1]}', 22)))\"")
        assert errno.strip() == "111", errno
        for i in range(2):
            for where, dev in ((network.namespace(i), "eth1"), (network.switch, f"host{i + 1}l1")):
                shown = subprocess.run(["tc", "-n", where, "qdisc", "show", "dev", dev], capture_output=True,
                                       text=True, check=True).stdout
                assert "tbf" in shown and "rate 4Mbit" in shown, (where, dev, shown)
        again = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0 and sshd.Fleet.load(root).network == fleet.network  # reused
    finally:
        subprocess.run([*SSHD_CLI, "stop", "--root", str(root)], capture_output=True, timeout=120)
        if fleet is not None:
            fleet.stop()
    _gone(fleet, network)


def test_cli_fleet_in_namespaces_is_removed_by_stop(tmp_path):
    root = tmp_path / "fleet"
    started = subprocess.run([*SSHD_CLI, "start", "--root", str(root), "--link-rate", "10gbit"],
                             capture_output=True, text=True, timeout=120)
    fleet = sshd.Fleet.load(root)
    try:
        assert started.returncode == 0, started.stderr
        assert fleet.network["kind"] == "netns" and fleet.network["rate"] == "10gbit"
        assert "shaped to 10gbit" in started.stdout
        network = netns.Network.from_json(fleet.network)
        assert _left_behind(network)  # the CLI's fleet outlives the CLI
        again = subprocess.run([*SSHD_CLI, "start", "--root", str(root), "--link-rate", "10gbit"],
                               capture_output=True, text=True, timeout=120)
        assert again.returncode == 0 and sshd.Fleet.load(root).network == fleet.network  # reused
    finally:
        subprocess.run([*SSHD_CLI, "stop", "--root", str(root)], capture_output=True, timeout=120)
        if fleet is not None:
            fleet.stop()  # what a failed assertion above left
    _gone(fleet, network)


def test_without_ip_the_fleet_falls_back_to_loopback_hosts_and_says_why(tmp_path):
    root = tmp_path / "fleet"
    no_tools = tmp_path / "bin"  # a PATH without iproute2 (sshd and ssh-keygen are found by their paths)
    no_tools.mkdir()
    env = {**os.environ, "PATH": str(no_tools)}
    started = subprocess.run([*SSHD_CLI, "start", "--root", str(root), "--link-rate", "1gbit",
                              "--addresses", "127.0.0.5,127.0.0.6"], capture_output=True, text=True,
                             timeout=120, env=env)
    fleet = sshd.Fleet.load(root)
    try:
        assert started.returncode == 0, started.stderr
        assert fleet.network == {"kind": "loopback", "why": "cannot make network namespaces: no `ip` on PATH: "
                                                            "install iproute2"}
        assert [h.address for h in fleet.hosts] == ["127.0.0.5", "127.0.0.6"]
        said = fleet.to_json()["connections"]["mxbench_ssh_1"]["extra"]["mxbench_network"]
        assert said.startswith("loopback addresses of one network stack") and "no `ip` on PATH" in said
        assert "127.0.0.5" in _ssh(fleet, fleet.hosts[0], "echo $SSH_CONNECTION")
    finally:
        subprocess.run([*SSHD_CLI, "stop", "--root", str(root)], capture_output=True, timeout=60)
    for host in fleet.hosts:
        assert not localhost.is_running(host.pid, host.starttime)


def test_a_rate_tc_would_misread_is_refused():
    with pytest.raises(ValueError, match="1gbit"):
        netns.rate_bits("1 gigabit; reboot")
    assert netns.rate_bits("2.5gbit") == 2.5e9


MAKER = """
import json, os, signal, subprocess, sys
from standins import netns
network = netns.make(2, "1gbit", detach=sys.argv[1] == "detach")
sleeper = subprocess.Popen(network.exec_argv(0) + ["sleep", "300"], start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(json.dumps({"network": network.to_json(), "sleeper": sleeper.pid}), flush=True)
os.kill(os.getpid(), signal.SIGTERM)  # as a CI runner or a user's kill would: no atexit runs
"""


def _made_then_terminated(how: str):
    done = subprocess.run([sys.executable, "-c", MAKER, how], capture_output=True, text=True, timeout=60,
                          cwd=REPO)
    assert done.returncode == -15, done.stderr  # killed by SIGTERM
    made = json.loads(done.stdout)
    return netns.Network.from_json(made["network"]), made["sleeper"]


@pytest.mark.alone  # another process's make() would sweep the orphan first
def test_a_network_whose_maker_was_killed_is_swept_by_the_next_but_a_detached_one_is_kept():
    kept, kept_sleeper = _made_then_terminated("detach")
    orphan, sleeper = _made_then_terminated("own")  # made last: a make() sweeps what came before
    try:
        assert sorted(_left_behind(orphan)) == sorted(orphan.namespaces + [orphan.root_link])  # SIGTERM leaked it
        assert os.path.exists(f"/proc/{sleeper}")
        removed = netns.sweep_orphans()
        assert set(removed) == set(orphan.namespaces + [orphan.root_link])
        assert not _left_behind(orphan)
        assert _gone_soon(sleeper)  # what ran in its namespaces was killed
        assert kept.prefix.startswith("mxbd-") and kept.root_link.startswith("mxbd")
        assert sorted(_left_behind(kept)) == sorted(kept.namespaces + [kept.root_link])  # meant to outlive its maker
        assert os.path.exists(f"/proc/{kept_sleeper}")
    finally:
        orphan.remove()
        kept.remove()
    assert not _left_behind(kept)


def _gone_soon(pid: int, deadline_s: float = 5.0) -> bool:
    """Whether ``pid`` exits (or is a zombie awaiting its reaper) within the deadline."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False
