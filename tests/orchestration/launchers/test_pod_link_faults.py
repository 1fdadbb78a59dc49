"""A pod's log read back over a link that drops and returns, on the Kubernetes stand-in (standins.kube):
the API server reads a whole log from the pod's node (its kubelet port, behind the node's link), as
a real one does. Node 2's link goes down in the middle of the read, for longer than the server waits
on a silent node and the node grace: the launcher waits for the node to be Ready again and reads the
log again; the role log ends up whole and no half-read file is left."""
import threading
import time

import pytest

from conftest import NODE_GRACE_S, core_api, pods_left, train_python
from mxbench.launchers.kubernetes import role_pods
from mxbench.launchers.kubernetes.role_pods import RolePod, RunPods
from mxbench.run_folder import RunFolder
from mxbench_train.role_plan import Role
from standins import netns
from standins.kube.server import LOG_RELAY_SILENCE_S

pytestmark = pytest.mark.slow  # a pod on the stand-in, its node's link cut

LINES = 80_000  # about 8 MB of log: some 3 s through a 20 Mbit/s link


def _pod(name, run, attempt):
    write = f"import sys\nfor i in range({LINES}): sys.stdout.write(f'line {{i:07d}} ' + 'x' * 90 + '\\n')"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "mxbench",
                         "labels": {"mxbench.io/run": run, "mxbench.io/attempt": attempt}},
            "spec": {"restartPolicy": "Never", "nodeName": "standin-node-2",
                     "containers": [{"name": "base", "image": "mxbench-standin",
                                     "command": [train_python(), "-c", write]}]}}


def test_the_pod_log_fetch_survives_a_link_that_drops_and_returns(kube_standin, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(role_pods, "FETCH_RETRY_PAUSE_S", 0.2)
    nodes = netns.Network.from_json(kube_standin.network["underlay"])
    run_dir = tmp_path / "run"
    (run_dir / "roles").mkdir(parents=True)
    pods = RunPods(core_api(kube_standin), "mxbench", "linkfault", "a1")
    role = Role("worker-1", "worker", "standin-node-2", (), {})
    log = run_dir / "roles" / "worker-1.log"
    handle = RolePod(pods, role, _pod("mxb-linkfault-worker-1", "linkfault", "a1"), log, RunFolder(run_dir), 60)
    cut = {}

    def drop_and_return():
        end = time.monotonic() + 60
        fetching = log.with_name(f".{log.name}.fetched")
        while not (fetching.exists() and fetching.stat().st_size > 1 << 20):
            if time.monotonic() > end:
                return  # never got under way: nothing cut, and the test says so
            time.sleep(0.01)
        cut["down"] = time.monotonic()
        nodes.set_link(1, up=False)
        time.sleep(max(LOG_RELAY_SILENCE_S, NODE_GRACE_S) + 4)  # the read cut short, the node Unknown
        nodes.set_link(1, up=True)
        cut["up"] = time.monotonic()

    try:
        end = time.monotonic() + 60
        while handle.poll() is None and time.monotonic() < end:
            time.sleep(0.2)
        assert handle.returncode == 0, handle.describe()
        nodes.set_rate("20mbit", host=1)
        dropper = threading.Thread(target=drop_and_return)
        dropper.start()
        try:
            handle.fetch_log()
        finally:
            dropper.join()
    finally:
        nodes.set_link(1, up=True)
        nodes.set_rate(nodes.rate, host=1)
        handle.close()
        pods.delete_all()
    assert "down" in cut, "the read never got under way"
    assert "reading the log of pod mxb-linkfault-worker-1 again failed" in capsys.readouterr().err
    lines = log.read_text().splitlines()
    assert len(lines) == LINES and lines[-1].startswith(f"line {LINES - 1:07d} "), (len(lines), lines[-1:])
    assert not list(log.parent.glob(".*.fetched"))
    assert pods_left(kube_standin) == []
