"""The Kubernetes launcher: the role plan as pods, one pod per role.

Same plan as local and ssh (``plan_roles``), driven by the same ``run_plan``; here a role is a pod
(``RolePod``) on a node of the cluster. The DAG's run task, a KubernetesPodOperator subclass
(``mxbench.operators``), hands this launcher the operator's Kubernetes client, its ``PodManager``
and the base pod its ``build_pod_request_obj`` made (pod template, labels, namespace); nothing
here imports Airflow.

How a run becomes pods:
- The scheduler pod starts first; ps-lite's scheduler binds ``DMLC_PS_ROOT_URI`` itself, so it
  gets its own pod IP through the downward API (``status.podIP``). Once it runs, servers and
  workers get that IP; every pod's ``DMLC_NODE_HOST`` is its own pod IP. GPU ids in a pod are
  0..k-1 of its ``nvidia.com/gpu`` limit.
- Pods are pinned to nodes (``kubernetes.io/hostname``): a variant on n hosts uses the first n
  nodes, so that "2 machines" means two nodes, and k8s and ssh can be compared on the same boxes.
- Each pod is labelled with the run (``mxbench.io/run``, a hash of DAG run and run key), the
  attempt and the role: the launcher finds its own pods by label, never by the operator's
  single-pod lookup; a retry deletes what an earlier attempt left; the first failing role ends
  the run and every pod of it is deleted; ``activeDeadlineSeconds`` backs up the run deadline.
- Logs: one follower per pod streams it into ``roles/<role>.log`` (workers echoed to the task
  log with a role prefix); once the pod ends its full log is fetched again (streams have gaps)
  and the rank logs and telemetry the role printed at exit (``mxbench_train pod-role``) are
  unpacked into the run folder, so parse/join/report read a k8s run like any other.

Pod settings are configuration (the Kubernetes connection's extra ``mxbench_pod``), checked
against ``SETTINGS_SCHEMA``; see the README.
"""
import copy
import hashlib
import json
import posixpath
import re
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from mxbench_train.errors import MxbenchError
from mxbench_train.launcher import describe_exit, run_plan
from mxbench_train.pod_outputs import BEGIN, END, BundleError, split_log, unpack
from mxbench_train.roles import Role, plan_roles

from ..jobs import job_for
from ..variants import Target, Variant
from .ssh import LOCAL_ONLY, Steps, cores_per_host

CONTAINER = "base"  # the KubernetesPodOperator's container name: its pod template merges into it
RUN_DIR = "/mxbench/run"  # an emptyDir in each pod: the role's working folder and --log-dir
DATA_MOUNT = "/mxbench/data"
GPU_RESOURCE = "nvidia.com/gpu"
STATUS_POLL_S = 0.25  # one list call per run this often, whatever run_plan's own poll rate
STANDIN_MARK = "mxbench-standin"  # in the stand-in API server's /version
PENDING_TIMEOUT = -1000  # RolePod.returncode of a pod that was never scheduled in time
GONE = -1001  # ... of a pod that vanished (deleted by someone else, its node lost)
DELETE_GRACE_S = 3


SETTINGS_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "image": {"type": "string", "minLength": 1},
        "namespace": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"},
        "python": {"type": "string", "minLength": 1},
        "service_account": {"type": "string"},
        "image_pull_secrets": {"type": "array", "items": {"type": "string"}},
        "requests": {"type": "object", "additionalProperties": {"type": ["string", "number"]}},
        "limits": {"type": "object", "additionalProperties": {"type": ["string", "number"]}},
        "gpu_resource": {"type": "string"},
        "node_selector": {"type": "object", "additionalProperties": {"type": "string"}},
        "nodes": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "tolerations": {"type": "array", "items": {"type": "object"}},
        "affinity": {"type": "object"},
        "data": {"type": "object", "additionalProperties": False,
                 "properties": {"host_path": {"type": "string", "pattern": "^/"},
                                "pvc": {"type": "string"},
                                "local_path": {"type": "string", "pattern": "^/"}},
                 "oneOf": [{"required": ["host_path"]}, {"required": ["pvc", "local_path"]}]},
        "shm_size": {"type": ["string", "null"]},
        "host_network": {"type": "boolean"},
        "port": {"type": "integer", "minimum": 1024, "maximum": 65535},
        "startup_timeout_s": {"type": "number", "exclusiveMinimum": 0},
        "gang": {"type": "object", "additionalProperties": False, "required": ["kind", "queue"],
                 "properties": {"kind": {"enum": ["kueue", "volcano"]}, "queue": {"type": "string"}}},
        "pod_template_file": {"type": "string"},
        "env": {"type": "object", "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                "additionalProperties": {"type": "string"}},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["data"],
}


