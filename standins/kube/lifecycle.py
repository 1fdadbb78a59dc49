"""Starting and stopping the stand-in: ``serve`` in the foreground, ``spawn``/``start`` as a child
process (``StandIn``), and the CLI's ``stop``."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from .api import GIT_VERSION, TOKEN
from .cluster import Cluster
from .heartbeats import DEFAULT_GRACE_S
from .network import DEFAULT_LINK_RATE
from .server import Handler, Server, discovery


def kubeconfig_text(port):
    return (f"apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n"
            f"    server: http://127.0.0.1:{port}\ncontexts:\n- name: standin\n  context:\n"
            f"    cluster: standin\n    user: standin\n    namespace: default\n"
            f"current-context: standin\nusers:\n- name: standin\n  user:\n    token: {TOKEN}\n")


def serve(root, nodes=2, gpus_per_node=0, port=0, validate=True, verbose=False, pod_network="vxlan",
          link_rate=DEFAULT_LINK_RATE, node_grace_s=DEFAULT_GRACE_S):
    """Run in the foreground until SIGTERM/SIGINT; then stop every pod, remove the pod network and exit."""
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(root, nodes, gpus_per_node, validate, pod_network, link_rate, node_grace_s)
    server = Server(("127.0.0.1", port), Handler)
    server.cluster, server.verbose = cluster, verbose
    port = server.server_address[1]
    server.discovery = discovery(port)
    (root / "kubeconfig").write_text(kubeconfig_text(port))
    (root / "standin.pid").write_text(f"{os.getpid()}\n")
    (root / "port.tmp").write_text(f"{port}\n")
    os.replace(root / "port.tmp", root / "port")  # written last: its presence means "ready"
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    print(f"kube stand-in serving http://127.0.0.1:{port} (root {root})", file=sys.stderr, flush=True)
    while not stop.wait(1.0):
        pass
    cluster.shutdown()
    server.shutdown()
    server.server_close()
    (root / "port").unlink(missing_ok=True)
    print("kube stand-in stopped", file=sys.stderr, flush=True)


def answers(url, timeout=2.0):
    try:
        with urllib.request.urlopen(f"{url}/version", timeout=timeout) as response:
            return json.load(response).get("gitVersion") == GIT_VERSION
    except (OSError, ValueError):
        return False


class StandIn:
    """A running stand-in (a child process of this one)."""

    def __init__(self, root, process, port):
        self.root, self.process, self.port = Path(root), process, port
        self.url = f"http://127.0.0.1:{port}"
        self.kubeconfig = self.root / "kubeconfig"

    @property
    def network(self):
        """The pod network it made (``network.json``: kind "vxlan" or "none", and what each has)."""
        return json.loads((self.root / "network.json").read_text())

    @property
    def pid(self):
        return self.process.pid

    def started_pids(self):
        """Pids of every container process this stand-in started."""
        try:
            return [int(line.split()[-1]) for line in (self.root / "pids.log").read_text().splitlines()]
        except FileNotFoundError:
            return []

    def stop(self, timeout=30):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def spawn(root, nodes=2, gpus_per_node=0, validate=True, port=0, timeout=30, pod_network="vxlan",
          link_rate=DEFAULT_LINK_RATE, node_grace_s=DEFAULT_GRACE_S):
    """Start ``serve`` detached (own session, log in ROOT/standin.log); the Popen and its port."""
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    (root / "port").unlink(missing_ok=True)
    argv = [sys.executable, "-m", "standins.kube", "serve", "--root", str(root), "--nodes", str(nodes),
            "--gpus-per-node", str(gpus_per_node), "--port", str(port), "--pod-network", pod_network,
            "--link-rate", link_rate, "--node-grace", f"{node_grace_s:g}"] + ([] if validate else ["--no-validate"])
    with open(root / "standin.log", "ab") as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = (root / "standin.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"kube stand-in exited with {process.returncode}:\n{tail}")
        port_file = root / "port"
        if port_file.exists():
            bound = int(port_file.read_text())
            if answers(f"http://127.0.0.1:{bound}"):
                return process, bound
        time.sleep(0.1)
    process.kill()
    process.wait()
    raise RuntimeError(f"kube stand-in did not answer within {timeout}s; see {root / 'standin.log'}")


def start(root, nodes=2, gpus_per_node=0, validate=True, port=0, pod_network="vxlan", link_rate=DEFAULT_LINK_RATE,
          node_grace_s=DEFAULT_GRACE_S):
    """Start a stand-in serving from ROOT; a StandIn (use as a context manager, or call .stop())."""
    process, bound = spawn(root, nodes, gpus_per_node, validate, port, pod_network=pod_network, link_rate=link_rate,
                           node_grace_s=node_grace_s)
    return StandIn(root, process, bound)


def _pid_of(root):
    try:
        pid = int((Path(root) / "standin.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if b"standins.kube" in cmdline and b"serve" in cmdline else None


def _stop_cli(root, timeout=30):
    pid = _pid_of(root)
    if pid is None:
        print(f"no kube stand-in running for {root}")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _pid_of(root) == pid and time.monotonic() < deadline:
        time.sleep(0.1)
    if _pid_of(root) == pid:
        os.kill(pid, signal.SIGKILL)
        print(f"kube stand-in {pid} did not stop within {timeout}s: killed", file=sys.stderr)
        return 1
    print(f"kube stand-in {pid} stopped")
    return 0
