"""The stand-in's object store: its pods, their events and status, and the API operations on them.

One lock guards everything (the scheduler and the kubelet take it too); ``changed`` wakes whoever
waits for any object or log to change (a followed log), ``wake_control`` the scheduler loop."""
import copy
import json
import os
import secrets
import shutil
import signal
import threading
import time
import uuid
from pathlib import Path

from .api import (
    EVENT_FIELDS,
    POD_FIELDS,
    ApiError,
    invalid,
    json_patch,
    merge_patch,
    not_found,
    parse_field_selector,
    parse_label_selector,
    parse_quantity,
    rfc3339,
)
from .validation import apply_defaults, check_supported, validate


def extended_limits(container):
    """{resource: whole number} for the extended resources (e.g. nvidia.com/gpu) a container limits."""
    limits = (container.get("resources") or {}).get("limits") or {}
    return {k: int(parse_quantity(v)) for k, v in limits.items() if "/" in k and not k.startswith("kubernetes.io/")}


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

    def signal_container(self, signum, grace):
        """Signal the container's process group; SIGKILL it after ``grace`` seconds."""
        if signum and self.proc and not self.finished:
            try:
                os.killpg(self.proc.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass
        self.kill_at = time.monotonic() + grace


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


def node_ip(node):
    return node["status"]["addresses"][0]["address"]


class ObjectStore:
    """Pods and events, as the API server keeps them; one lock guards everything."""

    def __init__(self, root, validate=True):
        self.root = Path(root)
        self.validate = validate
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)      # any object or log changed
        self.wake_control = threading.Condition(self.lock)  # the scheduler loop has work
        self.resource_version = 1
        self.pods = {}             # (namespace, name) -> Pod, in creation order
        self.events = []
        self.stopping = False      # the stand-in is stopping: no container starts, followed logs end

    # ---- bookkeeping (callers hold the lock)

    def _bump(self):
        self.resource_version += 1
        self.changed.notify_all()
        return str(self.resource_version)

    def touch(self, pod):
        self._refresh_status(pod)
        pod.obj["metadata"]["resourceVersion"] = self._bump()

    def record_event(self, pod, reason, message, kind="Normal", component="kubelet", container=False):
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
        validate(obj, self.validate)
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
            self.touch(pod)
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
                raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown "
                                                            "format - accepted media types include: "
                                                            "application/json-patch+json, "
                                                            "application/merge-patch+json, "
                                                            "application/strategic-merge-patch+json")
            if merged.get("spec") != pod.obj["spec"]:
                raise invalid(name, [("spec", "Forbidden: pod updates may not change fields other than "
                                              "`spec.containers[*].image`, `spec.activeDeadlineSeconds`, "
                                              "`spec.tolerations` (the stand-in: labels and annotations only)")])
            meta = merged.get("metadata") or {}
            candidate = copy.deepcopy(pod.obj)
            for key in ("labels", "annotations"):
                candidate["metadata"][key] = meta.get(key) or {}
            validate(candidate, self.validate)
            pod.obj["metadata"]["labels"] = candidate["metadata"]["labels"]
            pod.obj["metadata"]["annotations"] = candidate["metadata"]["annotations"]
            self.touch(pod)
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
                pod.signal_container(signal.SIGKILL if grace == 0 else None, grace)
            return copy.deepcopy(pod.obj)
        meta["deletionTimestamp"] = rfc3339(time.time() + grace)
        meta["deletionGracePeriodSeconds"] = grace
        if not pod.runner_active:  # nothing runs: the object goes at once
            self.remove(pod)
            return copy.deepcopy(pod.obj)
        pod.deleting = True
        self.record_event(pod, "Killing", f"Stopping container {pod.container['name']}", container=True)
        pod.signal_container(signal.SIGKILL if grace == 0 else signal.SIGTERM, grace)
        self.touch(pod)
        return copy.deepcopy(pod.obj)

    def remove(self, pod):
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
