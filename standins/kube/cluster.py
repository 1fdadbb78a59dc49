"""The stand-in cluster: its object store, scheduler and kubelet, wired together, and stopping them."""
import json
import signal
import sys
import time
from pathlib import Path

from .heartbeats import DEFAULT_GRACE_S, NodeHeartbeats
from .kubelet import Kubelet
from .network import DEFAULT_LINK_RATE, pod_network
from .objects import ObjectStore
from .scheduler import Scheduler, make_nodes

STOP_GRACE_SECONDS = 3  # grace given to pods when the stand-in itself stops


class Cluster:
    """The stand-in's state (the object store, whose one lock guards everything), its pod network
    (written to ``<root>/network.json``), scheduler, kubelet and the nodes' heartbeats (a node not
    heard from over its link for ``node_grace_s`` is Ready: Unknown, ``heartbeats``)."""

    def __init__(self, root, nodes=2, gpus_per_node=0, validate=True, pod_network_kind="vxlan",
                 link_rate=DEFAULT_LINK_RATE, node_grace_s=DEFAULT_GRACE_S):
        self.root = Path(root)
        self.store = ObjectStore(self.root, validate)
        if validate:
            import kubernetes_validate  # noqa: F401  (fail at start, not at the first pod)
        self.network = pod_network(nodes, pod_network_kind, link_rate)
        (self.root / "network.json").write_text(json.dumps(self.network.to_json()) + "\n")
        print(f"kube stand-in: pod network: {self.network.describe()}", file=sys.stderr, flush=True)
        self.nodes = make_nodes(nodes, gpus_per_node, self.root, self.network)
        self.kubelet = Kubelet(self.store, self.root, self.network)
        self.scheduler = Scheduler(self.store, self.kubelet, self.nodes, self.network)
        self.scheduler.start()
        self.heartbeats = NodeHeartbeats(self.nodes, self.network, node_grace_s)
        self.heartbeats.start()

    def shutdown(self, grace=STOP_GRACE_SECONDS):
        """Stop every container (SIGTERM, SIGKILL after ``grace``) and wait for all of them."""
        store = self.store
        with store.lock:
            store.stopping = True
            store.wake_control.notify_all()
            for pod in store.pods.values():
                pod.signal_container(signal.SIGTERM, grace)
            runners = list(self.kubelet.runners)
        deadline = time.monotonic() + grace
        for runner in runners:
            runner.join(max(0.0, deadline - time.monotonic()))
        with store.lock:
            for pod in store.pods.values():
                pod.signal_container(signal.SIGKILL, 0)
        for runner in runners:
            runner.join(10)
        self.heartbeats.stop()
        self.network.remove()
