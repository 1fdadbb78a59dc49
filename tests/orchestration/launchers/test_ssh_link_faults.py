"""A link that fails mid-run, over real sshd hosts in network namespaces (standins.netns): host 2's
link is taken down while the two-host dist_sync job trains. Nothing tells either end (no RST, no
FIN): the run must end within the silence bound, naming the host and the link, and the roles on the
far host must stop by themselves (their supervisors hear no heartbeat). Nothing of the network or
the hosts is left once the fleet stops."""
import os
import threading
import time

import pytest
from test_ssh_launcher import (
    LONG,
    _read,
    launcher,
    remote_folder,
    remote_pids,
    run_dir_for,
    use_hosts,
    wait_all_dead,
)

from mxbench.launchers.ssh import ssh_launcher
from mxbench.launchers.ssh.commands import LINK_SILENCE_S
from mxbench.run_folder import RunFolder
from mxbench_train.plan_runner import RoleFailed

pytestmark = pytest.mark.slow  # MXNet jobs over two real sshd hosts in namespaces


def once_training(run_dir, act):
    """A started thread that calls ``act`` once worker-1 has logged a speed line (or after 120 s),
    and a dict whose "at" is when it did (time.monotonic)."""
    done = {}

    def wait_then_act():
        end = time.monotonic() + 120
        while time.monotonic() < end and "Speed:" not in _read(run_dir / "roles" / "worker-1.log"):
            time.sleep(0.2)
        done["at"] = time.monotonic()
        act()

    thread = threading.Thread(target=wait_then_act)
    thread.start()
    return thread, done


def test_a_link_taken_down_mid_run_ends_the_run_naming_host_and_link(netns_ssh_hosts, monkeypatch, cifar_rec, tmp_path):
    fleet, network = netns_ssh_hosts
    keep = {"mxbench_keep_failed_runs": True}
    params = use_hosts(monkeypatch, fleet, (keep, keep))
    run_dir = run_dir_for(tmp_path)
    # host 2's switch port: silence both ways, no RST
    cutter, cut = once_training(run_dir, lambda: network.set_link(1, up=False))
    try:
        with pytest.raises(RoleFailed) as failed:
            launcher(params).execute(LONG, cifar_rec, RunFolder(run_dir), deadline_s=600)
        ended = time.monotonic()
    finally:
        cutter.join()
        network.set_link(1, up=True)
    assert "at" in cut, "worker-1 never logged a speed line"
    message = str(failed.value)
    assert "lost its SSH connection to host mxbench_ssh_2" in message, message
    address = fleet.hosts[1].address
    assert f"{address}:22 does not answer now (timed out): the link to the host is down or throttled to a trickle " \
           f"(a link silent for {LINK_SILENCE_S:g} s ends the connection)" in message, message
    # within the silence bound and the setup of one reconnect attempt, far inside the run's deadline
    assert ended - cut["at"] < LINK_SILENCE_S + 45, ended - cut["at"]
    # the far host's roles stopped themselves: no heartbeat came for their supervisors
    pids = remote_pids(fleet, run_dir)
    assert len(pids) == 5 and not wait_all_dead(pids.values(), LINK_SILENCE_S + 15)


def test_a_link_throttled_to_a_trickle_mid_run_ends_the_run_naming_host_and_link(netns_ssh_hosts, monkeypatch,
                                                                                  cifar_rec, tmp_path):
    """Host 2's link slowed to 8 kbit/s mid-run, alive but a trickle: what the launcher sends waits
    behind the job's own traffic in the link's queue (tbf holds some 64 KiB: a minute at that rate)
    past the silence bound, so the connection ends as for a link taken down, well inside the run's
    deadline, naming the host and the link; what was measured before is kept."""
    fleet, network = netns_ssh_hosts
    params = use_hosts(monkeypatch, fleet)
    run_dir = run_dir_for(tmp_path)
    thrower, throttled = once_training(run_dir, lambda: network.set_rate("8kbit", host=1))
    try:
        with pytest.raises(RoleFailed) as failed:
            launcher(params).execute(LONG, cifar_rec, RunFolder(run_dir), deadline_s=600)
        ended = time.monotonic()
    finally:
        thrower.join()
        network.set_rate(network.rate, host=1)
    assert "at" in throttled, "worker-1 never logged a speed line"
    message = str(failed.value)
    assert "lost its SSH connection to host mxbench_ssh_2" in message, message
    assert f"{fleet.hosts[1].address}:22 does not answer now (timed out): the link to the host is down or throttled " \
           "to a trickle" in message, message
    # the silence bound starts only once the queue in front of the trickle holds back the launcher's
    # traffic (up to a minute of the job's own), and host 2's clean-up then crosses the drained link:
    # 39-107 s after the throttle in the runs seen, where a hang would last the run's deadline (600 s)
    assert ended - throttled["at"] < LINK_SILENCE_S + 120, ended - throttled["at"]
    # what was measured before stays: the workers' streamed speed lines, and host 1's rank log fetched
    assert all("Speed:" in _read(run_dir / "roles" / f"worker-{i}.log") for i in range(2))
    assert list(run_dir.glob("rank*.log"))


def test_the_fetch_survives_a_link_that_drops_and_returns(netns_ssh_hosts, monkeypatch, tmp_path, capsys):
    """Host 2's link goes down for longer than the silence bound while its run folder comes back
    over SFTP: the launcher waits for the link, fetches again on a new connection what it had not
    brought whole, and no half file is left in the run folder."""
    fleet, network = netns_ssh_hosts
    monkeypatch.setattr(ssh_launcher, "LINK_SILENCE_S", 4.0)  # the silence bound, short for the test
    monkeypatch.setattr(ssh_launcher, "FETCH_RETRY_PAUSE_S", 0.5)
    ssh = launcher(use_hosts(monkeypatch, fleet))
    host = ssh.hosts[1]
    run_dir = run_dir_for(tmp_path)
    remote = remote_folder(fleet, fleet.hosts[1], run_dir)
    remote.mkdir(parents=True)
    files = {"rank1.log": b"INFO:root:Epoch[0] Batch [2]\n" * 100, "gpu-rank1.csv": os.urandom(24 << 20),
             "host.json": b"{}"}
    for name, content in files.items():
        (remote / name).write_bytes(content)
    cut = {}

    def drop_and_return():
        end = time.monotonic() + 60
        while time.monotonic() < end and not any(p.stat().st_size > 1 << 20 for p in run_dir.glob(".fetching-*")):
            time.sleep(0.01)
        cut["down"] = time.monotonic()
        network.set_link(1, up=False)
        time.sleep(ssh_launcher.LINK_SILENCE_S + 8)  # past the bound and the check that the link is down
        network.set_link(1, up=True)
        cut["up"] = time.monotonic()

    network.set_rate("20mbit", host=1)  # 24 MB: about 10 s, to be cut in the middle
    dropper = threading.Thread(target=drop_and_return)
    dropper.start()
    try:
        ssh._fetch([host], {host.conn_id: str(remote)}, RunFolder(run_dir))
    finally:
        dropper.join()
        network.set_link(1, up=True)
        network.set_rate(network.rate, host=1)
        ssh.close()
    assert "down" in cut, "the fetch never got under way"
    assert "over SFTP failed" in capsys.readouterr().err  # it was cut, and tried again
    assert {name: (run_dir / name).read_bytes() for name in files} == files
    assert not list(run_dir.glob(".fetching-*"))
    assert not remote.exists()  # fetched whole: removed from the host
