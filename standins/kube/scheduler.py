"""The stand-in's nodes (each one this whole machine, with its own network stack where the pod
network has namespaces: ``network``) and its scheduler: binds pending pods to a
node that fits, hands them to the kubelet, and enforces deadlines and grace periods."""
import os
import re
import shutil
import signal
import threading
import time
import uuid
from pathlib import Path

from mxbench_train import localhost

from .api import GIT_VERSION, GPU, parse_quantity, rfc3339
from .objects import node_ip


def memory_kib():
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 8 * 1024 * 1024


def make_nodes(count, gpus_per_node, root, network):
    """The Node objects; ``network`` (``network.pod_network``) gives their addresses, pod subnets and
    the annotations that say which pod network they have."""
    cpus, mem = str(os.cpu_count() or 1), f"{memory_kib()}Ki"
    disk = f"{shutil.disk_usage(root).total // 1024}Ki"
    mid = localhost.machine_id()
    try:
        os_image = re.search(r'PRETTY_NAME="?([^"\n]*)', Path("/etc/os-release").read_text())[1]
    except (OSError, TypeError):
        os_image = "Linux"
    nodes = []
    for i in range(1, count + 1):
        name, ip = f"standin-node-{i}", network.node_ips[i - 1]
        resources = {"cpu": cpus, "memory": mem, "pods": "110", "ephemeral-storage": disk, GPU: str(gpus_per_node)}
        nodes.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": str(uuid.uuid4()), "resourceVersion": "1",
                         "creationTimestamp": rfc3339(), "annotations": network.annotations(i - 1),
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                                    "beta.kubernetes.io/arch": "amd64"}},
            "spec": {"podCIDR": network.pod_cidr(i - 1), "podCIDRs": [network.pod_cidr(i - 1)]},
            "status": {
                "capacity": dict(resources), "allocatable": dict(resources),
                "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "kubelet is posting ready status",
                                "lastHeartbeatTime": rfc3339(), "lastTransitionTime": rfc3339()}],
                "nodeInfo": {"machineID": mid, "systemUUID": mid, "bootID": machine_id_boot(),
                             "kernelVersion": os.uname().release, "osImage": os_image,
                             "containerRuntimeVersion": "standin://1.0", "kubeletVersion": GIT_VERSION,
                             "kubeProxyVersion": GIT_VERSION, "operatingSystem": "linux",
                             "architecture": "amd64"},
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            }})
    return nodes


def machine_id_boot():
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


class Scheduler:
    """The control loop: schedules pending pods, enforces activeDeadlineSeconds and grace periods."""

    def __init__(self, store, kubelet, nodes, network):
        self.store, self.kubelet = store, kubelet
        self.nodes = nodes
        self.network = network  # network.pod_network: hands out the pod IPs
        self.control = threading.Thread(target=self._control_loop, name="standin-control", daemon=True)

    def start(self):
        self.control.start()

    def _control_loop(self):
        with self.store.lock:
            while not self.store.stopping:
                self._schedule()
                self._enforce_deadlines()
                self.store.wake_control.wait(0.5)

    def _schedule(self):
        for pod in list(self.store.pods.values()):
            if pod.node is not None or pod.deleting:
                continue
            node, message = self._pick_node(pod)
            if node is None:
                if message != pod.unschedulable:
                    pod.unschedulable = message
                    self.store.record_event(pod, "FailedScheduling", message, "Warning", "default-scheduler")
                    self.store.touch(pod)
                continue
            pod.node, pod.bound_at, pod.unschedulable = node, time.time(), None
            pod.ip = node_ip(node) if pod.obj["spec"].get("hostNetwork") else self.network.assign(pod, node)
            pod.obj["spec"]["nodeName"] = node["metadata"]["name"]
            self.store.record_event(pod, "Scheduled", f"Successfully assigned {pod.namespace}/{pod.name} to "
                                                      f"{node['metadata']['name']}", component="default-scheduler")
            pod.runner_active = True
            self.store.touch(pod)
            self.kubelet.start(pod)

    def _pick_node(self, pod):
        spec = pod.obj["spec"]
        wanted = pod.wants()
        selector, fits, mismatched, short = spec.get("nodeSelector") or {}, [], 0, {}
        for node in self.nodes:
            labels = node["metadata"]["labels"]
            if any(labels.get(k) != v for k, v in selector.items()) or \
                    spec.get("nodeName") not in (None, node["metadata"]["name"]):
                mismatched += 1
                continue
            used = {}
            for other in self.store.pods.values():
                if other.node is node and other.holds_node_resources():
                    for resource, count in other.wants().items():
                        used[resource] = used.get(resource, 0) + count
            allocatable = node["status"]["allocatable"]
            lacking = [r for r, n in wanted.items()
                       if n > int(parse_quantity(allocatable.get(r, "0"))) - used.get(r, 0)]
            if lacking:
                for resource in lacking:
                    short[resource] = short.get(resource, 0) + 1
                continue
            load = sum(1 for other in self.store.pods.values() if other.node is node and other.holds_node_resources())
            fits.append((load, node))
        if fits:
            return min(fits, key=lambda pair: pair[0])[1], None
        reasons = [f"{n} Insufficient {r}" for r, n in sorted(short.items())]
        if mismatched:
            reasons.append(f"{mismatched} node(s) didn't match Pod's node affinity/selector")
        return None, f"0/{len(self.nodes)} nodes are available: {', '.join(sorted(reasons))}."

    def _enforce_deadlines(self):
        now = time.time()
        for pod in list(self.store.pods.values()):
            if pod.kill_at is not None and time.monotonic() >= pod.kill_at and not pod.finished:
                pod.signal_container(signal.SIGKILL, 0)
                pod.kill_at = None
            deadline = pod.obj["spec"].get("activeDeadlineSeconds")
            if (deadline and pod.bound_at and not pod.finished and not pod.deadline_exceeded
                    and now - pod.bound_at >= deadline):
                pod.deadline_exceeded = True
                self.store.record_event(pod, "DeadlineExceeded", "Pod was active on the node longer than the "
                                                                 "specified deadline", "Warning")
                pod.signal_container(signal.SIGTERM, pod.obj["spec"].get("terminationGracePeriodSeconds", 30))
                self.store.touch(pod)
