"""The loopback Kubernetes stand-in (standins.kube), driven by the real
``kubernetes`` client and, once, by Airflow's KubernetesPodOperator."""
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client, config

from mxbench_train.localhost import is_running as alive
from standins.kube import PID_ANNOTATION, start

pytestmark = pytest.mark.slow  # the stand-in serving the real operator and client

PY = sys.executable


def _running_standin(root, **options):
    standin = start(root, **options)
    try:
        yield standin
    finally:
        standin.stop()
        assert standin.process.returncode == 0, (root / "standin.log").read_text()
        left = [pid for pid in standin.started_pids() if alive(pid)]
        assert not left, f"pod processes left behind: {left}"


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    yield from _running_standin(tmp_path_factory.mktemp("standin"))


@pytest.fixture(scope="module")
def api(standin):
    return client.CoreV1Api(config.new_client_from_config(config_file=str(standin.kubeconfig)))


def pod(name, code, *, labels=None, env=None, args=None, resources=None, **spec):
    container = {"name": "main", "image": "python:3.11", "command": [PY, "-c", code], "args": args or [],
                 "env": env or []}
    if resources:
        container["resources"] = resources
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"restartPolicy": "Never", "containers": [container], **spec}}


def wait_for(api, name, ok, timeout=20, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = api.read_namespaced_pod(name, "default")
        if ok(found):
            return found
        time.sleep(0.1)
    raise AssertionError(f"pod {name}: no {what} within {timeout}s; last status {found.status}")


def wait_phase(api, name, *phases, timeout=20):
    return wait_for(api, name, lambda p: p.status.phase in phases, timeout, f"phase {phases}")


def wait_gone(api, name, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            api.read_namespaced_pod(name, "default")
        except client.ApiException as error:
            assert error.status == 404
            return
        time.sleep(0.1)
    raise AssertionError(f"pod {name} still exists after {timeout}s")


def log_of(api, name, **options):
    # _preload_content=False: this client turns a preloaded text body into "b'...'"
    return api.read_namespaced_pod_log(name, "default", _preload_content=False, **options).data.decode()


def pid_of(found):
    return int(found.metadata.annotations[PID_ANNOTATION])


def rejection(api, manifest):
    with pytest.raises(client.ApiException) as caught:
        api.create_namespaced_pod("default", manifest)
    body = json.loads(caught.value.body)
    return caught.value.status, body


def test_version_nodes_and_unknown_paths(standin, api):
    version = client.VersionApi(api.api_client).get_code()
    assert version.git_version == "v1.34.0-mxbench-standin" and version.platform == "linux/amd64"
    nodes = api.list_node().items
    assert [n.metadata.name for n in nodes] == ["standin-node-1", "standin-node-2"]
    machine = Path("/etc/machine-id").read_text().strip()
    network = nodes[0].status.addresses[0].address.split(".")[1]  # each stand-in's own 127.<k>/16
    assert 16 <= int(network) <= 254
    for i, node in enumerate(nodes, 1):
        assert node.metadata.labels["kubernetes.io/hostname"] == node.metadata.name
        assert {(a.type, a.address) for a in node.status.addresses} == {("InternalIP", f"127.{network}.0.{i}"),
                                                                      ("Hostname", node.metadata.name)}
        assert node.status.allocatable["cpu"] == str(os.cpu_count())
        assert node.status.capacity["nvidia.com/gpu"] == "0"
        assert node.status.node_info.machine_id == machine  # one machine behind every node
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
    assert api.read_node("standin-node-2").metadata.name == "standin-node-2"
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{standin.url}/apis/batch/v1/namespaces/default/jobs")
    assert caught.value.code == 404
    assert json.load(caught.value) | {"message": ""} == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "",
        "reason": "NotFound", "code": 404, "details": {}}


def test_pod_runs_with_its_env_and_own_bindable_ip(api):
    code = ("import os, socket, sys\n"
            "s = socket.socket(); s.bind((os.environ['MY_IP'], 0))\n"
            "print('bound', s.getsockname()[0])\n"
            "print('name', os.environ['MY_NAME'], 'arg', sys.argv[1])\n"
            "print('to stderr', file=sys.stderr)\n")
    env = [{"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    names = ["env-a", "env-b"]
    for name in names:
        api.create_namespaced_pod("default", pod(name, code, env=env, args=["$(MY_NAME)-x"]))
    ips = set()
    for name in names:
        done = wait_phase(api, name, "Succeeded", "Failed")
        assert done.status.phase == "Succeeded", log_of(api, name)
        terminated = done.status.container_statuses[0].state.terminated
        assert (terminated.exit_code, terminated.reason) == (0, "Completed")
        ip = done.status.pod_ip
        node_ips = {n.status.addresses[0].address for n in api.list_node().items}
        assert re.fullmatch(r"127\.\d+\.\d+\.\d+", ip) and ip not in node_ips
        assert done.status.host_ip in node_ips
        assert log_of(api, name) == f"bound {ip}\nname {name} arg {name}-x\nto stderr\n"
        ips.add(ip)
    assert len(ips) == 2
    reasons = [e.reason for e in api.list_namespaced_event("default", field_selector="involvedObject.name=env-a").items]
    assert reasons == ["Scheduled", "Pulled", "Created", "Started"]
    for name in names:
        api.delete_namespaced_pod(name, "default")


def test_follow_streams_lines_as_printed_and_timestamps(api):
    code = "import time\nprint('first', flush=True)\ntime.sleep(2.5)\nprint('second', flush=True)\n"
    api.create_namespaced_pod("default", pod("follow", code))
    wait_phase(api, "follow", "Running")
    response = api.read_namespaced_pod_log("follow", "default", follow=True, _preload_content=False)
    chunks = response.stream(amt=None)
    first = next(chunks)
    assert first == b"first\n"
    assert api.read_namespaced_pod("follow", "default").status.phase == "Running"  # arrived before the end
    assert first + b"".join(chunks) == b"first\nsecond\n"
    assert wait_phase(api, "follow", "Succeeded").status.phase == "Succeeded"

    stamped = log_of(api, "follow", timestamps=True).splitlines()
    pattern = r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z) (first|second)"
    assert all(re.fullmatch(pattern, line) for line in stamped), stamped
    seconds = [time.mktime(time.strptime(line[:19], "%Y-%m-%dT%H:%M:%S")) for line in stamped]
    assert seconds[1] - seconds[0] >= 1  # the time each line arrived, not the time of the request
    assert log_of(api, "follow", tail_lines=1) == "second\n"
    api.delete_namespaced_pod("follow", "default")


def test_a_line_without_end_is_served_in_pieces_as_it_comes(api):
    # the CRI stores a long line in pieces of 16 KiB: a pod printing without a newline is not held back
    code = "import sys, time\nsys.stdout.write('z' * 100000)\nsys.stdout.flush()\ntime.sleep(30)\n"
    api.create_namespaced_pod("default", pod("endless", code))
    wait_phase(api, "endless", "Running")
    deadline = time.monotonic() + 10
    while len(log_of(api, "endless")) < 6 * 16384 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert log_of(api, "endless") == "z" * (6 * 16384)  # whole pieces; the rest waits for its newline or 16 KiB
    assert log_of(api, "endless", tail_lines=2) == "z" * (2 * 16384)  # each piece counts as a line
    api.delete_namespaced_pod("endless", "default", grace_period_seconds=0)


def test_failures_report_exit_codes(api):
    api.create_namespaced_pod("default", pod("exit-three", "import sys; print('bye'); sys.exit(3)"))
    api.create_namespaced_pod("default", pod("killed", "import os; os.kill(os.getpid(), 9)"))
    failed = wait_phase(api, "exit-three", "Succeeded", "Failed")
    terminated = failed.status.container_statuses[0].state.terminated
    assert (failed.status.phase, terminated.exit_code, terminated.reason) == ("Failed", 3, "Error")
    assert terminated.finished_at >= terminated.started_at
    killed = wait_phase(api, "killed", "Succeeded", "Failed")
    assert killed.status.container_statuses[0].state.terminated.exit_code == 128 + 9
    api.delete_collection_namespaced_pod("default", field_selector="status.phase=Failed")
    assert not api.list_namespaced_pod("default", field_selector="status.phase=Failed").items


def test_label_selectors_and_collection_delete_kill_processes(api):
    sleeper = "import time; time.sleep(60)"
    for name, labels in [("sel-1", {"group": "a", "role": "x"}), ("sel-2", {"group": "a", "role": "y"}),
                         ("sel-3", {"group": "b", "role": "x"}), ("sel-4", {"group": "b"})]:
        api.create_namespaced_pod("default", pod(name, sleeper, labels=labels))
    pids = {n: pid_of(wait_phase(api, n, "Running")) for n in ("sel-1", "sel-2", "sel-3", "sel-4")}

    def names(selector, field=""):
        found = api.list_namespaced_pod("default", label_selector=selector, field_selector=field).items
        return sorted(p.metadata.name for p in found)
    assert names("group=a") == ["sel-1", "sel-2"]
    assert names("group==b,role!=x") == ["sel-4"]
    assert names("group in (a,b),role notin (y)") == ["sel-1", "sel-3", "sel-4"]
    assert names("!role") == ["sel-4"] and names("role,group=b") == ["sel-3"]
    assert names("group", "metadata.name!=sel-1,status.phase=Running") == ["sel-2", "sel-3", "sel-4"]
    everywhere = client.CoreV1Api(api.api_client).list_pod_for_all_namespaces(label_selector="group=b")
    assert sorted(p.metadata.name for p in everywhere.items) == ["sel-3", "sel-4"]

    api.delete_collection_namespaced_pod("default", label_selector="group=a", grace_period_seconds=0)
    for name in ("sel-1", "sel-2"):
        wait_gone(api, name, timeout=10)
        assert not alive(pids[name])
    assert alive(pids["sel-3"]) and alive(pids["sel-4"])
    api.delete_collection_namespaced_pod("default", label_selector="group=b")  # SIGTERM ends a sleep
    for name in ("sel-3", "sel-4"):
        wait_gone(api, name, timeout=10)
        assert not alive(pids[name])


def test_delete_waits_the_grace_period_then_kills(api):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    api.create_namespaced_pod("default", pod("stubborn", code))
    running = wait_for(api, "stubborn", lambda p: log_ready(api, p), what="its first line")
    pid = pid_of(running)
    deleted = api.delete_namespaced_pod("stubborn", "default", grace_period_seconds=2)
    assert deleted.metadata.deletion_timestamp is not None and deleted.metadata.deletion_grace_period_seconds == 2
    time.sleep(0.7)
    assert alive(pid)  # SIGTERM ignored: it lives out the grace period
    assert api.read_namespaced_pod("stubborn", "default").metadata.deletion_timestamp is not None
    wait_gone(api, "stubborn", timeout=10)
    assert not alive(pid)
    events = api.list_namespaced_event("default", field_selector="involvedObject.name=stubborn,reason=Killing")
    assert [e.message for e in events.items] == ["Stopping container main"]


def log_ready(api, found):
    return found.status.phase == "Running" and log_of(api, found.metadata.name) == "up\n"


def test_active_deadline_exceeded(api):
    api.create_namespaced_pod("default", pod("deadline", "import time; time.sleep(60)", activeDeadlineSeconds=1))
    pid = pid_of(wait_phase(api, "deadline", "Running"))
    failed = wait_for(api, "deadline", lambda p: p.status.container_statuses[0].state.terminated, timeout=10,
                      what="terminated container")
    assert (failed.status.phase, failed.status.reason) == ("Failed", "DeadlineExceeded")
    assert failed.status.message == "Pod was active on the node longer than the specified deadline"
    assert not alive(pid)
    api.delete_namespaced_pod("deadline", "default")


def test_gpu_pod_on_gpuless_standin_stays_pending(api):
    api.create_namespaced_pod("default", pod("wants-gpu", "print(1)", resources={"limits": {"nvidia.com/gpu": 1}}))
    time.sleep(1.5)
    pending = api.read_namespaced_pod("wants-gpu", "default")
    assert pending.status.phase == "Pending" and not pending.status.container_statuses
    scheduled = [c for c in pending.status.conditions if c.type == "PodScheduled"]
    assert (scheduled[0].status, scheduled[0].reason) == ("False", "Unschedulable")
    events = api.list_namespaced_event("default", field_selector="involvedObject.name=wants-gpu").items
    assert [(e.reason, e.type, e.message) for e in events] == [
        ("FailedScheduling", "Warning", "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")]
    with pytest.raises(client.ApiException) as caught:
        log_of(api, "wants-gpu")
    assert caught.value.status == 400 and "is waiting to start" in caught.value.body
    api.delete_namespaced_pod("wants-gpu", "default")
    wait_gone(api, "wants-gpu", timeout=2)


def test_gpus_are_counted_per_node(tmp_path):
    for standin in _running_standin(tmp_path, nodes=2, gpus_per_node=1):
        api = client.CoreV1Api(config.new_client_from_config(config_file=str(standin.kubeconfig)))
        one_gpu = {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}
        for name in ("gpu-1", "gpu-2", "gpu-3"):
            api.create_namespaced_pod("default", pod(name, "import time; time.sleep(3)", resources=one_gpu))
        hosts = {wait_phase(api, n, "Running").spec.node_name for n in ("gpu-1", "gpu-2")}
        assert hosts == {"standin-node-1", "standin-node-2"}
        assert api.read_namespaced_pod("gpu-3", "default").status.phase == "Pending"
        assert wait_phase(api, "gpu-3", "Running", "Succeeded").status.phase in ("Running", "Succeeded")
        api.create_namespaced_pod("default", pod("picky", "print(1)",
                                                 nodeSelector={"kubernetes.io/hostname": "elsewhere"}))
        time.sleep(1)
        message = api.read_namespaced_pod("picky", "default").status.conditions[0].message
        assert message == "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
        api.create_namespaced_pod("default", pod("left-running", "import time; time.sleep(60)"))
        wait_phase(api, "left-running", "Running")  # stopping the stand-in must end it (checked at teardown)


def test_invalid_and_unsupported_manifests_are_refused(standin, api):
    bad_cpu = pod("bad-cpu", "print(1)", resources={"limits": {"cpu": "two"}})
    code, body = rejection(api, bad_cpu)
    assert (code, body["reason"]) == (422, "Invalid")
    assert "spec.containers[0].resources.limits[cpu]" in body["message"] and '"two"' in body["message"]
    typo = pod("typo", "print(1)")
    typo["spec"]["containers"][0]["imagee"] = "x"
    code, body = rejection(api, typo)
    assert code == 422 and "imagee" in body["message"] and "spec.containers[0]" in body["message"]
    fractional = pod("half-gpu", "print(1)", resources={"limits": {"nvidia.com/gpu": "0.5"}})
    assert "must be an integer" in rejection(api, fractional)[1]["message"]
    mismatched = pod("gpu-req", "print(1)",
                     resources={"limits": {"nvidia.com/gpu": 1}, "requests": {"nvidia.com/gpu": 2}})
    assert "must be equal to nvidia.com/gpu limit" in rejection(api, mismatched)[1]["message"]
    assert "metadata.name" in rejection(api, pod("Upper_Case", "print(1)"))[1]["message"]
    always = pod("always", "print(1)", restartPolicy="Always")
    assert "does not restart containers" in rejection(api, always)[1]["message"]
    entrypoint = pod("args-only", "print(1)")
    entrypoint["spec"]["containers"][0]["args"] = entrypoint["spec"]["containers"][0].pop("command")
    assert "no image entrypoint" in rejection(api, entrypoint)[1]["message"]
    claim = pod("claim", "print(1)", volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}])
    assert "emptyDir and hostPath volumes only: data" in rejection(api, claim)[1]["message"]
    for name in ("bad-cpu", "typo", "half-gpu", "always", "args-only", "claim"):
        with pytest.raises(client.ApiException) as caught:
            api.read_namespaced_pod(name, "default")
        assert caught.value.status == 404  # nothing stored
    received = [json.loads(line)["metadata"]["name"] for line in (standin.root / "manifests.jsonl").open()]
    assert {"bad-cpu", "typo", "claim"} <= set(received)

    api.create_namespaced_pod("default", pod("dup", "print(1)"))
    assert rejection(api, pod("dup", "print(1)"))[:1] == (409,)
    api.patch_namespaced_pod("dup", "default", {"metadata": {"labels": {"patched": "yes"}}})
    assert [p.metadata.name for p in api.list_namespaced_pod("default", label_selector="patched=yes").items] == ["dup"]
    with pytest.raises(client.ApiException) as caught:
        api.patch_namespaced_pod("dup", "default", {"metadata": {"labels": {"bad key!": "x"}}})
    assert caught.value.status == 422
    api.delete_namespaced_pod("dup", "default")


