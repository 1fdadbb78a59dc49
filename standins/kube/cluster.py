"""The stand-in cluster: its object store, scheduler and kubelet, wired together, and stopping them."""
import random
import signal
import time
from pathlib import Path

from .kubelet import Kubelet
from .objects import ObjectStore
from .scheduler import Scheduler, make_nodes

STOP_GRACE_SECONDS = 3  # grace given to pods when the stand-in itself stops


class Cluster:
    """The stand-in's state (the object store, whose one lock guards everything) and its
    scheduler and kubelet."""

    def __init__(self, root, nodes=2, gpus_per_node=0, validate=True):
        self.root = Path(root)
        self.store = ObjectStore(self.root, validate)
        # this stand-in's own 127.<network>.0.0/16, picked at random: two stand-ins on one machine (a
        # demo beside the tests) would otherwise hand out the same pod IPs, and their schedulers
        # bind the same address and port
        network = random.SystemRandom().randint(16, 254)
        self.nodes = make_nodes(nodes, gpus_per_node, self.root, network)
        self.kubelet = Kubelet(self.store, self.root)
        if validate:
            import kubernetes_validate  # noqa: F401  (fail at start, not at the first pod)
        self.scheduler = Scheduler(self.store, self.kubelet, self.nodes, network)
        self.scheduler.start()

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
