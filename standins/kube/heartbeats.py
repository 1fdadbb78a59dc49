"""The nodes' heartbeats: each node's kubelet posts its status over the node's own link, and the
node lifecycle controller marks a node it has not heard from within ``grace_s`` ``Ready: Unknown``
(``NodeStatusUnknown``, "Kubelet stopped posting node status.") and taints it unreachable, as a real
control plane does after its node-monitor-grace-period (40 s by default); a heartbeat that comes
again makes it Ready and lifts the taint.

The stand-in's kubelet is part of this process, in the machine's own namespace, but its port is in
the node's: a socket listening on the node's address at the kubelet port (``netns.listen_in``) that
sends back whatever it reads (``KubeletPort``). A heartbeat is a node status update's worth of bytes
(STATUS_BYTES) sent there and back within PROBE_TIMEOUT_S, so it crosses the node's link both ways
as a real kubelet's status update does: a link taken down carries nothing, and one throttled to a
trickle cannot carry an update in time. Without a pod network of namespaces (``OneStack``) there is
no link, and every node stays Ready.
"""
import socket
import threading
import time

from .api import rfc3339
from .objects import node_ip

KUBELET_PORT = 10250
HEARTBEAT_S = 2.0
PROBE_TIMEOUT_S = 2.0
# a node status update with its image list, about; more than a shaped link's burst (netns: 64 KiB),
# so a link throttled to a trickle cannot carry it in time from its bucket alone
STATUS_BYTES = 72 << 10
DEFAULT_GRACE_S = 40.0  # kube-controller-manager's --node-monitor-grace-period
UNREACHABLE = "node.kubernetes.io/unreachable"


class KubeletPort:
    """A node's kubelet port, listening in the node's namespace: every connection gets back what it
    sends, until it closes (a thread each)."""

    def __init__(self, namespace: str, address: str):
        from standins import netns

        self.listener = netns.listen_in(namespace, address, KUBELET_PORT)
        threading.Thread(target=self._accept, daemon=True, name=f"kubelet-{address}").start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn):
        with conn:
            conn.settimeout(60)
            try:
                while data := conn.recv(65536):
                    conn.sendall(data)
            except OSError:
                pass

    def close(self):
        self.listener.close()


def reachable(address: str) -> bool:
    """Whether a status update's worth of bytes goes to the node's kubelet port and back in time."""
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    try:
        with socket.create_connection((address, KUBELET_PORT), timeout=PROBE_TIMEOUT_S) as conn:
            conn.sendall(b"s" * STATUS_BYTES)
            got = 0
            while got < STATUS_BYTES:
                conn.settimeout(max(0.01, deadline - time.monotonic()))
                data = conn.recv(65536)
                if not data:
                    return False
                got += len(data)
    except OSError:
        return False
    return time.monotonic() <= deadline


def post_status(node: dict, ready: bool) -> None:
    """What the kubelet (``ready``) or the lifecycle controller (not) writes. Values are replaced,
    never keys added: the API server serialises the node without the store's lock."""
    (old,) = node["status"]["conditions"]
    was_ready, now = old["status"] == "True", rfc3339()
    if ready:
        node["status"]["conditions"] = [{
            "type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now, "lastTransitionTime": old["lastTransitionTime"] if was_ready else now}]
        if not was_ready:
            node["spec"] = {**node["spec"], "taints": []}
    elif was_ready:
        node["status"]["conditions"] = [{**old, "status": "Unknown", "reason": "NodeStatusUnknown",
                                         "message": "Kubelet stopped posting node status.", "lastTransitionTime": now}]
        node["spec"] = {**node["spec"], "taints": [{"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": now}]}


class NodeHeartbeats:
    """One heartbeat thread per node, every HEARTBEAT_S, until ``stop()``."""

    def __init__(self, nodes, network, grace_s=DEFAULT_GRACE_S):
        self.grace_s, self.crosses_link = grace_s, network.kind == "vxlan"
        self.ports = [KubeletPort(network.underlay.namespace(i), node_ip(node)) for i, node in enumerate(nodes)
                      ] if self.crosses_link else []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._beat, args=(node,), daemon=True,
                                          name=f"heartbeat-{node['metadata']['name']}") for node in nodes]

    def start(self):
        for thread in self._threads:
            thread.start()

    def _beat(self, node):
        heard = time.monotonic()
        while not self._stop.wait(HEARTBEAT_S):
            if not self.crosses_link or reachable(node_ip(node)):
                heard = time.monotonic()
                post_status(node, ready=True)
            elif time.monotonic() - heard > self.grace_s:
                post_status(node, ready=False)

    def stop(self):
        self._stop.set()
        for thread in self._threads:
            thread.join(PROBE_TIMEOUT_S + 1)
        for port in self.ports:
            port.close()
