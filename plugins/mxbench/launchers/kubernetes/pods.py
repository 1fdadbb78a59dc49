"""The Kubernetes launcher's pure part: its settings and every manifest it sends.

Nothing here talks to an API server: ``kubernetes_launcher.py`` and ``role_pods.py`` do, with
these. Pod settings are configuration (the Kubernetes connection's extra ``mxbench_pod``), checked
against ``SETTINGS_SCHEMA``; the image of a run is the connection's, or with an MXNet build under
test, the build's (``images``, ``image_template``), never another one.
"""
import copy
import fnmatch
import hashlib
import json
import posixpath
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional, Sequence

from mxbench.builds.mxnet_builds import image_names_commit
from mxbench.builds.record import RunBuild
from mxbench.run_folder import RunFolder
from mxbench_train.errors import MxbenchError
from mxbench_train.role_plan import Role

CONTAINER = "base"  # the KubernetesPodOperator's container name: its pod template merges into it
RUN_DIR = "/mxbench/run"  # an emptyDir in each pod: the role's working folder and --log-dir
DATA_MOUNT = "/mxbench/data"
GPU_RESOURCE = "nvidia.com/gpu"
DELETE_GRACE_S = 3


SETTINGS_SCHEMA = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "image": {"type": "string", "minLength": 1},
        "allowed_images": {"type": "array", "items": {"type": "string", "minLength": 1}},
        # the image of each MXNet build under test: by version or package, else from the template
        "images": {"type": "object", "additionalProperties": {"type": "string", "minLength": 1}},
        "image_template": {"type": "string", "minLength": 1},
        "allow_host_network": {"type": "boolean"},
        "automount_service_account_token": {"type": "boolean"},
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
    pod_template_file: Optional[str] = None
    env: Dict[str, str] = field(default_factory=dict)  # added to every role's environment (NCCL_*, ...)
    labels: Dict[str, str] = field(default_factory=dict)
    annotations: Dict[str, str] = field(default_factory=dict)
    # the kubernetes_image param may name only these (fnmatch patterns) besides the connection's image
    allowed_images: Sequence[str] = ()
    allow_host_network: bool = False  # hostNetwork pods (settings.host_network, -hostnet variants)
    automount_service_account_token: bool = False  # role pods need no API access
    images: Dict[str, str] = field(default_factory=dict)  # an MXNet build's image: "1.9.0" -> "registry/x:1.9.0"
    # else this, formatted with {mxnet_version}, {package} and {image} (the versions manifest's image name)
    image_template: Optional[str] = None

    @property
    def local_data_root(self) -> str:
        """Where the Airflow worker sees the data volume's files."""
        return self.data.get("local_path") or self.data["host_path"]


def pod_settings(conn_id: str, extra: dict, namespace: Optional[str] = None,
                 image: Optional[str] = None) -> PodSettings:
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
                           "(image, data volume, resources, ...); see docs/launchers.md")
    try:
        jsonschema.validate(raw, SETTINGS_SCHEMA)
    except jsonschema.ValidationError as exc:
        field_name = ".".join(["mxbench_pod", *map(str, exc.absolute_path)])
        # the schema's rule, not jsonschema's message: that quotes the value, which may be a secret
        rule = exc.message if exc.validator in ("additionalProperties", "required") else \
            f"breaks the rule {exc.validator}: {json.dumps(exc.validator_value)[:200]}"
        raise MxbenchError(f"{where}: {field_name}: {rule}") from None
    template = raw.get("image_template")
    if template:
        try:
            template.format(mxnet_version="1", package="mxnet==1", image="x")
        except (KeyError, IndexError, ValueError) as exc:
            raise MxbenchError(f"{where}: mxbench_pod.image_template {template[:200]!r} is not a template of "
                               f"{{mxnet_version}}, {{package}} and {{image}}: {type(exc).__name__} {exc}") from None
    settings = {k: v for k, v in raw.items() if k != "image"}
    if image and image != raw.get("image") and not image_allowed(image, raw.get("allowed_images") or ()):
        # a trigger user's choice of image runs code on the cluster's nodes: only what the admin allowed
        allowed = ", ".join(map(repr, raw.get("allowed_images") or ())) or "none besides mxbench_pod.image"
        raise MxbenchError(f"{where}: the kubernetes_image param {image[:200]!r} is not allowed: "
                           f"mxbench_pod.allowed_images ({allowed}) does not match it")
    image = image or raw.get("image")
    if not image:
        raise MxbenchError(f"{where}: no training image: set mxbench_pod.image or the kubernetes_image param")
    if raw.get("host_network") and not raw.get("allow_host_network"):
        raise MxbenchError(f"{where}: mxbench_pod.host_network is true but mxbench_pod.allow_host_network is not: "
                           "pods on the node's network need both")
    if namespace and "namespace" not in settings:
        settings["namespace"] = namespace
    for key in ("requests", "limits"):
        if key in settings:
            settings[key] = {k: str(v) for k, v in settings[key].items()}
    for key in ("allowed_images", "image_pull_secrets", "nodes", "tolerations"):
        if key in settings:
            settings[key] = tuple(settings[key])
    return PodSettings(conn_id=conn_id, image=image, **settings)