@dataclass(frozen=True)
class PodSettings:
    """How role pods look on one cluster: plain settings from the Kubernetes connection."""

    conn_id: str
    image: str
    data: Dict[str, str]  # host_path, or pvc + local_path: where the prepared .rec files are
    namespace: str = "default"
    python: str = "python"  # the training image's interpreter, with mxbench_train installed
    service_account: Optional[str] = None
    image_pull_secrets: Sequence[str] = ()
    requests: Dict[str, str] = field(default_factory=dict)
    limits: Dict[str, str] = field(default_factory=dict)
    gpu_resource: str = GPU_RESOURCE
    node_selector: Dict[str, str] = field(default_factory=dict)
    nodes: Sequence[str] = ()  # the nodes to use, in order; default: every ready node the selector matches
    tolerations: Sequence[dict] = ()
    affinity: Optional[dict] = None
    shm_size: Optional[str] = "1Gi"  # /dev/shm as a memory emptyDir: MXNet's data loaders need more than 64M
    host_network: bool = False
    port: int = 9091
    startup_timeout_s: float = 600.0  # to be scheduled and started (image pull included)
    gang: Optional[Dict[str, str]] = None
    pod_template_file: Optional[str] = None
    env: Dict[str, str] = field(default_factory=dict)  # added to every role's environment (NCCL_*, ...)
    labels: Dict[str, str] = field(default_factory=dict)
    annotations: Dict[str, str] = field(default_factory=dict)

    @property
    def local_data_root(self) -> str:
        """Where the Airflow worker sees the data volume's files."""
        return self.data.get("local_path") or self.data["host_path"]


def pod_settings(conn_id: str, extra: dict, namespace: Optional[str] = None, image: Optional[str] = None) -> PodSettings:
    """PodSettings from a connection's ``mxbench_pod`` extra; refuses what could not work, by name."""
    import jsonschema

    raw = extra.get("mxbench_pod")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raw = None
    where = f"kubernetes connection {conn_id!r}"
    if not isinstance(raw, dict):
        raise MxbenchError(f"{where} has no mxbench_pod object in its extra: it says how role pods look "
                           "(image, data volume, resources, ...); see the README")
    try:
        jsonschema.validate(raw, SETTINGS_SCHEMA)
    except jsonschema.ValidationError as exc:
        path = ".".join(str(p) for p in exc.absolute_path) or "mxbench_pod"
        raise MxbenchError(f"{where}: mxbench_pod.{path}: {exc.message}".replace("mxbench_pod.mxbench_pod", "mxbench_pod")) from None
    settings = {k: v for k, v in raw.items() if k != "image"}
    image = image or raw.get("image")
    if not image:
        raise MxbenchError(f"{where}: no training image: set mxbench_pod.image or the kubernetes_image param")
    if namespace and "namespace" not in settings:
        settings["namespace"] = namespace
    for key in ("requests", "limits"):
        if key in settings:
            settings[key] = {k: str(v) for k, v in settings[key].items()}
    for key in ("image_pull_secrets", "nodes", "tolerations"):
        if key in settings:
            settings[key] = tuple(settings[key])
    return PodSettings(conn_id=conn_id, image=image, **settings)


# --- pods: pure ------------------------------------------------------------------------------

