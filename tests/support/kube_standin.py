"""A loopback Kubernetes API server stand-in that is also its own scheduler and kubelet.

It lets the Kubernetes launcher, Airflow's KubernetesPodOperator and the ``kubernetes`` Python
client run unmodified on a machine without a cluster: it speaks the real Kubernetes HTTP API
(JSON, plain HTTP on 127.0.0.1, any bearer token accepted) and runs every pod's container as an
ordinary local process.

What is real
  * The wire protocol of the endpoints served: ``/version``, ``/api``, ``/api/v1``, ``/apis``;
    pods (create, get, list, patch, delete, delete collection, ``/log``), events, nodes. Errors are
    ``Status`` objects with the real reasons and codes (404 NotFound, 409 AlreadyExists,
    422 Invalid, 400 BadRequest, 405 MethodNotAllowed).
  * Label selectors (``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``) and
    field selectors (pods: metadata.name/namespace, status.phase, spec.nodeName; events:
    involvedObject.*, reason, type) with ``=``, ``==`` and ``!=``.
  * Pod manifests are validated with ``kubernetes_validate`` (strict schema of Kubernetes 1.34)
    plus the server-side checks a schema cannot express (quantities, extended resources, DNS-1123
    names, label syntax). Every received manifest is appended to ``<root>/manifests.jsonl``.
  * Pod life cycle: Pending (Unschedulable, or ContainerCreating) -> Running -> Succeeded/Failed
    with the container states, exit codes (128+signal for a signal), conditions, events
    (Scheduled, FailedScheduling, Pulled, Created, Started, Killing, DeadlineExceeded) and a
    resourceVersion that grows on every change. ``activeDeadlineSeconds`` and graceful deletion
    (SIGTERM to the container's process group, SIGKILL after the grace period) behave like the
    kubelet. The log is the process's real stdout+stderr, line by line (a line longer than 16 KiB
    in pieces, as the CRI stores it; each piece counts as a line for ``tailLines`` and gets its
    own timestamp), with the time each line arrived (``timestamps=true`` prints
    it as the kubelet does, 9 fixed decimals).
  * Scheduling honours ``spec.nodeSelector``, ``spec.nodeName`` and ``nvidia.com/gpu`` (any
    extended resource asked for as a limit is counted against the node's allocatable, which has
    only ``nvidia.com/gpu``). Among the nodes that fit, the one with fewest pods wins (spreading).
  * Each stand-in picks its own network 127.<k>.0.0/16 at random (so that two on one machine do
    not collide): node i is 127.<k>.0.<i>, and each pod gets its own loopback address
    127.<k>.<1 + n // 250>.<n % 250 + 1>, which it can bind (Linux routes all of 127/8 to lo);
    ``hostNetwork: true`` pods get their node's address. ``$(VAR)`` expansion and
    ``valueFrom.fieldRef`` / ``resourceFieldRef`` follow Kubernetes.

What is simplified (and how it shows)
  * Every node is this whole machine: capacity cpu = os.cpu_count(), memory = MemTotal, and
    ``status.nodeInfo.machineID`` is this machine's id on every node, so a client can tell.
  * No images: ``image`` is recorded, never pulled. A container needs ``command`` (``args`` alone
    is refused with 422: the stand-in has no image entrypoint). The process runs with the
    stand-in's own environment (PATH, venvs ...) plus the container's ``env``, HOSTNAME = the pod
    name, stdin /dev/null, its own session/process group, and as working directory the
    translated ``workingDir`` or else a fresh per-pod folder ``<root>/pods/<ns>_<name>_<uid8>/workdir``.
  * An ``image`` that is an absolute path to an existing local folder (a venv, in tests) stands for
    that image's programs, nothing more: ``<folder>/bin`` goes first on the process's PATH (before the
    container's ``env``, which may still set PATH), so a command ``python ...`` runs that folder's
    python. The filesystem, libraries and everything else stay this machine's.
  * One container per pod; init, ephemeral and sidecar containers are refused with 422, so are
    ``restartPolicy`` other than Never (the default, Always, included: the stand-in does not
    restart containers), ``envFrom`` and env ``valueFrom`` other than fieldRef/resourceFieldRef.
  * No mounts. Volumes: ``emptyDir`` is a fresh folder ``<pod folder>/volumes/<volume name>``
    (deleted with the pod, as the kubelet does); ``emptyDir`` with ``medium: Memory`` mounted at
    ``/dev/shm`` is simply the host's /dev/shm; ``hostPath`` is that path. Any other volume type
    (PVC, configMap, secret, ...) is refused with 422. Since the process cannot see mounts, the
    stand-in TRANSLATES PATHS: each argv element (command + args), env value and ``workingDir``
    that equals a volumeMount's ``mountPath`` or starts with ``mountPath + "/"`` is rewritten to
    the folder standing for that volume (longest mountPath first; ``subPath`` appended). Only whole
    values are translated: ``--out=/work/out`` is left alone, ``/work/out/x`` becomes
    ``<folder>/x``; paths the program builds itself are not seen. ``/dev/shm`` is never rewritten.
  * ``requiredDuringScheduling`` pod (anti-)affinity, node affinity, taints and tolerations are
    accepted in manifests and ignored by the scheduler. No preemption, no QoS enforcement
    (limits are not enforced on the process), no ``watch``, no exec/attach/port-forward.
  * Processes that leave their process group (setsid/daemonise) escape the container clean-up.
  * Events and logs live in memory for the life of the stand-in (logs: while the pod exists).

For tests, each started container's pid is exposed in the annotation ``standin.mxbench/pid``
and appended to ``<root>/pids.log``.

Use: ``python tests/support/kube_standin.py start --root DIR [--nodes N] [--gpus-per-node K]
[--port P] [--no-validate]`` (detaches; writes DIR/kubeconfig, DIR/port, DIR/standin.pid and
prints the kubeconfig path), ``serve`` (same, foreground), ``stop --root DIR``, ``check --root DIR``.
From Python: ``with start(root) as standin: ... standin.kubeconfig ...``. Standard library only,
except ``kubernetes_validate`` when validation is on.
"""
import argparse
import copy
import json
import math
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

GIT_VERSION = "v1.34.0-mxbench-standin"
SCHEMA_VERSION = "1.34"  # the kubernetes_validate schema set used (newest <= the version served)
PID_ANNOTATION = "standin.mxbench/pid"
TOKEN = "standin-token"
LOG_PIECE = 16 << 10  # the CRI's longest log entry: longer lines are stored in pieces
STOP_GRACE_SECONDS = 3  # grace given to pods when the stand-in itself stops
GPU = "nvidia.com/gpu"


# ----------------------------------------------------------------------------------- helpers

class ApiError(Exception):
    """An error answered as a Kubernetes ``Status`` object."""

    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self):
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}
        if self.details is not None:
            body["details"] = self.details
        return body


def not_found(kind, name):
    return ApiError(404, "NotFound", f'{kind} "{name}" not found', {"name": name, "kind": kind})


