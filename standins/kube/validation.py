"""What the stand-in's API server checks in a pod before it takes it: the strict schema (with
``kubernetes_validate``), the server-side checks a schema cannot express, what the stand-in cannot
run, and the defaults the API server writes in."""
import re

from .api import invalid, parse_quantity

SCHEMA_VERSION = "1.34"  # the kubernetes_validate schema set used (newest <= the version served)


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


def validate(obj, strict):
    """422 Invalid for a pod the API server would refuse; the schema is checked only when ``strict``."""
    name = obj["metadata"].get("name", "")
    if strict:
        import kubernetes_validate
        try:
            kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            raise invalid(name, [(field_path(error.path), f"Invalid value: {error.message}")]) from None
    problems = semantic_problems(obj)
    if problems:
        raise invalid(name, problems)


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
            problems.append(("metadata.labels", f'Invalid value: "{key}": {problem}'))
        if not isinstance(value, str) or (value and (len(value) > 63 or not LABEL_NAME.match(value))):
            problems.append(("metadata.labels", f'Invalid value: "{value}": a valid label must be an empty '
                                                 f"string or consist of alphanumeric characters, '-', '_' or "
                                                 f"'.', and must start and end with an alphanumeric character"))
    for key in meta.get("annotations") or {}:
        if problem := label_key_problem(key):
            problems.append(("metadata.annotations", f'Invalid value: "{key}": {problem}'))
    groups = [("spec.containers", spec.get("containers") or []),
              ("spec.initContainers", spec.get("initContainers") or [])]
    for group, containers in groups:
        for i, container in enumerate(containers):
            where = f"{group}[{i}]"
            if not DNS_LABEL.match(str(container.get("name", ""))) or len(container.get("name", "")) > 63:
                problems.append((f"{where}.name",
                                 f'Invalid value: "{container.get("name")}": a lowercase RFC 1123 label'))
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
            problems.append((f"spec.volumes[{i}].name",
                             f'Invalid value: "{volume.get("name")}": a lowercase RFC 1123 label'))
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
