"""The stand-in's pod network: a real cluster's, as flannel's vxlan backend makes it
(``VxlanPodNetwork``), or, where network namespaces cannot be made, every pod on the machine's own
stack (``OneStack``). ``pod_network`` picks one and says why it fell back.

VxlanPodNetwork, what is real: the nodes are network namespaces joined by a shaped link
(``standins.netns``: the "physical" network, a /24 of 198.18.0.0/15, the machine's own namespace
at its .1). Each node has
  * a bridge ``cni0`` holding the gateway (.1) of the node's pod subnet, a /24 of its own;
  * a VXLAN device ``flannel.1`` (VNI 1, UDP 8472, over the node's ``eth0``, so its MTU is 50
    below the link's) and, for every other node, a route to that node's pod subnet via its VTEP,
    the VTEP's MAC in the neighbour table and its node's address in the forwarding table, as
    flanneld writes them (no learning, no flooding);
  * IP forwarding on and a default route to the machine's namespace, which has a route to every
    pod subnet via its node: pods reach the machine (and it them) over the link.
Each pod is a network namespace of its own (``<prefix>-pod<n>``): ``eth0``, a veth whose peer is a
port of its node's ``cni0``, with the overlay's MTU, an address of its node's subnet and a default
route via the gateway. Traffic between pods of two nodes is VXLAN-encapsulated over the nodes'
shaped link. A ``hostNetwork`` pod runs in its node's namespace. Processes enter a namespace with
``nsenter --net`` (not ``ip netns exec``, whose fresh /sys hides the cgroup mount).

Simplified: the subnets are fixed at start (no lease in the API), one machine's CPUs carry every
node's packets, the link has a rate but no delay or loss, and there are no Services or DNS.
"""
import itertools
import json
import os
import random
import shutil
import sys
import threading

from standins import netns

VNI, VXLAN_PORT, VXLAN_DEVICE, BRIDGE = 1, "8472", "flannel.1", "cni0"
DEFAULT_LINK_RATE = "1gbit"
FLANNEL = "flannel.alpha.coreos.com"  # the annotations flanneld puts on a node
POD_NETWORK_ANNOTATION = "standin.mxbench/pod-network"  # the stand-in's own: which pod network it made


def _node_ip(node):
    return node["status"]["addresses"][0]["address"]


class OneStack:
    """No namespaces: every pod is a process on the machine's own stack with a loopback address of
    its own, 127.<k>.x.y (Linux routes all of 127/8 to lo; <k> at random, so two stand-ins on one
    machine do not collide); node i is 127.<k>.0.<i>, a hostNetwork pod gets its node's."""

    kind = "none"

    def __init__(self, nodes, why):
        self.why = why
        self.octet = random.SystemRandom().randint(16, 254)
        self.node_ips = [f"127.{self.octet}.0.{i + 1}" for i in range(nodes)]
        self._count = itertools.count()

    def pod_cidr(self, i):
        return f"127.{self.octet}.0.0/16"

    def describe(self):
        return f"none: pods on the machine's own stack ({self.why})"

    def annotations(self, i):
        return {POD_NETWORK_ANNOTATION: self.describe()}

    def assign(self, pod, node):
        n = next(self._count)
        return f"127.{self.octet}.{1 + n // 250}.{n % 250 + 1}"

    def enter(self, pod, node, host_network):
        return []

    def leave(self, pod):
        pass

    def to_json(self):
        return {"kind": self.kind, "why": self.why, "node_ips": self.node_ips}

    def remove(self):
        pass