def invalid(name, problems):
    """422 Invalid naming each (field, message) as the API server does."""
    text = ", ".join(f"{field}: {message}" for field, message in problems)
    message = f'Pod "{name}" is invalid: ' + (f"[{text}]" if len(problems) > 1 else text)
    causes = [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in problems]
    return ApiError(422, "Invalid", message, {"name": name, "kind": "Pod", "causes": causes})


def rfc3339(t=None):
    return datetime.fromtimestamp(time.time() if t is None else t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_nano(ns):
    """The kubelet's log timestamp: RFC3339 with a fixed 9-digit fraction."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{fraction:09d}Z"


def parse_rfc3339_ns(text):
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)", text)
    if not match:
        raise ApiError(400, "BadRequest", f'invalid sinceTime "{text}": want RFC3339')
    zone = "+00:00" if match[3] == "Z" else match[3]
    seconds = datetime.fromisoformat(match[1] + zone).timestamp()
    return int(seconds) * 1_000_000_000 + int((match[2] or "0").ljust(9, "0"))


QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")
SUFFIX = {None: 1, "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": 10**3, "M": 10**6,
          "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
          "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def parse_quantity(value):
    """A Kubernetes resource quantity as a Decimal; ValueError if it is not one."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    match = QUANTITY.match(str(value))
    if not match:
        raise ValueError(value)
    suffix = match[2]
    if suffix and suffix[0] in "eE":
        return Decimal(match[1] + suffix)
    try:
        return Decimal(match[1]) * SUFFIX[suffix]
    except InvalidOperation:
        raise ValueError(value) from None


DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def label_key_problem(key):
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if len(name) > 63 or not LABEL_NAME.match(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
                "and end with an alphanumeric character (at most 63 characters)")
    return None


def field_path(path):
    """deque(['spec', 'containers', 0, 'image']) -> 'spec.containers[0].image'."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<root>"


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch (also used for strategic merge patches: maps merge, lists replace)."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):  # strategic-merge directives such as $patch / $retainKeys
            continue
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(document, operations):
    """RFC 6902 add / replace / remove (enough for labels and annotations)."""
    document = copy.deepcopy(document)
    for op in operations:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = document
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.setdefault(part, {})
        last = parts[-1]
        if op["op"] in ("add", "replace"):
            parent[last] = op["value"]
        elif op["op"] == "remove":
            parent.pop(last, None)
        else:
            raise ApiError(422, "Invalid", f"the stand-in does not serve json-patch op {op['op']!r}")
    return document


# --------------------------------------------------------------------------------- selectors

def parse_label_selector(text):
    """A predicate over a labels dict, for Kubernetes label-selector syntax."""
    requirements = []
    for part in re.split(r",(?![^()]*\))", text or ""):
        part = part.strip()
        if not part:
            continue
        if m := re.fullmatch(r"(!?)\s*([A-Za-z0-9_./-]+)", part):
            negate, key = m[1] == "!", m[2]
            requirements.append(lambda labels, k=key, n=negate: (k in labels) != n)
        elif m := re.fullmatch(r"([A-Za-z0-9_./-]+)\s+(in|notin)\s*\(([^)]*)\)", part):
            key, values = m[1], {v.strip() for v in m[3].split(",") if v.strip()}
            if m[2] == "in":
                requirements.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
            else:
                requirements.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
        elif m := re.fullmatch(r"([A-Za-z0-9_./-]+)\s*(==|=|!=)\s*([A-Za-z0-9_.-]*)", part):
            key, op, value = m[1], m[2], m[3]
            if op == "!=":
                requirements.append(lambda labels, k=key, v=value: labels.get(k) != v)
            else:
                requirements.append(lambda labels, k=key, v=value: labels.get(k) == v)
        else:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {part!r}")
    return lambda labels: all(req(labels or {}) for req in requirements)


POD_FIELDS = {"metadata.name", "metadata.namespace", "status.phase", "spec.nodeName",
              "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName", "status.podIP"}
EVENT_FIELDS = {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type",
                "metadata.name", "metadata.namespace"}


def parse_field_selector(text, allowed):
    requirements = []
    for part in (text or "").split(","):
        if not part.strip():
            continue
        m = re.fullmatch(r"\s*([A-Za-z.]+)\s*(==|=|!=)\s*(.*?)\s*", part)
        if not m:
            raise ApiError(400, "BadRequest", f"invalid selector: {part!r}")
        if m[1] not in allowed:
            raise ApiError(400, "BadRequest", f'field label not supported: {m[1]}')
        requirements.append((m[1].split("."), m[2] == "!=", m[3]))

    def matches(obj):
        for path, negate, value in requirements:
            actual = obj
            for key in path:
                actual = actual.get(key) if isinstance(actual, dict) else None
            if (str(actual if actual is not None else "") == value) == negate:
                return False
        return True
    return matches


# ----------------------------------------------------------------------------------- expansion

def expand(text, variables):
    """Kubernetes ``$(VAR)`` expansion: ``$$`` escapes, unknown references stay as written."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            if text[i + 1] == "$":
                out.append("$")
                i += 2
                continue
            end = text.find(")", i + 2) if text[i + 1] == "(" else -1
            if end != -1:
                name = text[i + 2:end]
                out.append(variables.get(name, text[i:end + 1]))
                i = end + 1
                continue
        out.append(text[i])
        i += 1
    return "".join(out)


def translate_path(value, mounts):
    """Rewrite a value naming a path inside a volumeMount to the host folder standing for it."""
    for mount_path, host_path in mounts:  # longest mountPath first
        if value == mount_path:
            return host_path
        if value.startswith(mount_path.rstrip("/") + "/"):
            return host_path.rstrip("/") + "/" + value[len(mount_path.rstrip("/")) + 1:]
    return value


# ------------------------------------------------------------------------------------- machine

def machine_id():
    for path in ("/etc/machine-id", "/proc/sys/kernel/random/boot_id"):
        try:
            text = Path(path).read_text().strip()
            if text:
                return text
        except OSError:
            pass
    return "unknown"


def memory_kib():
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 8 * 1024 * 1024


def make_nodes(count, gpus_per_node, root, network):
    cpus, mem = str(os.cpu_count() or 1), f"{memory_kib()}Ki"
    disk = f"{shutil.disk_usage(root).total // 1024}Ki"
    mid = machine_id()
    try:
        os_image = re.search(r'PRETTY_NAME="?([^"\n]*)', Path("/etc/os-release").read_text())[1]
    except (OSError, TypeError):
        os_image = "Linux"
    nodes = []
    for i in range(1, count + 1):
        name, ip = f"standin-node-{i}", f"127.{network}.0.{i}"
        resources = {"cpu": cpus, "memory": mem, "pods": "110", "ephemeral-storage": disk, GPU: str(gpus_per_node)}
        nodes.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": str(uuid.uuid4()), "resourceVersion": "1",
                         "creationTimestamp": rfc3339(),
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                                    "beta.kubernetes.io/arch": "amd64"}},
            "spec": {"podCIDR": f"127.{network}.0.0/16"},
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


