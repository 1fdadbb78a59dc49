"""The loopback Kubernetes stand-in (standins.kube), driven by the real
``kubernetes`` client and, once, by Airflow's KubernetesPodOperator. Its pod network: pods in
namespaces of their own on two node namespaces joined by a VXLAN overlay (as root here), the node's
stack for hostNetwork, and processes on the machine's own stack where namespaces cannot be made."""
import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client, config

from mxbench_train.localhost import is_running as alive
from standins import netns
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
        assert not network_left(standin.network), "the pod network outlived the stand-in"


def network_left(network):
    """What of a stand-in's pod network is still there: namespaces (nodes', pods'), the root link."""
    return netns.Network.from_json(network["underlay"]).existing() if network["kind"] == "vxlan" else []


def pod_namespaces(network):
    prefix = network["underlay"]["prefix"] + "-pod"
    return [line.split()[0] for line in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                                       check=True).stdout.splitlines() if line.startswith(prefix)]


def vxlan_sent(network, node):
    """Bytes node (0-based) has sent into the overlay (its flannel.1's transmitted bytes)."""
    shown = subprocess.run(["ip", "-n", network["node_namespaces"][node], "-j", "-s", "link", "show",
                            network["vxlan_device"]], capture_output=True, text=True, check=True).stdout
    return int(json.loads(shown)[0]["stats64"]["tx"]["bytes"])


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
    network = standin.network
    assert network["kind"] == "vxlan", network  # root with iproute2: this machine and CI
    for i, node in enumerate(nodes, 1):
        assert node.metadata.labels["kubernetes.io/hostname"] == node.metadata.name
        assert {(a.type, a.address) for a in node.status.addresses} == {("InternalIP", network["node_ips"][i - 1]),
                                                                      ("Hostname", node.metadata.name)}
        said = node.metadata.annotations["standin.mxbench/pod-network"]
        assert said.startswith("vxlan overlay between 2 nodes: ")
        assert node.metadata.annotations["flannel.alpha.coreos.com/backend-type"] == "vxlan"  # as flanneld's
        assert node.spec.pod_cidr == network["pod_subnets"][i - 1]
        assert ipaddress.ip_network(node.spec.pod_cidr).subnet_of(netns.BENCHMARK_RANGE)
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
        node = api.read_node(done.spec.node_name)
        assert ipaddress.ip_address(ip) in ipaddress.ip_network(node.spec.pod_cidr) and ip not in node_ips
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


def test_a_host_network_pod_is_on_its_nodes_stack_and_a_pod_on_its_own(standin, api):
    """What a pod reads of its own network (mxbench_train.localhost, as ``pod-role`` records it for
    the report): a hostNetwork pod its node's bridge, VXLAN device and link; a pod only its own
    eth0, a veth with the overlay's MTU, 50 below the node link's 1500 (VXLAN's header), as flannel's
    vxlan backend sets it."""
    from mxbench.launchers.kubernetes.pods import pod_network_read
    from mxbench_train.localhost import network_namespace

    network = standin.network
    assert network["kind"] == "vxlan", network  # root with iproute2: this machine and CI
    read = ("import json\nfrom mxbench_train.localhost import interfaces, network_namespace\n"
            "print(json.dumps({'netns': network_namespace(), 'interfaces': interfaces()}))")
    api.create_namespaced_pod("default", pod("ifs-host", read, hostNetwork=True))
    api.create_namespaced_pod("default", pod("ifs-pod", read))
    readings = {}
    for name in ("ifs-host", "ifs-pod"):
        assert wait_phase(api, name, "Succeeded", "Failed").status.phase == "Succeeded", log_of(api, name)
        readings[name] = json.loads(log_of(api, name))
        api.delete_namespaced_pod(name, "default")
    assert readings["ifs-host"]["interfaces"] == [{"name": "cni0", "driver": "bridge", "mtu": 1450},
                                                  {"name": "eth0", "driver": "veth", "mtu": 1500},
                                                  {"name": "flannel.1", "driver": "vxlan", "mtu": 1450}]
    assert readings["ifs-pod"]["interfaces"] == [{"name": "eth0", "driver": "veth", "mtu": 1450}]
    assert network["mtu"] == 1450
    ours = network_namespace()
    assert ours not in {r["netns"] for r in readings.values()}
    assert pod_network_read(list(readings.values()), ours) == (
        "host network: 1 network namespace(s), each with cni0 (bridge, MTU 1450), eth0 (veth, MTU 1500), "
        "flannel.1 (vxlan, MTU 1450); pod network: 1 network namespace(s), each with eth0 (veth, MTU 1450)")


