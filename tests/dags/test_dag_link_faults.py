"""Link faults under the real scheduler (issue 44): a real Airflow stack (api-server, dag-processor,
scheduler with the LocalExecutor) that this module starts and stops runs one DAG run, triggered
through the REST API, with ssh on hosts in network namespaces (standins.netns) and pods on the
Kubernetes stand-in's nodes (namespaces behind links of their own). Round 1's ssh run has host 2's
link taken down once it trains; round 2's pod run has node 2's link throttled to 8 kbit/s. Each
faulted run ends within its bound with a cause naming the host or node and its link, and its task
fails with that cause in its log; the other runs measure and are kept, their tasks succeed, the
report says which rounds were lost to a link fault, and the DAG run finishes (failed by
check_runs, naming them) with no task left running and the pool's slot back.
Whatever happens, the links come back and no pod or training process is left behind.
"""
import json
import os
import signal
import threading
import time
import urllib.parse

import pandas as pd
import pytest
from test_dag_kubernetes import k8s_env

from conftest import NODE_GRACE_S, QUIET_WAIT_S, core_api, pods_left, train_python
from mxbench.launchers.kubernetes.pods import run_label
from mxbench.launchers.ssh.commands import LINK_SILENCE_S
from mxbench.run_folder import RunFolder
from standins import netns
from standins.airflow_stack import AirflowStack
from standins.kube.heartbeats import HEARTBEAT_S, PROBE_TIMEOUT_S

pytestmark = pytest.mark.slow  # a real Airflow stack runs over sshd and pods in namespaces

DAG = "mxbench_benchmark"

CONF = {"preset": "cpu-demo", "only_variants": ["cpu2h-bs64"], "launchers": ["ssh", "kubernetes"], "repeats": 2,
        "epochs": 5, "synthetic_images": 1000}
SSH_CUT, POD_THROTTLED = "cpu2h-bs64__ssh__r1", "cpu2h-bs64__kubernetes__r2"
RUN_DEADLINE_S = 12 * 60
RUN_TASK = "local.run_variant"  # the machine set that ssh and kubernetes share (one pool, one slot)
POOL = "mxbench_local"


def _training(path) -> bool:
    try:
        return "Speed:" in path.read_text(errors="replace")
    except FileNotFoundError:
        return False


def pod_training(standin, fallback_s=15.0):
    """A predicate of a run folder: a worker's streamed log shows a speed line, or (where a
    follower's stream failed) its worker-1 pod has run for ``fallback_s``."""
    api, running_since = core_api(standin), {}

    def training(folder) -> bool:
        if any(_training(folder / "roles" / f"worker-{i}.log") for i in range(2)):
            return True
        selector = f"mxbench.io/run={run_label(RunFolder(folder))},mxbench.io/role=worker-1"
        if any(p.status.phase == "Running" for p in api.list_namespaced_pod("mxbench", label_selector=selector).items):
            running_since.setdefault(folder, time.monotonic())
        return time.monotonic() - running_since.get(folder, time.monotonic()) >= fallback_s

    return training


def ssh_training(folder) -> bool:
    return _training(folder / "roles" / "worker-1.log")


class Faults:
    """For each (key, training, fault, restore): a thread that, once ``training(folder / key)`` (a run
    of the DAG run's folder ``folder``), applies ``fault()`` and, once the run's meta.json says it
    ended, ``restore()``. ``at[key]``: when its fault began (time.time())."""

    def __init__(self, folder, plan):
        self.folder, self.at, self.done = folder, {}, threading.Event()
        self.threads = [threading.Thread(target=self._run, args=step, daemon=True) for step in plan]
        for thread in self.threads:
            thread.start()

    def _wait(self, ready):
        while not self.done.is_set() and not ready():
            time.sleep(0.1)
        return not self.done.is_set()

    def _run(self, key, training, fault, restore):
        run = self.folder / key
        try:
            if not self._wait(lambda: run.is_dir() and training(run)):
                return
            fault()
            self.at[key] = time.time()
            self._wait(lambda: (run / "meta.json").is_file() and json.loads(
                (run / "meta.json").read_text()).get("status") not in ("running", None))
        finally:
            restore()

    def stop(self):
        self.done.set()
        for thread in self.threads:
            thread.join(120)


def _training_processes(network: netns.Network):
    """Pids of mxbench_train processes still in the hosts' namespaces (sshd itself stays)."""
    pids = []
    for i in range(network.count):
        for pid in netns.run("ip", "netns", "pids", network.namespace(i), check=False).stdout.split():
            try:
                if b"mxbench_train" in open(f"/proc/{pid}/cmdline", "rb").read():
                    pids.append(int(pid))
            except OSError:
                pass
    return pids