def node_ip(node):
    return node["status"]["addresses"][0]["address"]


def extended_limits(container):
    """{resource: whole number} for the extended resources (e.g. nvidia.com/gpu) a container limits."""
    limits = (container.get("resources") or {}).get("limits") or {}
    return {k: int(parse_quantity(v)) for k, v in limits.items() if "/" in k and not k.startswith("kubernetes.io/")}


# ------------------------------------------------------------------------------------ the pods

class Pod:
    """One pod: its API object plus what the kubelet knows about its container."""

    def __init__(self, obj, folder):
        self.obj = obj
        self.folder = folder
        self.node = None          # the node dict once bound
        self.ip = None
        self.bound_at = None      # time.time() when bound (status.startTime)
        self.unschedulable = None  # last FailedScheduling message
        self.runner_active = False  # a runner thread is starting or waiting for the container
        self.proc = None
        self.started_at = None
        self.finished_at = None
        self.exit_code = None
        self.term_reason = None
        self.term_message = None
        self.finished = False     # the container ended (or could not start) and its log is complete
        self.deleting = False
        self.deadline_exceeded = False
        self.kill_at = None       # time.monotonic() after which the process group gets SIGKILL
        self.removed = False
        self.log = []             # [(time_ns, bytes line)]
        self.condition_times = {}

    @property
    def name(self):
        return self.obj["metadata"]["name"]

    @property
    def namespace(self):
        return self.obj["metadata"]["namespace"]

    @property
    def container(self):
        return self.obj["spec"]["containers"][0]

    def wants(self):
        wanted = {}
        for container in self.obj["spec"]["containers"]:
            for resource, count in extended_limits(container).items():
                wanted[resource] = wanted.get(resource, 0) + count
        return wanted

    def holds_node_resources(self):
        return self.node is not None and not self.finished