def test_pods_on_two_nodes_talk_over_the_vxlan_overlay_and_reach_the_machine(standin, api):
    """A pod on node 2 sends 2 MB to a pod on node 1: their addresses are in the two nodes' subnets,
    and the bytes cross node 2's VXLAN device. Each pod reaches the machine's own namespace too."""
    import socket

    network = standin.network
    assert network["kind"] == "vxlan", network
    machine = netns.Network.from_json(network["underlay"]).root_address
    with socket.create_server((machine, 0)) as listener:
        listen = ("import os, socket\ns = socket.create_server((os.environ['IP'], 7000))\n"
                  "print('listening', flush=True)\nc, _ = s.accept()\nn = 0\n"
                  "while (chunk := c.recv(65536)):\n    n += len(chunk)\nprint('got', n)\n")
        send = ("import socket, sys\nc = socket.create_connection((sys.argv[1], 7000), timeout=20)\n"
                "c.sendall(bytes(2 << 20))\nc.close()\n"
                f"socket.create_connection(({machine!r}, {listener.getsockname()[1]}), timeout=20).sendall(b'hi')\n")
        env = [{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
        api.create_namespaced_pod("default", pod("vx-listen", listen, env=env,
                                                 nodeSelector={"kubernetes.io/hostname": "standin-node-1"}))
        server = wait_for(api, "vx-listen", lambda p: "listening" in (log_of(api, "vx-listen") if p.status.phase ==
                                                                      "Running" else ""), what="listening")
        before = vxlan_sent(network, 1)
        api.create_namespaced_pod("default", pod("vx-send", send, args=[server.status.pod_ip],
                                                 nodeSelector={"kubernetes.io/hostname": "standin-node-2"}))
        listener.settimeout(20)
        conn, (peer, _) = listener.accept()
        assert conn.recv(2) == b"hi"
        conn.close()
    sender = wait_phase(api, "vx-send", "Succeeded", "Failed")
    assert sender.status.phase == "Succeeded", log_of(api, "vx-send")
    assert wait_phase(api, "vx-listen", "Succeeded", "Failed").status.phase == "Succeeded"
    assert log_of(api, "vx-listen").endswith(f"got {2 << 20}\n")
    assert peer == sender.status.pod_ip  # the machine sees the pod's own address: no NAT
    subnets = [ipaddress.ip_network(s) for s in network["pod_subnets"]]
    assert ipaddress.ip_address(server.status.pod_ip) in subnets[0]
    assert ipaddress.ip_address(sender.status.pod_ip) in subnets[1]
    assert vxlan_sent(network, 1) - before >= 2 << 20  # the payload, encapsulated
    for name in ("vx-listen", "vx-send"):
        api.delete_namespaced_pod(name, "default")


def test_a_failed_pod_leaves_neither_its_namespace_nor_a_process(tmp_path):
    for standin in _running_standin(tmp_path / "root"):
        network = standin.network
        assert network["kind"] == "vxlan", network
        api = client.CoreV1Api(config.new_client_from_config(config_file=str(standin.kubeconfig)))
        # a pod that fails, and one whose child leaves its process group and would outlive it
        api.create_namespaced_pod("default", pod("fails", "import sys; sys.exit(3)"))
        escape = "import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', 'import time; " \
                 "time.sleep(60)'], start_new_session=True).pid); sys.exit(1)"
        api.create_namespaced_pod("default", pod("escapes", escape))
        for name in ("fails", "escapes"):
            assert wait_phase(api, name, "Failed").status.container_statuses[0].state.terminated.exit_code in (1, 3)
        deadline = time.monotonic() + 10
        while pod_namespaces(network) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pod_namespaces(network) == []
        escaped = int(log_of(api, "escapes"))
        assert not alive(escaped)  # it left the pod's process group, not its cgroup nor its namespace


def test_a_killed_standins_network_and_pods_are_swept_by_the_next_network_made(tmp_path):
    standin = start(tmp_path / "root")
    try:
        network = standin.network
        assert network["kind"] == "vxlan", network
        api = client.CoreV1Api(config.new_client_from_config(config_file=str(standin.kubeconfig)))
        api.create_namespaced_pod("default", pod("sleeps", "import time; time.sleep(60)"))
        wait_phase(api, "sleeps", "Running")
        assert len(pod_namespaces(network)) == 1
        standin.process.send_signal(signal.SIGKILL)  # no atexit, no clean-up: orphans
        standin.process.wait()
        assert network_left(network)
        netns.sweep_orphans()  # what the next netns.make() does first
        assert network_left(network) == []
        assert not [pid for pid in standin.started_pids() if alive(pid)]  # killed with their namespace
    finally:
        standin.stop()


def test_with_pod_network_none_or_no_ip_pods_share_the_machines_stack_and_it_says_why(tmp_path, monkeypatch):
    code = "import os, socket; socket.socket().bind((os.environ['IP'], 0)); print(os.environ['IP'])"
    env = [{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    for standin in _running_standin(tmp_path / "asked", pod_network="none"):
        assert standin.network["kind"] == "none" and standin.network["why"] == "as asked: --pod-network none"
        api = client.CoreV1Api(config.new_client_from_config(config_file=str(standin.kubeconfig)))
        assert api.read_node("standin-node-1").metadata.annotations["standin.mxbench/pod-network"] == \
            "none: pods on the machine's own stack (as asked: --pod-network none)"
        api.create_namespaced_pod("default", pod("one-stack", code, env=env))
        done = wait_phase(api, "one-stack", "Succeeded", "Failed")
        assert done.status.phase == "Succeeded", log_of(api, "one-stack")
        assert re.fullmatch(r"127\.\d+\.\d+\.\d+", done.status.pod_ip)
        assert log_of(api, "one-stack") == done.status.pod_ip + "\n"
    # no `ip` on PATH (the stand-in and its pods' python run by absolute paths): it falls back, saying why
    monkeypatch.setenv("PATH", str(tmp_path))
    for standin in _running_standin(tmp_path / "no-ip"):
        assert standin.network["why"] == "namespaces unavailable: no `ip` on PATH: install iproute2"
        assert "kube stand-in: pod network: none: pods on the machine's own stack (namespaces unavailable: " \
               "no `ip` on PATH" in (standin.root / "standin.log").read_text()