def run_id(run_dir) -> str:
    """A label value naming one run of one DAG run (its folder): the same on every attempt."""
    run_dir = Path(run_dir)
    return hashlib.sha256(f"{run_dir.parent.name}/{run_dir.name}".encode()).hexdigest()[:16]


def label_value(text: str) -> str:
    """A valid label value (63 chars of [A-Za-z0-9-_.], alphanumeric at both ends)."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63].strip("-_.")
    return value or "x"


def pod_name(run: str, attempt: str, role: str) -> str:
    return f"mxb-{run[:10]}-{attempt}-{role}"[:63].rstrip("-")


def pod_data_dir(settings: PodSettings, data_dir) -> str:
    """The prepared data set's folder as the pods see it, under the data volume's mount."""
    root, data_dir = Path(settings.local_data_root), Path(data_dir)
    try:
        relative = data_dir.resolve().relative_to(root.resolve())
    except ValueError:
        raise MxbenchError(f"the prepared data set {data_dir} is not under the data volume's folder {root} "
                           f"(kubernetes connection {settings.conn_id!r}, mxbench_pod.data): the pods could not "
                           "read it") from None
    return posixpath.join(DATA_MOUNT, relative.as_posix()) if str(relative) != "." else DATA_MOUNT


def pod_template(settings: PodSettings) -> dict:
    """The pod-level settings as a pod manifest, which the operator merges over its pod template
    file and under its own fields (``full_pod_spec``)."""
    volumes = [{"name": "run", "emptyDir": {}}]
    mounts = [{"name": "run", "mountPath": RUN_DIR}]
    if "pvc" in settings.data:
        volumes.append({"name": "data", "persistentVolumeClaim": {"claimName": settings.data["pvc"],
                                                                  "readOnly": True}})
    else:
        volumes.append({"name": "data", "hostPath": {"path": settings.data["host_path"], "type": "Directory"}})
    mounts.append({"name": "data", "mountPath": DATA_MOUNT, "readOnly": True})
    if settings.shm_size:
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    container = {"name": CONTAINER, "image": settings.image, "workingDir": RUN_DIR, "volumeMounts": mounts}
    resources = {k: v for k, v in (("requests", settings.requests), ("limits", settings.limits)) if v}
    if resources:
        container["resources"] = copy.deepcopy(resources)
    spec = {"restartPolicy": "Never", "containers": [container], "volumes": volumes}
    if settings.service_account:
        spec["serviceAccountName"] = settings.service_account
    if settings.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        spec["tolerations"] = [dict(t) for t in settings.tolerations]
    if settings.affinity:
        spec["affinity"] = copy.deepcopy(settings.affinity)
    metadata = {"namespace": settings.namespace, "labels": dict(settings.labels),
                "annotations": dict(settings.annotations)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def role_pod(base: dict, role: Role, *, run: str, attempt: str, run_key: str, roles: int, settings: PodSettings,
             gpus: int, host_network: bool, scheduler_ip: Optional[str], deadline_s: float) -> dict:
    """One role's pod: ``base`` (a pod manifest) with the role's name, labels, command, env,
    GPUs, node and deadline. Pure."""
    pod = copy.deepcopy(base)
    meta, spec = pod.setdefault("metadata", {}), pod.setdefault("spec", {})
    meta["name"] = pod_name(run, attempt, role.name)
    meta.pop("generateName", None)
    meta["labels"] = {**(meta.get("labels") or {}), "app.kubernetes.io/name": "mxbench",
                      "app.kubernetes.io/component": role.kind, "mxbench.io/run": run,
                      "mxbench.io/attempt": attempt, "mxbench.io/role": label_value(role.name)}
    meta["annotations"] = {**(meta.get("annotations") or {}), "mxbench.io/run-key": run_key}
    if settings.gang:  # all roles of a run are scheduled together, or none (GPUs held by half a job help nobody)
        if settings.gang["kind"] == "kueue":
            meta["labels"].update({"kueue.x-k8s.io/queue-name": settings.gang["queue"],
                                   "kueue.x-k8s.io/pod-group-name": f"mxb-{run}-{attempt}"})
            meta["annotations"]["kueue.x-k8s.io/pod-group-total-count"] = str(roles)
        else:
            spec["schedulerName"] = "volcano"
            meta["annotations"].update({"scheduling.k8s.io/group-name": f"mxb-{run}-{attempt}",
                                        "volcano.sh/queue-name": settings.gang["queue"]})
    container = next(c for c in spec["containers"] if c["name"] == CONTAINER)
    container["command"] = [settings.python, "-m", "mxbench_train", "pod-role", "--outputs", RUN_DIR, "--",
                            *role.argv]
    container.pop("args", None)
    pod_ip = {"name": "", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    variables = {**settings.env, **role.env}  # the plan's DMLC_* and thread counts win
    env = [{"name": k, "value": v} for k, v in sorted(variables.items())
           if k not in ("DMLC_PS_ROOT_URI", "DMLC_NODE_HOST")]
    if "DMLC_ROLE" in role.env:  # ps-lite binds these itself: the pod's own IP, the scheduler's IP
        env.append({**pod_ip, "name": "DMLC_NODE_HOST"})
        env.append({**pod_ip, "name": "DMLC_PS_ROOT_URI"} if role.kind == "scheduler"
                   else {"name": "DMLC_PS_ROOT_URI", "value": scheduler_ip})
    container["env"] = [e for e in container.get("env") or [] if e["name"] not in {x["name"] for x in env}] + env
    resources = container.setdefault("resources", {})
    if gpus:
        resources.setdefault("limits", {})[settings.gpu_resource] = str(gpus)
        resources.setdefault("requests", {})[settings.gpu_resource] = str(gpus)
    else:
        for kind in ("limits", "requests"):
            (resources.get(kind) or {}).pop(settings.gpu_resource, None)
    if not any(resources.values()):
        container.pop("resources")
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), "kubernetes.io/hostname": role.host}
    spec["restartPolicy"] = "Never"
    spec["activeDeadlineSeconds"] = int(deadline_s) + 60  # the run deadline's backstop, should Airflow die
    spec["terminationGracePeriodSeconds"] = DELETE_GRACE_S
    if host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    return pod


# --- a run's pods ----------------------------------------------------------------------------

class RunPods:
    """The pods of one attempt of one run: created here, their status read in one list call per
    STATUS_POLL_S for all of them, deleted together."""

    def __init__(self, client, namespace: str, run: str, attempt: str, pod_manager=None):
        self.client, self.namespace, self.run, self.attempt = client, namespace, run, attempt
        self.pod_manager = pod_manager
        self.created: List[str] = []
        self._status: Dict[str, object] = {}
        self._read_at = 0.0
        self._lock = threading.Lock()

    def create(self, body: dict):
        from kubernetes.client.exceptions import ApiException

        try:
            pod = self.client.create_namespaced_pod(namespace=self.namespace, body=body)
        except ApiException as exc:
            raise MxbenchError(f"creating pod {body['metadata']['name']} failed: {api_error(exc)}") from None
        self.created.append(body["metadata"]["name"])
        self._read_at = 0.0  # the next status() lists again, and sees it
        return pod

    def status(self, name: str, fresh: bool = False):
        """The pod's V1Pod as last listed (None once it is gone)."""
        with self._lock:
            if fresh or time.monotonic() - self._read_at > STATUS_POLL_S:
                listed = self.client.list_namespaced_pod(
                    self.namespace, label_selector=f"mxbench.io/run={self.run},mxbench.io/attempt={self.attempt}")
                self._status = {p.metadata.name: p for p in listed.items}
                self._read_at = time.monotonic()
            return self._status.get(name)

    def events(self, name: str) -> str:
        """The latest warning about a pod (FailedScheduling, ...), as one line; '' when none."""
        try:
            events = self.client.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={name}")
        except Exception:
            return ""
        warnings = [e for e in events.items if e.type == "Warning"] or events.items
        latest = max(warnings, key=lambda e: e.metadata.resource_version or "", default=None)
        return f"{latest.reason}: {latest.message}" if latest else ""

    def delete(self, name: str, grace: int):
        from kubernetes.client.exceptions import ApiException

        try:
            self.client.delete_namespaced_pod(name, self.namespace, grace_period_seconds=grace)
        except ApiException as exc:
            if exc.status != 404:
                raise MxbenchError(f"deleting pod {name} failed: {api_error(exc)}") from None

    def delete_all(self):
        delete_run_pods(self.client, self.namespace, f"mxbench.io/run={self.run},mxbench.io/attempt={self.attempt}")