class VxlanPodNetwork:
    """Nodes as network namespaces with a VXLAN overlay between them; a namespace per pod."""

    kind = "vxlan"

    def __init__(self, nodes, rate=DEFAULT_LINK_RATE):
        self.nsenter = shutil.which("nsenter")
        self.underlay = netns.make(nodes, rate)  # removed at exit should the stand-in die unstopped
        self.node_ips = self.underlay.addresses
        self.subnets, self.macs = [], [f"0e:6d:78:62:00:{i + 1:02x}" for i in range(nodes)]
        self.mtu = 0  # the VXLAN device's, once made
        self._lock = threading.Lock()
        self._count = itertools.count(1)
        self.held = {}       # pod IP -> the pod holding it
        self.sandboxes = {}  # pod -> (its namespace, its node's namespace, its veth port there)
        try:
            for i in range(nodes):
                subnet = netns.free_subnet(os.getpid() * 7 + 101 + i)
                # routed at once: the next free_subnet sees it taken
                netns.run("ip", "route", "replace", str(subnet), "via", self.node_ips[i], "dev",
                          self.underlay.root_link)
                self.subnets.append(subnet)
            for i in range(nodes):
                self._make_node(i)
        except BaseException:
            self.underlay.remove()
            raise

    def _make_node(self, i):
        ns, subnet = self.underlay.namespace(i), self.subnets[i]
        ip = ["ip", "-n", ns]
        netns.run(*ip, "link", "add", VXLAN_DEVICE, "address", self.macs[i], "type", "vxlan", "id", str(VNI),
                  "local", self.node_ips[i], "dev", "eth0", "dstport", VXLAN_PORT, "nolearning")
        netns.run(*ip, "addr", "add", f"{subnet[0]}/32", "dev", VXLAN_DEVICE)
        netns.run(*ip, "link", "set", VXLAN_DEVICE, "up")
        # the kernel gives the VXLAN device the link's MTU less its 50 bytes of headers; pods get the same
        self.mtu = int(json.loads(netns.run(*ip, "-j", "link", "show", VXLAN_DEVICE).stdout)[0]["mtu"])
        netns.run(*ip, "link", "add", BRIDGE, "type", "bridge")
        netns.run(*ip, "addr", "add", f"{subnet[1]}/{subnet.prefixlen}", "dev", BRIDGE)
        # set, not given at "add": only an MTU the user set stays while the bridge has no port
        netns.run(*ip, "link", "set", BRIDGE, "mtu", str(self.mtu), "up")
        netns.run(*ip, "route", "add", "default", "via", self.underlay.root_address)
        netns.run(self.nsenter, f"--net=/var/run/netns/{ns}", "--", sys.executable, "-c",
                  "open('/proc/sys/net/ipv4/ip_forward', 'w').write('1')")
        for j, other in enumerate(self.subnets):
            if j != i:  # what flanneld writes for every other node's lease
                netns.run(*ip, "neigh", "replace", str(other[0]), "lladdr", self.macs[j], "dev", VXLAN_DEVICE,
                          "nud", "permanent")
                netns.run(*ip, "route", "replace", str(other), "via", str(other[0]), "dev", VXLAN_DEVICE, "onlink")
                netns.run("bridge", "-n", ns, "fdb", "append", self.macs[j], "dev", VXLAN_DEVICE,
                          "dst", self.node_ips[j])

    def pod_cidr(self, i):
        return str(self.subnets[i])

    def describe(self):
        return (f"vxlan overlay between {len(self.node_ips)} nodes: each pod a network namespace with a veth "
                f"(MTU {self.mtu}) into its node's bridge, pod subnets {', '.join(map(str, self.subnets))}; "
                f"the nodes' own network: {self.underlay.describe()}")

    def annotations(self, i):
        return {f"{FLANNEL}/backend-type": "vxlan", f"{FLANNEL}/public-ip": self.node_ips[i],
                f"{FLANNEL}/backend-data": json.dumps({"VNI": VNI, "VtepMAC": self.macs[i]}),
                POD_NETWORK_ANNOTATION: self.describe()}

    def assign(self, pod, node):
        """The lowest free address of the node's pod subnet (the gateway .1 aside)."""
        subnet = self.subnets[self.node_ips.index(_node_ip(node))]
        with self._lock:
            for address in list(subnet.hosts())[1:]:
                if str(address) not in self.held:
                    self.held[str(address)] = pod
                    return str(address)
        raise RuntimeError(f"no address left in {subnet}")

    def enter(self, pod, node, host_network):
        """Make the pod's namespace (unless hostNetwork); the argv prefix that runs a command in it."""
        i = self.node_ips.index(_node_ip(node))
        if host_network:
            return [self.nsenter, f"--net=/var/run/netns/{self.underlay.namespace(i)}", "--"]
        n = next(self._count)
        ns, port, node_ns, subnet = f"{self.underlay.prefix}-pod{n}", f"veth{n}", self.underlay.namespace(i), \
            self.subnets[i]
        with self._lock:  # before making it: leave() removes a half-made one
            self.sandboxes[pod] = (ns, node_ns, port)
        netns.run("ip", "netns", "add", ns)
        netns.run("ip", "-n", node_ns, "link", "add", "name", port, "type", "veth", "peer", "name", "eth0",
                  "netns", ns)
        netns.run("ip", "-n", node_ns, "link", "set", port, "mtu", str(self.mtu), "master", BRIDGE, "up")
        netns.run("ip", "-n", ns, "addr", "add", f"{pod.ip}/{subnet.prefixlen}", "dev", "eth0")
        netns.run("ip", "-n", ns, "link", "set", "eth0", "mtu", str(self.mtu), "up")
        netns.run("ip", "-n", ns, "link", "set", "lo", "up")
        netns.run("ip", "-n", ns, "route", "add", "default", "via", str(subnet[1]))
        return [self.nsenter, f"--net=/var/run/netns/{ns}", "--"]

    def leave(self, pod):
        """Remove the pod's namespace (what still runs in it killed), then free its address."""
        with self._lock:
            sandbox = self.sandboxes.pop(pod, None)
        if sandbox:
            ns, node_ns, port = sandbox
            netns.kill_processes(ns)
            # both ends at once: a deleted namespace's devices go later, and its address could be reused by then
            netns.run("ip", "-n", node_ns, "link", "del", port, check=False)
            netns.run("ip", "netns", "delete", ns, check=False)
        with self._lock:
            for address in [a for a, holder in self.held.items() if holder is pod]:
                del self.held[address]

    def to_json(self):
        return {"kind": self.kind, "underlay": self.underlay.to_json(), "node_ips": self.node_ips,
                "node_namespaces": [self.underlay.namespace(i) for i in range(len(self.node_ips))],
                "pod_subnets": [str(s) for s in self.subnets], "mtu": self.mtu, "vxlan_device": VXLAN_DEVICE}

    def remove(self):
        self.underlay.remove()


def pod_network(nodes, kind="vxlan", rate=DEFAULT_LINK_RATE):
    """``kind`` "vxlan" (falls back to OneStack, saying why, where namespaces cannot be made) or "none"."""
    if kind == "none":
        return OneStack(nodes, "as asked: --pod-network none")
    why = netns.unavailable()
    if why is None:
        try:
            return VxlanPodNetwork(nodes, rate)
        except RuntimeError as error:
            why = str(error)
    return OneStack(nodes, f"namespaces unavailable: {why}")

