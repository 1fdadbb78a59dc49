"""A link that fails mid-run, over real sshd hosts in network namespaces (standins.netns): host 2's
link is taken down while the two-host dist_sync job trains. Nothing tells either end (no RST, no
FIN): the run must end within the silence bound, naming the host and the link, and the roles on the
far host must stop by themselves (their supervisors hear no heartbeat). Nothing of the network or
the hosts is left once the fleet stops."""
import threading
import time

import pytest
from test_ssh_launcher import LONG, _read, launcher, remote_pids, run_dir_for, use_hosts, wait_all_dead

from mxbench.launchers.ssh.commands import LINK_SILENCE_S
from mxbench.run_folder import RunFolder
from mxbench_train.plan_runner import RoleFailed

pytestmark = pytest.mark.slow  # MXNet jobs over two real sshd hosts in namespaces


def test_a_link_taken_down_mid_run_ends_the_run_naming_host_and_link(netns_ssh_hosts, monkeypatch, cifar_rec, tmp_path):
    fleet, network = netns_ssh_hosts
    keep = {"mxbench_keep_failed_runs": True}
    params = use_hosts(monkeypatch, fleet, (keep, keep))
    run_dir = run_dir_for(tmp_path)
    cut = {}

    def cut_host2():
        end = time.monotonic() + 120
        while time.monotonic() < end and "Speed:" not in _read(run_dir / "roles" / "worker-1.log"):
            time.sleep(0.2)
        cut["at"] = time.monotonic()
        network.set_link(1, up=False)  # host 2's switch port: silence both ways, no RST

    cutter = threading.Thread(target=cut_host2)
    cutter.start()
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