def test_host_network_pod_gets_the_node_ip(api):
    code = "import os, socket; socket.socket().bind((os.environ['IP'], 0)); print(os.environ['IP'])"
    env = [{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    api.create_namespaced_pod("default", pod("host-net", code, env=env, hostNetwork=True))
    done = wait_phase(api, "host-net", "Succeeded", "Failed")
    assert done.status.phase == "Succeeded", log_of(api, "host-net")
    assert done.status.pod_ip == done.status.host_ip == log_of(api, "host-net").strip()
    assert done.status.pod_ip in {n.status.addresses[0].address for n in api.list_node().items}
    api.delete_namespaced_pod("host-net", "default")


def test_volume_paths_are_translated(api, tmp_path):
    (tmp_path / "in.txt").write_text("from the host\n")
    code = ("import os, sys\n"
            "text = open(sys.argv[1]).read()\n"
            "open(sys.argv[2], 'w').write(text.upper())\n"
            "open(os.environ['REPORT'], 'w').write(os.getcwd())\n"
            "print(os.path.exists('/dev/shm'), sys.argv[2] != '/work/out/x')\n")
    manifest = pod("volumes", code, args=["/data/in.txt", "/work/out/x"],
                   env=[{"name": "REPORT", "value": "/data/cwd.txt"}],
                   volumes=[{"name": "out", "emptyDir": {}},
                            {"name": "data", "hostPath": {"path": str(tmp_path), "type": "Directory"}},
                            {"name": "shm", "emptyDir": {"medium": "Memory"}}])
    container = manifest["spec"]["containers"][0]
    container["workingDir"] = "/work/out"
    container["volumeMounts"] = [{"name": "out", "mountPath": "/work/out"}, {"name": "data", "mountPath": "/data"},
                                 {"name": "shm", "mountPath": "/dev/shm"}]
    api.create_namespaced_pod("default", manifest)
    done = wait_phase(api, "volumes", "Succeeded", "Failed")
    assert done.status.phase == "Succeeded", log_of(api, "volumes")
    assert log_of(api, "volumes") == "True True\n"
    empty_dir = Path((tmp_path / "cwd.txt").read_text())  # the working dir is the emptyDir folder
    assert empty_dir.name == "out" and (empty_dir / "x").read_text() == "FROM THE HOST\n"
    api.delete_namespaced_pod("volumes", "default")
    wait_gone(api, "volumes")
    deadline = time.monotonic() + 5
    while empty_dir.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not empty_dir.exists()  # an emptyDir goes with its pod



def fake_python(folder, marker):
    """FOLDER/bin/python: a shell script printing MARKER and the first entry of its PATH."""
    program = folder / "bin" / "python"
    program.parent.mkdir(parents=True)
    program.write_text(f'#!/bin/sh\necho "{marker}, PATH starts with ${{PATH%%:*}}"\n')
    program.chmod(0o755)
    return program


def test_an_image_that_is_a_local_folder_provides_the_programs(tmp_path, monkeypatch):
    image, host = tmp_path / "image", tmp_path / "host"
    fake_python(image, "image python")
    fake_python(host, "stand-in python")
    # the stand-in inherits this PATH: a `python` of its own, whatever this machine has
    monkeypatch.setenv("PATH", os.pathsep.join([str(host / "bin"), os.environ["PATH"]]))
    for standin in _running_standin(tmp_path / "root"):
        api = client.CoreV1Api(config.new_client_from_config(config_file=str(standin.kubeconfig)))
        images = {"folder-image": str(image), "registry-image": "registry/mxbench-train:1.9.0",
                  "missing-folder-image": str(tmp_path / "no-such-image"), "relative-image": "image"}
        for name, image_name in images.items():
            manifest = pod(name, "")
            manifest["spec"]["containers"][0] |= {"image": image_name, "command": ["python", "-c", "print(1)"]}
            api.create_namespaced_pod("default", manifest)
        logs = {}
        for name in images:
            done = wait_phase(api, name, "Succeeded", "Failed")
            assert done.status.phase == "Succeeded", log_of(api, name)
            logs[name] = log_of(api, name)
        assert logs == {"folder-image": f"image python, PATH starts with {image / 'bin'}\n",
                        "registry-image": f"stand-in python, PATH starts with {host / 'bin'}\n",
                        "missing-folder-image": f"stand-in python, PATH starts with {host / 'bin'}\n",
                        "relative-image": f"stand-in python, PATH starts with {host / 'bin'}\n"}

KPO_DAG = """
import pendulum
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG

with DAG("standin_kpo", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
    KubernetesPodOperator(
        task_id="hello", name="kpo-hello", namespace="default", image="standin",
        cmds=[{python!r}, "-c", "print('hello from the stand-in', flush=True)"],
        labels={{"test": "kpo"}}, config_file={kubeconfig!r}, in_cluster=False,
        get_logs=True, on_finish_action="delete_pod", startup_timeout_seconds=30)
"""


def test_kubernetes_pod_operator_runs_a_pod(airflow_db, standin, api, capfd, tmp_path):
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    # dag.test() runs only DAGs serialized in the metadata DB: parse the DAG from a file and store it.
    dag_file = tmp_path / "standin_kpo.py"
    dag_file.write_text(KPO_DAG.format(python=PY, kubeconfig=str(standin.kubeconfig)))
    bag = DagBag(dag_folder=str(dag_file))
    assert not bag.import_errors, bag.import_errors
    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(bag, "dags-folder", None)
    run = bag.dags["standin_kpo"].test()
    assert run.state == "success"
    assert "[base] hello from the stand-in" in capfd.readouterr().out  # the task log, via structlog
    created = [json.loads(line) for line in (standin.root / "manifests.jsonl").open()]
    names = [m["metadata"]["name"] for m in created if m["metadata"].get("labels", {}).get("test") == "kpo"]
    assert len(names) == 1 and names[0].startswith("kpo-hello")
    wait_gone(api, names[0], timeout=10)  # on_finish_action="delete_pod"


def _cgroups_of_mount():
    from mxbench_train import cgroup

    mount = cgroup.v2_mount()
    return {p.name for p in mount.iterdir() if p.name.startswith(cgroup.PREFIX)} if mount else set()


def test_each_pod_runs_in_a_cgroup_of_its_own_and_feels_a_busy_node(api):
    """As a real kubelet: each pod's processes in a cgroup of their own, removed when it ends. A pod
    whose two processes compute while two busy loops run outside it on this 2-core node reads its
    own cgroup's pressure (it cannot see the node's processes), and the results side marks its run
    contended by it."""
    import subprocess

    from mxbench.results import contention

    before = _cgroups_of_mount()
    show = "print(open('/proc/self/cgroup').read().splitlines()[-1])"
    for name in ("cg-a", "cg-b"):
        api.create_namespaced_pod("default", pod(name, show))
    seen = {}
    for name in ("cg-a", "cg-b"):
        assert wait_phase(api, name, "Succeeded", "Failed").status.phase == "Succeeded", log_of(api, name)
        seen[name] = log_of(api, name).strip()
    assert seen["cg-a"] != seen["cg-b"]
    assert all(re.fullmatch(rf"0::/mxbench-pod-{name}-\d+-[0-9a-f]{{8}}", line) for name, line in seen.items()), seen
    busy = "import time\nend = time.time() + {s}\nwhile time.time() < end: pass"
    watch = ("import json, subprocess, sys, time\nfrom mxbench_train import host_watch\n"
             f"child = subprocess.Popen([sys.executable, '-c', {busy.format(s=4)!r}])\n"
             "w = host_watch.HostWatch().start()\nend = time.time() + 3\nwhile time.time() < end: pass\n"
             "found = w.stop()\nchild.kill()\nprint(json.dumps(found))")
    hogs = [subprocess.Popen([PY, "-c", busy.format(s=60)]) for _ in range(2)]
    try:
        api.create_namespaced_pod("default", pod("cg-hogged", watch, env=[{"name": "MXBENCH_IN_POD", "value": "1"}]))
        done = wait_phase(api, "cg-hogged", "Succeeded", "Failed", timeout=60)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert done.status.phase == "Succeeded", log_of(api, "cg-hogged")
    found = json.loads(log_of(api, "cg-hogged").strip().splitlines()[-1])
    assert found["pressure_source"] == "the pod's own cgroup" and "foreign_cpu_s" not in found
    row = contention.summarise([{"event": "run_end", "host": found}])
    assert row["contended"] is True and "its own cgroup waited for a CPU" in row["contention"], found
    for name in ("cg-a", "cg-b", "cg-hogged"):
        api.delete_namespaced_pod(name, "default")
    assert _cgroups_of_mount() - before == set()