def run_path(run_id: str) -> str:
    return f"/api/v2/dags/{DAG}/dagRuns/{urllib.parse.quote(run_id, safe='')}"


def task_instances(stack, run_id: str) -> list:
    answer = stack.call("GET", f"{run_path(run_id)}/taskInstances?limit=100", stack.token("admin"))
    assert answer.status == 200, answer.text
    return answer.json()["task_instances"]


def task_log(stack, run_id: str, ti: dict) -> str:
    """A task instance's log as the UI reads it (the REST API), its events as JSON text."""
    answer = stack.call("GET", f"{run_path(run_id)}/taskInstances/{ti['task_id']}/logs/{ti['try_number']}"
                               f"?map_index={ti['map_index']}&full_content=true", stack.token("admin"))
    assert answer.status == 200, answer.text
    return json.dumps(answer.json()["content"], ensure_ascii=False)


@pytest.fixture(scope="module")
def faulted_dag_run(tmp_path_factory, stack_db, netns_ssh_hosts, kube_standin):
    """The stack, still running, and its DAG run, finished: (stack, run id, state, run folder, when
    each fault began)."""
    from mxbench import config

    fleet, ssh_network = netns_ssh_hosts
    nodes = netns.Network.from_json(kube_standin.network["underlay"])
    plan = [(SSH_CUT, ssh_training, lambda: ssh_network.set_link(1, up=False),
             lambda: ssh_network.set_link(1, up=True)),
            (POD_THROTTLED, pod_training(kube_standin), lambda: nodes.set_rate("8kbit", host=1),
             lambda: nodes.set_rate(nodes.rate, host=1))]
    home = tmp_path_factory.mktemp("link-faults")
    # the namespace ssh hosts, and the stand-in, whose pods read the data where this stack's DAG run prepares it
    env = {**fleet.airflow_env(mxbench_python=train_python()),
           **k8s_env(kube_standin, data={"host_path": str(home / "data")})}
    stack = AirflowStack(home, env=env)
    stack.prepare(template=stack_db)
    with stack.stopped_at_end():
        stack.start()
        admin = stack.token("admin")
        assert stack.call("PATCH", f"/api/v2/dags/{DAG}", admin, {"is_paused": False}).status == 200
        began = time.monotonic()
        answer = stack.call("POST", f"/api/v2/dags/{DAG}/dagRuns", admin,
                            {"logical_date": None, "conf": {"quiet_wait_s": QUIET_WAIT_S, **CONF}})
        assert answer.status == 200, answer.text
        run_id = answer.json()["dag_run_id"]
        folder = home / "runs" / config.dag_run_dir(DAG, run_id).name
        faults = Faults(folder, plan)

        def finished():
            found = stack.call("GET", run_path(run_id), stack.token("admin")).json()
            return found["state"] if found["state"] in ("success", "failed") else None

        try:
            state = stack.wait_for(finished, RUN_DEADLINE_S, f"DAG run {run_id}", every=3)
        finally:
            faults.stop()  # restores what it faulted, whatever happened
            ssh_network.set_link(1, up=True)
            nodes.set_rate(nodes.rate, host=1)
        print(f"\nfaulted DAG run {state} in {time.monotonic() - began:.0f} s under the scheduler")
        yield stack, run_id, state, folder, faults.at
    # nothing left after the test, also a failed one: pods (their namespaces with them) and the
    # far host's roles, which stop by themselves once no heartbeat comes
    api = core_api(kube_standin)
    api.delete_collection_namespaced_pod("mxbench", grace_period_seconds=1)
    end = time.monotonic() + LINK_SILENCE_S + 15
    while (pods_left(kube_standin) or _training_processes(ssh_network)) and time.monotonic() < end:
        time.sleep(0.5)
    left = _training_processes(ssh_network)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert pods_left(kube_standin) == [] and not left, left
    assert not [n for n in nodes.namespaces if "-pod" in n]