def delete_run_pods(client, namespace: str, selector: str, wait_s: float = 30.0) -> List[str]:
    """Delete every pod the selector matches and wait (up to ``wait_s``) until they are gone."""
    from kubernetes.client.exceptions import ApiException

    try:
        names = [p.metadata.name for p in client.list_namespaced_pod(namespace, label_selector=selector).items]
        for name in names:
            try:
                client.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        end = time.monotonic() + wait_s
        while names and time.monotonic() < end and client.list_namespaced_pod(namespace, label_selector=selector).items:
            time.sleep(0.2)
    except ApiException as exc:
        raise MxbenchError(f"deleting pods {selector} in namespace {namespace} failed: {api_error(exc)}") from None
    return names


def api_error(exc) -> str:
    try:
        message = json.loads(exc.body).get("message")
    except (TypeError, ValueError, AttributeError):
        message = None
    return f"HTTP {exc.status} {exc.reason}" + (f": {message}" if message else "")


class RolePod:
    """A role running as a pod: the handle ``run_plan`` drives (see mxbench_train.launcher.LocalProcess)."""

    def __init__(self, pods: RunPods, role: Role, body: dict, log_path: Path, run_dir: Path,
                 startup_timeout_s: float, echo: bool = False):
        self.pods, self.role, self.log_path, self.run_dir = pods, role, Path(log_path), Path(run_dir)
        self.name = body["metadata"]["name"]
        self.pid = None  # nothing local: the pod is found by name and label
        self.startup_timeout_s = startup_timeout_s
        self._returncode: Optional[int] = None
        self._why = ""
        self._created = time.monotonic()
        self._stop = threading.Event()
        self._stream, self._killed = None, False
        self.pod = pods.create(body)
        self._follower = threading.Thread(target=self._follow, args=(echo,), daemon=True,
                                          name=f"log-{role.name}")
        self._follower.start()

    # status

    @property
    def returncode(self) -> Optional[int]:
        return self._returncode

    def poll(self) -> Optional[int]:
        if self._returncode is not None:
            return self._returncode
        pod = self.pods.status(self.name)
        if pod is None and self.pods.status(self.name, fresh=True) is None:  # not a stale list: gone
            self._returncode, self._why = GONE, f"its pod {self.name} is gone (deleted, or its node was lost)"
            return self._returncode
        pod = pod or self.pods.status(self.name)
        phase = pod.status.phase
        if phase == "Succeeded":
            self._returncode = 0
        elif phase == "Failed":
            self._returncode, self._why = failure_of(pod)
        elif phase == "Pending" and time.monotonic() - self._created > self.startup_timeout_s:
            event = self.pods.events(self.name)
            self._returncode = PENDING_TIMEOUT
            self._why = (f"was not scheduled and started within {self.startup_timeout_s:g} s (pod {self.name})"
                         + (f": {event}" if event else ""))
        return self._returncode

    def describe(self) -> str:
        if self._returncode in (PENDING_TIMEOUT, GONE):
            return self._why
        text = describe_exit(self._returncode) if self._returncode is not None else "is still running"
        return f"{text} (pod {self.name}{'; ' + self._why if self._why else ''})"

    def wait_running(self) -> str:
        """Block until the pod runs; its pod IP. Raises MxbenchError, naming the pod and why, when it
        ends or is not running within the startup timeout."""
        started = None
        if self.pods.pod_manager is not None:  # the operator's own start-up wait, with its event log
            import asyncio

            try:
                asyncio.run(self.pods.pod_manager.await_pod_start(
                    self.pod, schedule_timeout=self.startup_timeout_s, startup_timeout=self.startup_timeout_s,
                    check_interval=STATUS_POLL_S))
            except Exception as exc:  # PodLaunchTimeoutException, PodLaunchFailedException, ApiException
                event = self.pods.events(self.name)
                raise MxbenchError(f"role {self.role.name}: pod {self.name} did not start: {exc}"
                                   + (f"; {event}" if event else "")) from None
        end = self._created + self.startup_timeout_s
        while started is None:
            pod = self.pods.status(self.name, fresh=True)
            if pod is not None and pod.status.phase == "Running" and pod.status.pod_ip:
                return pod.status.pod_ip
            if self.poll() is not None:
                raise MxbenchError(f"role {self.role.name} {self.describe()} before it ran")
            if time.monotonic() > end:
                event = self.pods.events(self.name)
                raise MxbenchError(f"role {self.role.name}: pod {self.name} was not scheduled and started within "
                                   f"{self.startup_timeout_s:g} s" + (f": {event}" if event else ""))
            time.sleep(STATUS_POLL_S)

    # logs

    def _follow(self, echo: bool):
        """Stream the pod's log into roles/<role>.log until it ends (a pod still pending has none)."""
        try:
            while not self._stop.is_set():
                pod = self.pods.status(self.name)
                if pod is not None and pod.status.phase != "Pending":
                    break
                if self.poll() is not None:
                    return
                time.sleep(STATUS_POLL_S)
            if self._stop.is_set():
                return
            self._stream = self.pods.client.read_namespaced_pod_log(
                self.name, self.pods.namespace, container=CONTAINER, follow=True, _preload_content=False)
            inside, pending = False, b""
            with open(self.log_path, "w") as out:
                for chunk in self._stream.stream(decode_content=True):
                    *lines, pending = (pending + chunk).split(b"\n")
                    for raw in lines:
                        line = raw.decode(errors="replace")
                        inside, outside = _in_bundle(line, inside)
                        if not outside:
                            continue
                        out.write(line + "\n")
                        if echo:
                            print(f"[{self.role.name}] {line}", flush=True)
                    out.flush()
                if pending and not inside:
                    out.write(pending.decode(errors="replace") + "\n")
        except Exception as exc:  # a broken stream: the full log is fetched again at the end
            if not self._stop.is_set():
                print(f"mxbench: following the log of pod {self.name} stopped: {exc}", file=sys.stderr)

    def _end_stream(self, wait_s: float):
        """Let the follower finish (its stream ends with the container), then cut it off."""
        self._follower.join(timeout=wait_s)
        self._stop.set()
        if self._stream is not None and self._follower.is_alive():
            try:
                self._stream.close()
            except Exception:
                pass
            self._follower.join(timeout=2)

    def fetch_log(self) -> None:
        """The ended pod's whole log, read again (streams have gaps): ``roles/<role>.log`` without the
        outputs block, whose files (rank logs, telemetry) go into the run folder."""
        try:  # the raw response: the client's own decoding turns the body into "b'...'"
            text = self.pods.client.read_namespaced_pod_log(
                self.name, self.pods.namespace, container=CONTAINER, _preload_content=False).data.decode(
                errors="replace")
        except Exception:
            return  # never started, or gone: what the follower streamed stays
        self._end_stream(wait_s=5)
        lines = text.splitlines()
        try:
            kept, data, skipped = split_log(lines)
        except BundleError as exc:
            kept, data, skipped = without_bundle(lines), None, []
            print(f"mxbench: pod {self.name}: {exc}", file=sys.stderr)
        self.log_path.write_text("".join(f"{line}\n" for line in kept))
        if data:
            unpack(data, self.run_dir, keep=LOCAL_ONLY | {"roles"})
        if skipped:
            print(f"mxbench: pod {self.name} left out of its outputs (too big for the log): {', '.join(skipped)}",
                  file=sys.stderr)

    # stopping

    def terminate(self):
        self._killed = True
        self._end_stream(wait_s=0)
        self.pods.delete(self.name, DELETE_GRACE_S)

    def kill(self):
        self._killed = True
        self.pods.delete(self.name, 0)

    def wait(self, timeout: float):
        end = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < end:
            time.sleep(STATUS_POLL_S)

    def close(self):
        if not self._killed and self._returncode not in (None, PENDING_TIMEOUT, GONE):
            self.fetch_log()  # it ended by itself: its log and outputs are complete
        self._end_stream(wait_s=0)
        self.pods.delete(self.name, 0)

    def record(self) -> Optional[dict]:
        return {"pod": self.name, "namespace": self.pods.namespace}