class Cluster:
    """The stand-in's state and its scheduler/kubelet; one lock guards everything."""

    def __init__(self, root, nodes=2, gpus_per_node=0, validate=True):
        self.root = Path(root)
        self.validate = validate
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)      # any object or log changed
        self.wake_control = threading.Condition(self.lock)  # the scheduler loop has work
        self.resource_version = 1
        self.pods = {}             # (namespace, name) -> Pod, in creation order
        self.events = []
        # this stand-in's own 127.<network>.0.0/16, picked at random: two stand-ins on one machine (a
        # demo beside the tests) would otherwise hand out the same pod IPs, and their schedulers
        # bind the same address and port
        self.network = random.SystemRandom().randint(16, 254)
        self.nodes = make_nodes(nodes, gpus_per_node, self.root, self.network)
        self.pod_counter = 0
        self.stopping = False
        self.runners = []
        if validate:
            import kubernetes_validate  # noqa: F401  (fail at start, not at the first pod)
        self.control = threading.Thread(target=self._control_loop, name="standin-control", daemon=True)
        self.control.start()

    # ---- bookkeeping (callers hold the lock)

    def _bump(self):
        self.resource_version += 1
        self.changed.notify_all()
        return str(self.resource_version)

    def _touch(self, pod):
        self._refresh_status(pod)
        pod.obj["metadata"]["resourceVersion"] = self._bump()

    def _event(self, pod, reason, message, kind="Normal", component="kubelet", container=False):
        for event in reversed(self.events):  # repeats are counted, as the event recorder does
            if (event["involvedObject"]["uid"] == pod.obj["metadata"]["uid"] and event["reason"] == reason
                    and event["message"] == message):
                event["count"] += 1
                event["lastTimestamp"] = rfc3339()
                event["metadata"]["resourceVersion"] = self._bump()
                return
        involved = {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "namespace": pod.namespace,
                    "uid": pod.obj["metadata"]["uid"], "resourceVersion": pod.obj["metadata"]["resourceVersion"]}
        if container:
            involved["fieldPath"] = f"spec.containers{{{pod.container['name']}}}"
        host = pod.node["metadata"]["name"] if pod.node and component == "kubelet" else None
        self.events.append({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{pod.name}.{secrets.token_hex(8)}", "namespace": pod.namespace,
                         "uid": str(uuid.uuid4()), "resourceVersion": self._bump(),
                         "creationTimestamp": rfc3339()},
            "involvedObject": involved, "reason": reason, "message": message, "type": kind,
            "source": {"component": component, **({"host": host} if host else {})},
            "firstTimestamp": rfc3339(), "lastTimestamp": rfc3339(), "count": 1,
            "reportingComponent": component, "reportingInstance": host or "",
        })

    def _condition(self, pod, kind, status, reason=None, message=None):
        previous = pod.condition_times.get(kind)
        if previous is None or previous[0] != status:
            pod.condition_times[kind] = previous = (status, rfc3339())
        condition = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": previous[1]}
        if reason:
            condition["reason"] = reason
        if message:
            condition["message"] = message
        return condition

    def _refresh_status(self, pod):
        """Rebuild status from what the scheduler and kubelet know, as the kubelet reports it."""
        container = pod.container
        running = pod.started_at is not None and not pod.finished
        failed = pod.deadline_exceeded or (pod.finished and pod.exit_code != 0)
        phase = "Failed" if failed else "Succeeded" if pod.finished else "Running" if running else "Pending"
        status = {"phase": phase, "qosClass": qos_class(pod.obj["spec"]["containers"])}
        conditions = []
        if pod.node is None:
            if pod.unschedulable:
                conditions.append(self._condition(pod, "PodScheduled", "False", "Unschedulable", pod.unschedulable))
        else:
            not_ready = f"containers with unready status: [{container['name']}]"
            ready_reason = ("PodCompleted" if phase == "Succeeded" else None) if pod.finished else None
            conditions += [
                self._condition(pod, "Initialized", "True"),
                self._condition(pod, "Ready", "True" if running else "False",
                                None if running else ready_reason or "ContainersNotReady",
                                None if running or ready_reason else not_ready),
                self._condition(pod, "ContainersReady", "True" if running else "False",
                                None if running else ready_reason or "ContainersNotReady",
                                None if running or ready_reason else not_ready),
                self._condition(pod, "PodScheduled", "True"),
            ]
            host = node_ip(pod.node)
            status.update(hostIP=host, hostIPs=[{"ip": host}], podIP=pod.ip, podIPs=[{"ip": pod.ip}],
                          startTime=rfc3339(pod.bound_at))
            container_id = f"standin://{pod.obj['metadata']['uid']}" if pod.started_at else None
            if pod.finished:
                state = {"terminated": {"exitCode": pod.exit_code, "reason": pod.term_reason,
                                        "startedAt": rfc3339(pod.started_at or pod.finished_at),
                                        "finishedAt": rfc3339(pod.finished_at), "containerID": container_id}}
                if pod.term_message:
                    state["terminated"]["message"] = pod.term_message
            elif running:
                state = {"running": {"startedAt": rfc3339(pod.started_at)}}
            else:
                state = {"waiting": {"reason": "ContainerCreating"}}
            status["containerStatuses"] = [{
                "name": container["name"], "image": container.get("image", ""),
                "imageID": f"standin://image/{container.get('image', '')}" if pod.started_at else "",
                "containerID": container_id, "ready": running, "started": running,
                "restartCount": 0, "state": state, "lastState": {}}]
        status["conditions"] = conditions
        if pod.deadline_exceeded:
            status.update(reason="DeadlineExceeded",
                          message="Pod was active on the node longer than the specified deadline")
        pod.obj["status"] = status

    def _get(self, namespace, name):
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise not_found("pods", name)
        return pod

    # ---- API operations

    def create_pod(self, namespace, body, dry_run=False):
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request is not a JSON object")
        with (self.root / "manifests.jsonl").open("a") as f:  # every manifest received, valid or not
            f.write(json.dumps(body) + "\n")
        obj = copy.deepcopy(body)
        obj.setdefault("apiVersion", "v1")
        obj.setdefault("kind", "Pod")
        obj.setdefault("spec", {})
        meta = obj.setdefault("metadata", {})
        if meta.get("namespace", namespace) != namespace:
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not match "
                                              "the namespace sent on the request")
        meta["namespace"] = namespace
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
        if not meta.get("name"):
            raise invalid("", [("metadata.name", "Required value: name or generateName is required")])
        self._validate(obj)
        check_supported(obj)
        apply_defaults(obj)
        with self.lock:
            if (namespace, meta["name"]) in self.pods:
                raise ApiError(409, "AlreadyExists", f'pods "{meta["name"]}" already exists',
                               {"name": meta["name"], "kind": "pods"})
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=rfc3339())
            for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
                meta.pop(key, None)
            folder = self.root / "pods" / f"{namespace}_{meta['name']}_{meta['uid'][:8]}"
            pod = Pod(obj, folder)
            if dry_run:
                self._refresh_status(pod)
                return copy.deepcopy(obj)
            self.pods[(namespace, meta["name"])] = pod
            self._touch(pod)
            self.wake_control.notify_all()
            return copy.deepcopy(obj)

    def get_pod(self, namespace, name):
        with self.lock:
            return copy.deepcopy(self._get(namespace, name).obj)

    def _select(self, namespace, label_selector, field_selector):
        labels_match = parse_label_selector(label_selector)
        fields_match = parse_field_selector(field_selector, POD_FIELDS)
        return [pod for pod in self.pods.values()
                if (namespace is None or pod.namespace == namespace)
                and labels_match(pod.obj["metadata"].get("labels")) and fields_match(pod.obj)]

    def list_pods(self, namespace, label_selector=None, field_selector=None):
        with self.lock:
            items = [copy.deepcopy(p.obj) for p in self._select(namespace, label_selector, field_selector)]
            return {"apiVersion": "v1", "kind": "PodList",
                    "metadata": {"resourceVersion": str(self.resource_version)}, "items": items}

    def patch_pod(self, namespace, name, patch, content_type):
        with self.lock:
            pod = self._get(namespace, name)
            if "json-patch" in content_type:
                if not isinstance(patch, list):
                    raise ApiError(400, "BadRequest", "a json-patch body must be a list of operations")
                merged = json_patch(pod.obj, patch)
            elif "merge-patch" in content_type or "strategic" in content_type:
                if not isinstance(patch, dict):
                    raise ApiError(400, "BadRequest", "a merge patch body must be a JSON object")
                merged = merge_patch(pod.obj, patch)
            else:
                raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown "
                                                            f"format - accepted media types include: "
                                                            f"application/json-patch+json, "
                                                            f"application/merge-patch+json, "
                                                            f"application/strategic-merge-patch+json")
            if merged.get("spec") != pod.obj["spec"]:
                raise invalid(name, [("spec", "Forbidden: pod updates may not change fields other than "
                                              "`spec.containers[*].image`, `spec.activeDeadlineSeconds`, "
                                              "`spec.tolerations` (the stand-in: labels and annotations only)")])
            meta = merged.get("metadata") or {}
            candidate = copy.deepcopy(pod.obj)
            for key in ("labels", "annotations"):
                candidate["metadata"][key] = meta.get(key) or {}
            self._validate(candidate)
            pod.obj["metadata"]["labels"] = candidate["metadata"]["labels"]
            pod.obj["metadata"]["annotations"] = candidate["metadata"]["annotations"]
            self._touch(pod)
            return copy.deepcopy(pod.obj)

    def delete_pod(self, namespace, name, grace=None):
        with self.lock:
            return self._delete(self._get(namespace, name), grace)

    def delete_pods(self, namespace, label_selector=None, field_selector=None, grace=None):
        with self.lock:
            items = [self._delete(pod, grace) for pod in self._select(namespace, label_selector, field_selector)]
            return {"apiVersion": "v1", "kind": "PodList",
                    "metadata": {"resourceVersion": str(self.resource_version)}, "items": items}

    def _delete(self, pod, grace):
        if grace is None:
            grace = pod.obj["spec"].get("terminationGracePeriodSeconds", 30)
        grace = max(0, int(grace))
        meta = pod.obj["metadata"]
        if pod.deleting:  # a second delete may only shorten the grace period
            if grace < meta.get("deletionGracePeriodSeconds", grace):
                meta["deletionGracePeriodSeconds"] = grace
                self._signal(pod, signal.SIGKILL if grace == 0 else None, grace)
            return copy.deepcopy(pod.obj)
        meta["deletionTimestamp"] = rfc3339(time.time() + grace)
        meta["deletionGracePeriodSeconds"] = grace
        if not pod.runner_active:  # nothing runs: the object goes at once
            self._remove(pod)
            return copy.deepcopy(pod.obj)
        pod.deleting = True
        self._event(pod, "Killing", f"Stopping container {pod.container['name']}", container=True)
        self._signal(pod, signal.SIGKILL if grace == 0 else signal.SIGTERM, grace)
        self._touch(pod)
        return copy.deepcopy(pod.obj)

    def _signal(self, pod, signum, grace):
        """Signal the container's process group; SIGKILL it after ``grace`` seconds."""
        if signum and pod.proc and not pod.finished:
            try:
                os.killpg(pod.proc.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass
        pod.kill_at = time.monotonic() + grace

    def _remove(self, pod):
        if pod.removed:
            return
        pod.removed = True
        del self.pods[(pod.namespace, pod.name)]
        self._bump()
        self.wake_control.notify_all()  # its GPUs are free again
        empty_dirs = [pod.folder / "volumes" / v["name"] for v in pod.obj["spec"].get("volumes") or []
                      if "emptyDir" in v]
        threading.Thread(target=lambda: [shutil.rmtree(d, ignore_errors=True) for d in empty_dirs],
                         daemon=True).start()

    def list_events(self, namespace, field_selector=None):
        matches = parse_field_selector(field_selector, EVENT_FIELDS)
        with self.lock:
            items = [copy.deepcopy(e) for e in self.events
                     if (namespace is None or e["metadata"]["namespace"] == namespace) and matches(e)]
            return {"apiVersion": "v1", "kind": "EventList",
                    "metadata": {"resourceVersion": str(self.resource_version)}, "items": items}

    def log_source(self, namespace, name, container, previous):
        """The pod whose log is asked for, or the 400 the API server gives."""
        pod = self._get(namespace, name)
        names = [c["name"] for c in pod.obj["spec"]["containers"]]
        container = container or names[0]
        if container not in names:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        if previous:
            raise ApiError(400, "BadRequest",
                           f'previous terminated container "{container}" in pod "{name}" not found')
        if pod.started_at is None and not pod.finished:
            reason = "ContainerCreating"
            raise ApiError(400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: {reason}')
        return pod

    # ---- validation

    def _validate(self, obj):
        name = obj["metadata"].get("name", "")
        if self.validate:
            import kubernetes_validate
            try:
                kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)
            except kubernetes_validate.ValidationError as error:
                raise invalid(name, [(field_path(error.path), f"Invalid value: {error.message}")]) from None
        problems = semantic_problems(obj)
        if problems:
            raise invalid(name, problems)

    # ---- scheduler and kubelet

    def _control_loop(self):
        with self.lock:
            while not self.stopping:
                self._schedule()
                self._enforce_deadlines()
                self.wake_control.wait(0.5)

    def _schedule(self):
        for pod in list(self.pods.values()):
            if pod.node is not None or pod.deleting:
                continue
            node, message = self._pick_node(pod)
            if node is None:
                if message != pod.unschedulable:
                    pod.unschedulable = message
                    self._event(pod, "FailedScheduling", message, "Warning", "default-scheduler")
                    self._touch(pod)
                continue
            pod.node, pod.bound_at, pod.unschedulable = node, time.time(), None
            if pod.obj["spec"].get("hostNetwork"):
                pod.ip = node_ip(node)
            else:
                pod.ip = f"127.{self.network}.{1 + self.pod_counter // 250}.{self.pod_counter % 250 + 1}"
                self.pod_counter += 1
            pod.obj["spec"]["nodeName"] = node["metadata"]["name"]
            self._event(pod, "Scheduled", f"Successfully assigned {pod.namespace}/{pod.name} to "
                                          f"{node['metadata']['name']}", component="default-scheduler")
            pod.runner_active = True
            self._touch(pod)
            runner = threading.Thread(target=self._run_container, args=(pod,), daemon=True,
                                      name=f"standin-pod-{pod.name}")
            self.runners.append(runner)
            runner.start()

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
            for other in self.pods.values():
                if other.node is node and other.holds_node_resources():
                    for resource, count in other.wants().items():
                        used[resource] = used.get(resource, 0) + count
            allocatable = node["status"]["allocatable"]
            lacking = [r for r, n in wanted.items() if n > int(parse_quantity(allocatable.get(r, "0"))) - used.get(r, 0)]
            if lacking:
                for resource in lacking:
                    short[resource] = short.get(resource, 0) + 1
                continue
            load = sum(1 for other in self.pods.values() if other.node is node and other.holds_node_resources())
            fits.append((load, node))
        if fits:
            return min(fits, key=lambda pair: pair[0])[1], None
        reasons = [f"{n} Insufficient {r}" for r, n in sorted(short.items())]
        if mismatched:
            reasons.append(f"{mismatched} node(s) didn't match Pod's node affinity/selector")
        return None, f"0/{len(self.nodes)} nodes are available: {', '.join(sorted(reasons))}."

    def _enforce_deadlines(self):
        now = time.time()
        for pod in list(self.pods.values()):
            if pod.kill_at is not None and time.monotonic() >= pod.kill_at and not pod.finished:
                self._signal(pod, signal.SIGKILL, 0)
                pod.kill_at = None
            deadline = pod.obj["spec"].get("activeDeadlineSeconds")
            if (deadline and pod.bound_at and not pod.finished and not pod.deadline_exceeded
                    and now - pod.bound_at >= deadline):
                pod.deadline_exceeded = True
                self._event(pod, "DeadlineExceeded", "Pod was active on the node longer than the "
                                                     "specified deadline", "Warning")
                self._signal(pod, signal.SIGTERM, pod.obj["spec"].get("terminationGracePeriodSeconds", 30))
                self._touch(pod)

    def _run_container(self, pod):
        """The kubelet's part for one pod: start the process, record its output, report its end."""
        with self.lock:
            if pod.deleting or pod.deadline_exceeded or self.stopping:
                return self._finish(pod, None, "ContainerCannotRun", "the pod was stopped before it started")
            try:
                argv, env, cwd = self._launch_plan(pod)
            except FileNotFoundError as error:  # a hostPath that must exist does not: stays Pending
                self._event(pod, "FailedMount", f"MountVolume.SetUp failed: {error}", "Warning")
                pod.runner_active = False
                return self._touch(pod)
            self._event(pod, "Pulled", f'Container image "{pod.container.get("image", "")}" already present '
                                       f'on machine', container=True)
        try:
            proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as error:
            with self.lock:
                message = (f"failed to create containerd task: failed to start container process: "
                           f"exec: {argv[0]!r}: {error.strerror}")
                self._event(pod, "Failed", f"Error: {message}", "Warning", container=True)
                return self._finish(pod, 128, "StartError", message)
        with self.lock:
            pod.proc, pod.started_at = proc, time.time()
            pod.obj["metadata"].setdefault("annotations", {})[PID_ANNOTATION] = str(proc.pid)
            with (self.root / "pids.log").open("a") as f:
                f.write(f"{pod.namespace}/{pod.name} {proc.pid}\n")
            self._event(pod, "Created", f"Created container: {pod.container['name']}", container=True)
            self._event(pod, "Started", f"Started container {pod.container['name']}", container=True)
            if pod.deleting or pod.deadline_exceeded or self.stopping:
                os.killpg(proc.pid, signal.SIGKILL)
            self._touch(pod)
        reader = threading.Thread(target=self._record_output, args=(pod, proc.stdout), daemon=True)
        reader.start()
        code = proc.wait()
        try:  # the container's end takes everything left in it along, as a PID namespace would
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        reader.join(5)
        with self.lock:
            code = code if code >= 0 else 128 - code
            self._finish(pod, code, "Completed" if code == 0 else "Error", None)

    def _finish(self, pod, exit_code, reason, message):
        pod.exit_code = 1 if exit_code is None else exit_code
        pod.term_reason, pod.term_message = reason, message
        pod.finished_at, pod.finished, pod.runner_active, pod.kill_at = time.time(), True, False, None
        if pod.removed:
            return
        self._touch(pod)
        self.wake_control.notify_all()  # its GPUs are free again
        if pod.deleting:
            self._remove(pod)

    def _record_output(self, pod, stream):
        # in pieces of at most LOG_PIECE bytes, as the CRI writes a container's long lines: an
        # endless line is served as it comes, not held back until its newline
        for line in iter(lambda: stream.readline(LOG_PIECE), b""):
            arrived = time.time_ns()
            with self.lock:
                pod.log.append((arrived, line))
                self.changed.notify_all()
        stream.close()

    def _launch_plan(self, pod):
        """argv, environment and working directory of the container, with paths translated."""
        spec, container, meta = pod.obj["spec"], pod.container, pod.obj["metadata"]
        mounts, volumes = [], {v["name"]: v for v in spec.get("volumes") or []}
        for mount in container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            if "hostPath" in volume:
                host = Path(volume["hostPath"]["path"])
                kind = volume["hostPath"].get("type") or ""
                if kind == "DirectoryOrCreate":
                    host.mkdir(parents=True, exist_ok=True)
                elif kind == "FileOrCreate":
                    host.parent.mkdir(parents=True, exist_ok=True)
                    host.touch()
                elif kind in ("Directory", "File") and not host.exists():
                    raise FileNotFoundError(f"hostPath type check failed: {host} does not exist")
            elif mount["mountPath"] == "/dev/shm" and volume["emptyDir"].get("medium") == "Memory":
                continue  # the host's own /dev/shm
            else:
                host = pod.folder / "volumes" / volume["name"]
                host.mkdir(parents=True, exist_ok=True)
            if mount.get("subPath"):
                host = host / mount["subPath"]
                host.mkdir(parents=True, exist_ok=True)
            mounts.append((mount["mountPath"], str(host)))
        mounts.sort(key=lambda pair: len(pair[0]), reverse=True)
        mounts = [(m, h) for m, h in mounts if m != "/dev/shm"]

        fields = {"metadata.name": meta["name"], "metadata.namespace": meta["namespace"],
                  "metadata.uid": meta["uid"], "spec.nodeName": spec["nodeName"],
                  "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
                  "status.podIP": pod.ip, "status.hostIP": node_ip(pod.node), "status.podIPs": pod.ip,
                  "status.hostIPs": node_ip(pod.node)}
        variables = {}
        for item in container.get("env") or []:
            source = item.get("valueFrom")
            if source is None:
                value = expand(item.get("value", ""), variables)
            elif "fieldRef" in source:
                value = field_value(source["fieldRef"]["fieldPath"], fields, meta)
            else:
                value = resource_value(source["resourceFieldRef"], container, pod.node)
            variables[item["name"]] = translate_path(value, mounts)
        argv = [translate_path(expand(a, variables), mounts)
                for a in (container.get("command") or []) + (container.get("args") or [])]
        env = dict(os.environ, HOSTNAME=spec["nodeName"] if spec.get("hostNetwork") else meta["name"])
        image = image_folder(container.get("image", ""))
        if image is not None:
            # Popen looks a bare argv[0] up on env's PATH (POSIX), so the image's programs win
            env["PATH"] = os.pathsep.join([str(image / "bin"), env.get("PATH", os.defpath)])
        env.update(variables)  # the container's own env overrides the image's, PATH included
        workdir = pod.folder / "workdir"
        workdir.mkdir(parents=True, exist_ok=True)
        cwd = translate_path(container["workingDir"], mounts) if container.get("workingDir") else str(workdir)
        Path(cwd).mkdir(parents=True, exist_ok=True)  # the runtime creates a missing workingDir
        return argv, env, cwd

    # ---- shutdown

    def shutdown(self, grace=STOP_GRACE_SECONDS):
        """Stop every container (SIGTERM, SIGKILL after ``grace``) and wait for all of them."""
        with self.lock:
            self.stopping = True
            self.wake_control.notify_all()
            for pod in self.pods.values():
                self._signal(pod, signal.SIGTERM, grace)
            runners = list(self.runners)
        deadline = time.monotonic() + grace
        for runner in runners:
            runner.join(max(0.0, deadline - time.monotonic()))
        with self.lock:
            for pod in self.pods.values():
                self._signal(pod, signal.SIGKILL, 0)
        for runner in runners:
            runner.join(10)


def field_value(path, fields, meta):
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
    if match:
        return (meta.get(match[1]) or {}).get(match[2], "")
    return fields[path]


def resource_value(ref, container, node):
    resource = ref["resource"]
    kind, _, name = resource.partition(".")
    amounts = (container.get("resources") or {}).get(kind) or {}
    if kind == "requests" and name not in amounts:
        amounts = (container.get("resources") or {}).get("limits") or {}
    default = node["status"]["allocatable"].get(name, "0") if kind == "limits" else "0"
    value = parse_quantity(amounts.get(name, default)) / parse_quantity(ref.get("divisor", "1"))
    return str(math.ceil(value))


FIELD_REFS = {"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
              "spec.serviceAccountName", "status.podIP", "status.hostIP", "status.podIPs", "status.hostIPs"}
RESOURCE_REFS = {"limits.cpu", "limits.memory", "requests.cpu", "requests.memory",
                 "limits.ephemeral-storage", "requests.ephemeral-storage"}


def semantic_problems(obj):
    """What the API server checks beyond the schema: names, labels, resource quantities."""
    problems = []
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    name = meta.get("name", "")
    if len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        problems.append(("metadata.name", f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must '
                                          f"consist of lower case alphanumeric characters, '-' or '.'"))
    for key, value in (meta.get("labels") or {}).items():
        if problem := label_key_problem(key):
            problems.append((f"metadata.labels", f'Invalid value: "{key}": {problem}'))
        if not isinstance(value, str) or (value and (len(value) > 63 or not LABEL_NAME.match(value))):
            problems.append((f"metadata.labels", f'Invalid value: "{value}": a valid label must be an empty '
                                                 f"string or consist of alphanumeric characters, '-', '_' or "
                                                 f"'.', and must start and end with an alphanumeric character"))
    for key in meta.get("annotations") or {}:
        if problem := label_key_problem(key):
            problems.append(("metadata.annotations", f'Invalid value: "{key}": {problem}'))
    groups = [("spec.containers", spec.get("containers") or []), ("spec.initContainers", spec.get("initContainers") or [])]
    for group, containers in groups:
        for i, container in enumerate(containers):
            where = f"{group}[{i}]"
            if not DNS_LABEL.match(str(container.get("name", ""))) or len(container.get("name", "")) > 63:
                problems.append((f"{where}.name", f'Invalid value: "{container.get("name")}": a lowercase RFC 1123 label'))
            resources = container.get("resources") or {}
            parsed = {}
            for kind in ("limits", "requests"):
                for resource, value in (resources.get(kind) or {}).items():
                    field = f"{where}.resources.{kind}[{resource}]"
                    try:
                        parsed[kind, resource] = amount = parse_quantity(value)
                    except ValueError:
                        problems.append((field, f'Invalid value: "{value}": must be a valid quantity, matching '
                                                f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"))
                        continue
                    if amount < 0:
                        problems.append((field, f'Invalid value: "{value}": must be greater than or equal to 0'))
                    if "/" in resource and amount != amount.to_integral_value():
                        problems.append((field, f'Invalid value: "{value}": must be an integer'))
            for (kind, resource), amount in parsed.items():
                if kind != "requests":
                    continue
                limit = parsed.get(("limits", resource))
                field = f"{where}.resources.requests[{resource}]"
                if "/" in resource and limit is None:
                    problems.append((f"{where}.resources.limits", f"Required value: Limit must be set for non "
                                                                  f"overcommitable resources ({resource})"))
                elif "/" in resource and amount != limit:
                    problems.append((field, f'Invalid value: "{resources["requests"][resource]}": must be equal '
                                            f"to {resource} limit of {resources['limits'][resource]}"))
                elif limit is not None and amount > limit:
                    problems.append((field, f'Invalid value: "{resources["requests"][resource]}": must be less '
                                            f"than or equal to {resource} limit of {resources['limits'][resource]}"))
    volume_names = {v.get("name") for v in spec.get("volumes") or []}
    for i, volume in enumerate(spec.get("volumes") or []):
        if not DNS_LABEL.match(str(volume.get("name", ""))):
            problems.append((f"spec.volumes[{i}].name", f'Invalid value: "{volume.get("name")}": a lowercase RFC 1123 label'))
    for i, container in enumerate(spec.get("containers") or []):
        for j, mount in enumerate(container.get("volumeMounts") or []):
            if mount.get("name") not in volume_names:
                problems.append((f"spec.containers[{i}].volumeMounts[{j}].name", f'Not found: "{mount.get("name")}"'))
    return problems


def check_supported(obj):
    """422 for what the stand-in cannot run, said plainly."""
    spec, name = obj.get("spec") or {}, obj["metadata"]["name"]
    problems = []
    if spec.get("initContainers"):
        problems.append(("spec.initContainers", "Forbidden: the stand-in runs no init containers"))
    if spec.get("ephemeralContainers"):
        problems.append(("spec.ephemeralContainers", "Forbidden: the stand-in runs no ephemeral containers"))
    if len(spec.get("containers") or []) != 1:
        problems.append(("spec.containers", "Forbidden: the stand-in runs exactly one container per pod"))
    policy = spec.get("restartPolicy", "Always")
    if policy != "Never":
        problems.append(("spec.restartPolicy", f'Unsupported value: "{policy}": the stand-in does not restart '
                                               f'containers: supported values: "Never"'))
    for i, volume in enumerate(spec.get("volumes") or []):
        kinds = set(volume) - {"name"}
        if kinds not in ({"emptyDir"}, {"hostPath"}):
            problems.append((f"spec.volumes[{i}]", f"Forbidden: the stand-in serves emptyDir and hostPath "
                                                   f"volumes only: {volume.get('name')}"))
    for i, container in enumerate(spec.get("containers") or []):
        where = f"spec.containers[{i}]"
        if not container.get("command"):
            problems.append((f"{where}.command", "Required value: the stand-in has no image entrypoint: "
                                                 "give command (args alone are not enough)"))
        if container.get("envFrom"):
            problems.append((f"{where}.envFrom", "Forbidden: the stand-in has no ConfigMaps or Secrets"))
        for j, item in enumerate(container.get("env") or []):
            source = item.get("valueFrom")
            if source is None:
                continue
            field = f"{where}.env[{j}].valueFrom"
            if "fieldRef" in source:
                path = source["fieldRef"].get("fieldPath", "")
                if path not in FIELD_REFS and not re.fullmatch(r"metadata\.(labels|annotations)\['[^']*'\]", path):
                    problems.append((f"{field}.fieldRef.fieldPath", f'Unsupported value: "{path}"'))
            elif "resourceFieldRef" in source:
                if source["resourceFieldRef"].get("resource") not in RESOURCE_REFS:
                    problems.append((f"{field}.resourceFieldRef.resource",
                                     f'Unsupported value: "{source["resourceFieldRef"].get("resource")}"'))
            else:
                problems.append((field, "Forbidden: the stand-in resolves fieldRef and resourceFieldRef only"))
    if problems:
        raise invalid(name, problems)


def apply_defaults(obj):
    """The defaults the API server writes into a pod."""
    spec = obj["spec"]
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    for container in spec["containers"]:
        image = container.get("image", "")
        latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
        container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("resources", {})


def image_folder(image):
    """The local folder an image stands for (an absolute path to an existing folder), else None."""
    path = Path(image)
    return path if path.is_absolute() and path.is_dir() else None


def qos_class(containers):
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("limits") or r.get("requests") for r in resources):
        return "BestEffort"
    for r in resources:
        limits, requests = r.get("limits") or {}, r.get("requests") or {}
        if not all(k in limits for k in ("cpu", "memory")) or \
                any(str(requests.get(k, limits[k])) != str(limits[k]) for k in ("cpu", "memory")):
            return "Burstable"
    return "Guaranteed"


# -------------------------------------------------------------------------------------- HTTP

def discovery(port):
    resources = [("pods", "Pod", True, ["create", "delete", "deletecollection", "get", "list", "patch"]),
                 ("pods/log", "Pod", True, ["get"]), ("events", "Event", True, ["list"]),
                 ("nodes", "Node", False, ["get", "list"])]
    return {
        "/api": {"kind": "APIVersions", "versions": ["v1"],
                 "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{port}"}]},
        "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
        "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
            {"name": n, "singularName": "" if "/" in n else k.lower(), "namespaced": ns, "kind": k, "verbs": v}
            for n, k, ns, v in resources]},
        "/version": {"major": "1", "minor": "34", "gitVersion": GIT_VERSION, "gitCommit": "0" * 40,
                     "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                     "goVersion": f"python{sys.version_info[0]}.{sys.version_info[1]}",
                     "compiler": "cpython", "platform": "linux/amd64"},
    }