def test_a_link_fault_ends_its_run_naming_host_and_link_and_the_dag_run_goes_on(faulted_dag_run, netns_ssh_hosts,
                                                                                kube_standin):
    stack, run_id, state, dag_dir, at = faulted_dag_run
    fleet, _ = netns_ssh_hosts
    assert set(at) == {SSH_CUT, POD_THROTTLED}, at  # both faults landed while their run trained
    runs = pd.read_csv(dag_dir / "tables" / "runs.csv").set_index("key")
    assert runs["status"].to_dict() == {"cpu2h-bs64__ssh__r1": "failed", "cpu2h-bs64__kubernetes__r1": "ok",
                                        "cpu2h-bs64__kubernetes__r2": "failed", "cpu2h-bs64__ssh__r2": "ok"}
    assert (runs.loc[["cpu2h-bs64__kubernetes__r1", "cpu2h-bs64__ssh__r2"], "samples_per_sec"] > 0).all()

    ssh_cause = runs.loc[SSH_CUT, "cause"]
    assert "lost its SSH connection to host mxbench_ssh_2" in ssh_cause, ssh_cause
    assert f"{fleet.hosts[1].address}:22 does not answer now" in ssh_cause, ssh_cause
    assert "the link to the host is down or throttled to a trickle" in ssh_cause, ssh_cause
    node_2 = core_api(kube_standin).read_node("standin-node-2").status.addresses[0].address
    pod_cause = runs.loc[POD_THROTTLED, "cause"]
    assert f"on host standin-node-2 lost its node: node standin-node-2 ({node_2}) is unreachable" in pod_cause, \
        pod_cause
    assert "NodeStatusUnknown" in pod_cause and "the link to the node is down or throttled to a trickle" in pod_cause
    assert "(pod mxb-" in pod_cause, pod_cause

    # each ended within its bound (the silence bound and one reconnect check; the node grace, a
    # heartbeat and its probe, and the launcher's node poll), far inside the run's deadline
    ended = {key: json.loads((dag_dir / key / "meta.json").read_text())["ended_at"] for key in at}
    assert ended[SSH_CUT] - at[SSH_CUT] < LINK_SILENCE_S + 45, ended[SSH_CUT] - at[SSH_CUT]
    bound = NODE_GRACE_S + HEARTBEAT_S + PROBE_TIMEOUT_S + 20
    assert ended[POD_THROTTLED] - at[POD_THROTTLED] < bound, ended[POD_THROTTLED] - at[POD_THROTTLED]
    # what the faulted ssh run measured before the fault stays in its folder
    assert _training(dag_dir / SSH_CUT / "roles" / "worker-0.log")

    states = {ti["task_id"]: ti["state"] for ti in task_instances(stack, run_id) if ti["map_index"] < 0}
    assert states["report"] == "success" and states["check_runs"] == "failed", states
    assert state == "failed"


def test_the_faulted_tasks_fail_with_their_cause_the_others_succeed_and_the_pool_slot_comes_back(faulted_dag_run):
    stack, run_id, state, dag_dir, _ = faulted_dag_run
    tis = task_instances(stack, run_id)
    shown = sorted((ti["task_id"], ti["rendered_map_index"], ti["state"]) for ti in tis)
    runs = {ti["rendered_map_index"]: ti for ti in tis if ti["task_id"] == RUN_TASK}
    assert {key: ti["state"] for key, ti in runs.items()} == {
        "cpu2h-bs64__ssh__r1": "failed", "cpu2h-bs64__kubernetes__r1": "success",
        "cpu2h-bs64__kubernetes__r2": "failed", "cpu2h-bs64__ssh__r2": "success"}, shown
    assert len({ti["pid"] for ti in runs.values()}) == len(runs)  # each in a task process of its own
    others = {ti["task_id"]: ti["state"] for ti in tis if ti["task_id"] not in (RUN_TASK, "check_runs")}
    assert set(others.values()) == {"success"}, shown
    # each faulted task's log (as the UI shows it) and its run folder name the run's cause
    for key, words in ((SSH_CUT, "lost its SSH connection to host mxbench_ssh_2"),
                       (POD_THROTTLED, "on host standin-node-2 lost its node: node standin-node-2 (")):
        log = task_log(stack, run_id, runs[key])
        assert f"run {key} failed: " in log and words in log, log[-3000:]
        meta = json.loads((dag_dir / key / "meta.json").read_text())
        assert meta["status"] == "failed" and words in meta["cause"], meta
    # nothing left running or queued, and the one-slot pool is free again
    assert not [ti for ti in tis if ti["state"] not in ("success", "failed", "skipped")], shown
    pool = stack.call("GET", f"/api/v2/pools/{POOL}", stack.token("admin")).json()
    assert (pool["slots"], pool["open_slots"], pool["occupied_slots"], pool["running_slots"],
            pool["queued_slots"]) == (1, 1, 0, 0, 0), pool


def test_the_report_says_which_rounds_a_link_fault_lost(faulted_dag_run, netns_ssh_hosts):
    _, _, _, dag_dir, _ = faulted_dag_run
    fleet, _ = netns_ssh_hosts
    md = (dag_dir / "report" / "report.md").read_text()
    address = fleet.hosts[1].address
    assert (f"LINK FAULT: round 1 of cpu2h-bs64 under ssh ({SSH_CUT}) was lost to a link fault: host mxbench_ssh_2 "
            f"({address}): {address}:22 does not answer now") in md
    assert (f"LINK FAULT: round 2 of cpu2h-bs64 under kubernetes ({POD_THROTTLED}) was lost to a link fault: node "
            "standin-node-2 (") in md
    assert md.count("The round was not re-measured: the verdicts rest on the rounds that measured.") == 2