def image_for(settings: PodSettings, build: Optional[RunBuild]) -> Optional[str]:
    """The image a run's pods run: the settings' without a build; with one, its entry in
    ``images`` (by package, else version), else ``image_template`` filled in; None when neither
    gives one (the build is then refused, never run in another image).

    A build of an MXNet ``commit`` runs only an image of that commit: its entry in ``images`` keyed
    by the commit, else the template's image when its tag is ``src-<commit>``; an image by package or
    version (``1.9.1`` for a wheel ``1.9.1+g<commit>``) is a release's, which would measure another
    MXNet, so there is none (None)."""
    if build is None:
        return settings.image
    if build.commit:
        image = settings.images.get(build.commit)
        if image or not settings.image_template or ("{image}" in settings.image_template and not build.image):
            return image
        image = settings.image_template.format(mxnet_version=build.version, package=build.package, image=build.image)
        return image if image_names_commit(image, build.commit) else None
    image = settings.images.get(build.package) or settings.images.get(build.version)
    if image or not settings.image_template:
        return image
    if "{image}" in settings.image_template and not build.image:
        return None  # "registry/" would only fail to pull, after the start-up timeout
    return settings.image_template.format(mxnet_version=build.version, package=build.package, image=build.image)


def image_allowed(image: str, patterns: Sequence[str]) -> bool:
    """Whether ``image`` matches one of the fnmatch-style ``patterns`` (case-sensitive; ``*``
    matches ``/`` too, so a pattern should spell out the registry host and path)."""
    return any(fnmatch.fnmatchcase(image, pattern) for pattern in patterns)


# --- pods: pure ------------------------------------------------------------------------------

def run_label(run_folder: RunFolder) -> str:
    """The ``mxbench.io/run`` label value of one run of one DAG run: a hash of its folder (not
    Airflow's run id), the same on every attempt."""
    path = run_folder.path
    return hashlib.sha256(f"{path.parent.name}/{path.name}".encode()).hexdigest()[:16]


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
    spec = {"restartPolicy": "Never", "containers": [container], "volumes": volumes,
            "automountServiceAccountToken": settings.automount_service_account_token}
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


def role_pod(base: dict, role: Role, *, run: str, attempt: str, run_key: str, settings: PodSettings,
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
    container = next(c for c in spec["containers"] if c["name"] == CONTAINER)
    container["image"] = settings.image  # the run's: the build's, where there is one
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
    # the settings decide, whatever a pod template file says: a role needs no API token
    spec["automountServiceAccountToken"] = settings.automount_service_account_token
    if host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    return pod


def api_error(exc) -> str:
    try:
        message = json.loads(exc.body).get("message")
    except (TypeError, ValueError, AttributeError):
        message = None
    return f"HTTP {exc.status} {exc.reason}" + (f": {message}" if message else "")


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


STANDIN_POD_NETWORK = "standin.mxbench/pod-network"  # the stand-in says which pod network it made
FLANNEL_BACKEND = "flannel.alpha.coreos.com/backend-type"  # flanneld's, on every node it runs on


def pod_network_of(annotations: Dict[str, str], nodes: int) -> Optional[str]:
    """What a node's annotations say of the pod network, as "<kind>: <how>" ("vxlan overlay between
    2 nodes: ..."), None when they say nothing: the stand-in's own annotation, else flannel's."""
    said = annotations.get(STANDIN_POD_NETWORK)
    if said:
        return said
    backend = annotations.get(FLANNEL_BACKEND)
    return f"{backend} overlay between {nodes} nodes: flannel's {backend} backend (the nodes' annotations)" \
        if backend else None


def pod_network_read(readings: Sequence, ours: Optional[str]) -> Optional[str]:
    """One line of what a run's pods read of their own network (``mxbench_train pod-role`` writes each
    pod's ``pod-network/<name>.json``: its network namespace and interfaces), per network stack seen:
    "pod network" (namespaces of their own), "host network" (a stack holding the overlay's VXLAN
    device: the node's) or "none" (the namespace ``ours``, the Airflow task's: the machine's own
    stack), then its interfaces, driver and MTU. The pods wrote it: only well-formed readings count,
    and names are cut short; None without any."""
    stacks: Dict[str, str] = {}
    for reading in readings:
        if not isinstance(reading, dict):
            continue
        netns, ifs = reading.get("netns"), reading.get("interfaces")
        if not isinstance(netns, str) or not isinstance(ifs, list) or \
                not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in ifs):
            continue
        stacks[netns[:40]] = ", ".join(f"{_printable(i['name'], 15)} ({_printable(i.get('driver'), 16)}, "
                                       f"MTU {_printable(i.get('mtu'), 6)})" for i in ifs[:8]) or "lo only"
    seen = Counter((("none: the machine's own stack, the Airflow task's" if netns == ours
                     else "host network" if "(vxlan," in interfaces else "pod network"), interfaces)
                   for netns, interfaces in stacks.items())
    return "; ".join(f"{kind}: {count} network namespace(s), each with {interfaces}"
                     for (kind, interfaces), count in seen.items()) or None


def _printable(value, width: int) -> str:
    return re.sub(r"[^ -~]", "?", str(value))[:width]


def _tolerated(taint, tolerations) -> bool:
    """Whether pods with ``tolerations`` (dicts, as in a pod spec) may be scheduled despite ``taint``."""
    if taint.effect not in ("NoSchedule", "NoExecute"):
        return True
    for tol in tolerations:
        exists = tol.get("operator") == "Exists"
        if (tol.get("key") in (None, taint.key) if exists else tol.get("key") == taint.key) \
                and tol.get("effect") in (None, taint.effect) and (exists or tol.get("value") == taint.value):
            return True
    return False


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