NS = r"/api/v1/namespaces/(?P<ns>[^/]+)"
ROUTES = [(re.compile(pattern + "$"), name) for pattern, name in [
    (r"/api/v1/nodes", "nodes"), (r"/api/v1/nodes/(?P<name>[^/]+)", "node"),
    (r"/api/v1/pods", "all_pods"), (NS + r"/pods", "pods"), (NS + r"/pods/(?P<name>[^/]+)", "pod"),
    (NS + r"/pods/(?P<name>[^/]+)/status", "pod_status"), (NS + r"/pods/(?P<name>[^/]+)/log", "log"),
    (r"/api/v1/events", "all_events"), (NS + r"/events", "events"),
]]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-standin"

    def log_message(self, format, *args):
        if self.server.verbose:
            super().log_message(format, *args)

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_PUT(self):
        self._dispatch("PUT")

    def _send_json(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self, method):
        try:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw.strip() else None
            except ValueError:
                raise ApiError(400, "BadRequest", "the body of the request could not be decoded as JSON") from None
            self._route(method, url.path.rstrip("/") or "/", query, body)
        except ApiError as error:
            self._send_json(error.code, error.status())
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as error:  # noqa: BLE001  (an internal error is still a Status)
            import traceback
            traceback.print_exc()
            self._send_json(500, ApiError(500, "InternalError", f"stand-in error: {error!r}").status())

    def _route(self, method, path, query, body):
        cluster, static = self.server.cluster, self.server.discovery
        if path in static:
            return self._send_json(200, static[path]) if method == "GET" else self._not_allowed(method)
        for pattern, route in ROUTES:
            match = pattern.match(path)
            if match:
                break
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        args = match.groupdict()
        if query.get("watch", "").lower() in ("true", "1"):
            raise ApiError(405, "MethodNotAllowed", "the stand-in does not serve watch: poll with list instead")
        label, field = query.get("labelSelector"), query.get("fieldSelector")
        grace = query.get("gracePeriodSeconds", (body or {}).get("gracePeriodSeconds") if method == "DELETE" else None)
        if route == "nodes" and method == "GET":
            labels_match = parse_label_selector(label)
            items = [n for n in cluster.nodes if labels_match(n["metadata"]["labels"])]
            return self._send_json(200, {"apiVersion": "v1", "kind": "NodeList",
                                         "metadata": {"resourceVersion": "1"}, "items": items})
        if route == "node" and method == "GET":
            for node in cluster.nodes:
                if node["metadata"]["name"] == args["name"]:
                    return self._send_json(200, node)
            raise not_found("nodes", args["name"])
        if route == "all_pods" and method == "GET":
            return self._send_json(200, cluster.list_pods(None, label, field))
        if route == "pods" and method == "GET":
            return self._send_json(200, cluster.list_pods(args["ns"], label, field))
        if route == "pods" and method == "POST":
            return self._send_json(201, cluster.create_pod(args["ns"], body, dry_run="dryRun" in query))
        if route == "pods" and method == "DELETE":
            return self._send_json(200, cluster.delete_pods(args["ns"], label, field, grace))
        if route in ("pod", "pod_status") and method == "GET":
            return self._send_json(200, cluster.get_pod(args["ns"], args["name"]))
        if route == "pod" and method == "PATCH":
            content_type = self.headers.get("Content-Type", "")
            return self._send_json(200, cluster.patch_pod(args["ns"], args["name"], body, content_type))
        if route == "pod" and method == "DELETE":
            return self._send_json(200, cluster.delete_pod(args["ns"], args["name"], grace))
        if route == "log" and method == "GET":
            return self._serve_log(args["ns"], args["name"], query)
        if route in ("events", "all_events") and method == "GET":
            return self._send_json(200, cluster.list_events(args.get("ns"), field))
        self._not_allowed(method)

    def _not_allowed(self, method):
        raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method on the requested "
                                                f"resource ({method})")

    def _serve_log(self, namespace, name, query):
        cluster = self.server.cluster
        def flag(name):  # the Python client sends True as "True"
            return query.get(name, "").lower() in ("true", "1")
        follow, timestamps = flag("follow"), flag("timestamps")
        try:
            tail = int(query["tailLines"]) if "tailLines" in query else None
            since = (time.time_ns() - int(query["sinceSeconds"]) * 1_000_000_000 if "sinceSeconds" in query
                     else parse_rfc3339_ns(query["sinceTime"]) if "sinceTime" in query else None)
            limit = int(query["limitBytes"]) if "limitBytes" in query else None
        except ValueError as error:
            raise ApiError(400, "BadRequest", f"invalid log options: {error}") from None

        def render(lines):
            return b"".join((rfc3339_nano(t).encode() + b" " if timestamps else b"") + line for t, line in lines)

        with cluster.lock:
            pod = cluster.log_source(namespace, name, query.get("container"), flag("previous"))
            backlog = [entry for entry in pod.log if since is None or entry[0] >= since]
            if tail is not None:
                backlog = backlog[-tail:] if tail > 0 else []
            seen, done = len(pod.log), pod.finished
        if not follow or done:
            data = render(backlog)
            data = data[:limit] if limit is not None else data
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0
        chunk = render(backlog)
        while True:
            if limit is not None:
                chunk = chunk[:max(0, limit - sent)]
            if chunk:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
                sent += len(chunk)
            if done or (limit is not None and sent >= limit):
                break
            with cluster.lock:
                while len(pod.log) == seen and not pod.finished and not pod.removed and not cluster.stopping:
                    cluster.changed.wait(1.0)
                chunk = render(pod.log[seen:])
                seen = len(pod.log)
                done = pod.finished or pod.removed or cluster.stopping
        self.wfile.write(b"0\r\n\r\n")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