def _in_bundle(line: str, inside: bool):
    """(inside the outputs block after this line, is this line outside it)."""
    if line == BEGIN:
        return True, False
    if inside:
        return not line.startswith(END), False
    return False, True


def without_bundle(lines):
    kept, inside = [], False
    for line in lines:
        inside, outside = _in_bundle(line, inside)
        if outside:
            kept.append(line)
    return kept


def failure_of(pod):
    """(exit code, why) of a failed pod: its container's exit code, or the pod's own reason."""
    reason = " ".join(filter(None, [pod.status.reason, pod.status.message]))
    for status in pod.status.container_statuses or []:
        terminated = status.state.terminated if status.state else None
        if status.name == CONTAINER and terminated is not None:
            code = terminated.exit_code
            why = reason or (terminated.reason if terminated.reason not in (None, "Error", "Completed") else "")
            return code if code else 1, why
    return 1, reason or "the pod failed before its container ran"


# --- the launcher ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    name: str
    cores: int
    gpus: int
    machine: str


class KubernetesLauncher:
    name = "kubernetes"

    def __init__(self, settings: PodSettings, client, pod_manager=None, base_pod: Optional[dict] = None,
                 on_pods: Optional[Callable] = None):
        """``client``: a kubernetes CoreV1Api; ``pod_manager`` and ``base_pod``: the operator's PodManager
        and its built pod (as a manifest), when run by it; ``on_pods(run_pods)`` learns of each run's
        pods as they are made (the operator's on_kill deletes them)."""
        self.settings, self.client, self.pod_manager = settings, client, pod_manager
        self.base_pod = base_pod or pod_template(settings)
        self.on_pods = on_pods

    # the cluster

    def nodes(self) -> List[Node]:
        from kubernetes.client.exceptions import ApiException

        try:
            if self.settings.nodes:
                found = [self.client.read_node(name) for name in self.settings.nodes]
            else:
                selector = ",".join(f"{k}={v}" for k, v in sorted(self.settings.node_selector.items())) or None
                found = sorted(self.client.list_node(label_selector=selector).items, key=lambda n: n.metadata.name)
                found = [n for n in found if not n.spec.unschedulable and _ready(n)]
        except ApiException as exc:
            raise MxbenchError(f"kubernetes connection {self.settings.conn_id!r}: reading the nodes failed: "
                               f"{api_error(exc)} (mxbench needs get/list on nodes)") from None
        except Exception as exc:  # connection refused, bad kubeconfig
            raise MxbenchError(f"kubernetes connection {self.settings.conn_id!r}: the API server cannot be "
                               f"reached: {exc}") from None
        if not found:
            raise MxbenchError(f"kubernetes connection {self.settings.conn_id!r}: no ready node matches "
                               f"{self.settings.node_selector or 'any selector'}")
        return [Node(n.metadata.name, _quantity_int((n.status.allocatable or {}).get("cpu", "1")),
                     _quantity_int((n.status.allocatable or {}).get(self.settings.gpu_resource, "0")),
                     (n.status.node_info.machine_id if n.status.node_info else "") or n.metadata.name)
                for n in found]

    def version(self) -> str:
        from kubernetes.client import VersionApi

        try:
            return VersionApi(self.client.api_client).get_code().git_version or ""
        except Exception:
            return ""

    def target(self) -> Target:
        from mxbench_train.probe import machine_id

        nodes = self.nodes()
        here = [n.name for n in nodes if n.machine == machine_id()]
        notes = []
        if STANDIN_MARK in self.version():
            notes.append("the Kubernetes cluster is the local Kubernetes stand-in (tests/support/kube_standin.py): "
                         "the real operator and client talk to a loopback API server that runs each pod as a "
                         "process on this machine, with no container runtime, image or overlay network: its "
                         "k8s/ssh gap is the launch path's, not Docker's or the pod network's")
        if here:
            notes.append(f"the nodes {', '.join(here)} are the machine Airflow runs on: they share its cores")
        return Target(self.name, hosts=len(nodes), gpus_per_host=min(n.gpus for n in nodes),
                      on_this_machine=bool(here), notes=tuple(notes))

    # a run

    def execute(self, variant: Variant, data_dir, run_dir, deadline_s: float):
        """Run the variant's plan as pods on the first ``variant.hosts`` nodes. ``kubernetes.json``
        in the run folder names the pods and nodes and times each step."""
        run_dir = Path(run_dir)
        run, attempt = run_id(run_dir), uuid.uuid4().hex[:6]
        steps = Steps(run_dir / "kubernetes.json")
        with steps("setup_s"):
            nodes = self.nodes()[:variant.hosts]
            if len(nodes) < variant.hosts:
                raise MxbenchError(f"variant {variant.id} needs {variant.hosts} nodes; the cluster has {len(nodes)}")
            job = job_for(variant, data_dir=pod_data_dir(self.settings, data_dir), log_dir=RUN_DIR,
                          python=self.settings.python, hosts=[n.name for n in nodes], port=self.settings.port,
                          cores_per_host=cores_per_host({n.name: {"cores": n.cores, "machine": n.machine}
                                                         for n in nodes}))
            plan = plan_roles(job)
        (run_dir / "plan.json").write_text(json.dumps([r.to_dict() for r in plan], indent=1))
        steps.record.update(namespace=self.settings.namespace, run_label=run, attempt=attempt,
                            nodes=[n.name for n in nodes], host_network=variant.host_network or self.settings.host_network)
        pods = RunPods(self.client, self.settings.namespace, run, attempt, self.pod_manager)
        if self.on_pods:
            self.on_pods(pods)
        scheduler_ip = {}

        def start(role: Role, log_path):
            body = role_pod(self.base_pod, role, run=run, attempt=attempt, run_key=run_dir.name, roles=len(plan),
                            settings=self.settings, gpus=variant.gpus_per_worker if role.kind == "worker" else 0,
                            host_network=variant.host_network or self.settings.host_network,
                            scheduler_ip=scheduler_ip.get("ip"), deadline_s=deadline_s)
            handle = RolePod(pods, role, body, log_path, run_dir, self.settings.startup_timeout_s,
                             echo=role.kind == "worker")
            if role.kind == "scheduler":  # the others need its address
                scheduler_ip["ip"] = handle.wait_running()
                steps.record["scheduler_ip"] = scheduler_ip["ip"]
            return handle

        try:
            with steps("roles_s"):
                results = run_plan(plan, run_dir, deadline_s=deadline_s, start=start)
        finally:
            with steps("cleanup_s"):
                pods.delete_all()  # whatever run_plan could not: a pod that failed to start, say
        return plan, results

    def reap(self, run_dir) -> List:
        """Delete every pod an earlier attempt of this run left; [(pod, 0)] deleted."""
        names = delete_run_pods(self.client, self.settings.namespace, f"mxbench.io/run={run_id(run_dir)}")
        return [(name, 0) for name in names]


def _ready(node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))


def _quantity_int(value) -> int:
    """Whole units of a Kubernetes quantity ("2", "1500m" -> 1, "4"): enough for cores and GPUs."""
    text = str(value)
    if text.endswith("m"):
        return max(0, int(text[:-1]) // 1000)
    try:
        return int(float(text))
    except ValueError:
        return 0