# --------------------------------------------------------------------------------- lifecycle

def kubeconfig_text(port):
    return (f"apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n"
            f"    server: http://127.0.0.1:{port}\ncontexts:\n- name: standin\n  context:\n"
            f"    cluster: standin\n    user: standin\n    namespace: default\n"
            f"current-context: standin\nusers:\n- name: standin\n  user:\n    token: {TOKEN}\n")


def serve(root, nodes=2, gpus_per_node=0, port=0, validate=True, verbose=False):
    """Run in the foreground until SIGTERM/SIGINT; then stop every pod and exit."""
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(root, nodes, gpus_per_node, validate)
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


def spawn(root, nodes=2, gpus_per_node=0, validate=True, port=0, timeout=30):
    """Start ``serve`` detached (own session, log in ROOT/standin.log); the Popen and its port."""
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    (root / "port").unlink(missing_ok=True)
    argv = [sys.executable, str(Path(__file__).resolve()), "serve", "--root", str(root), "--nodes", str(nodes),
            "--gpus-per-node", str(gpus_per_node), "--port", str(port)] + ([] if validate else ["--no-validate"])
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


def start(root, nodes=2, gpus_per_node=0, validate=True, port=0):
    """Start a stand-in serving from ROOT; a StandIn (use as a context manager, or call .stop())."""
    process, bound = spawn(root, nodes, gpus_per_node, validate, port)
    return StandIn(root, process, bound)


def _pid_of(root):
    try:
        pid = int((Path(root) / "standin.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if b"kube_standin" in cmdline and b"serve" in cmdline else None


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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("start", "serve"):
        command = commands.add_parser(name)
        command.add_argument("--root", required=True, type=Path)
        command.add_argument("--nodes", type=int, default=2)
        command.add_argument("--gpus-per-node", type=int, default=0)
        command.add_argument("--port", type=int, default=0)
        command.add_argument("--no-validate", dest="validate", action="store_false")
        command.add_argument("--verbose", action="store_true")
    for name in ("stop", "check"):
        commands.add_parser(name).add_argument("--root", required=True, type=Path)
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(args.root, args.nodes, args.gpus_per_node, args.port, args.validate, args.verbose)
        return 0
    if args.command == "start":
        try:
            spawn(args.root, args.nodes, args.gpus_per_node, args.validate, args.port)
        except RuntimeError as error:
            print(f"kube stand-in failed to start: {error}", file=sys.stderr)
            return 1
        print(args.root.resolve() / "kubeconfig")
        return 0
    if args.command == "stop":
        return _stop_cli(args.root)
    port_file = args.root / "port"
    ok = port_file.exists() and answers(f"http://127.0.0.1:{int(port_file.read_text())}")
    print("kube stand-in answers" if ok else "kube stand-in does not answer")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
