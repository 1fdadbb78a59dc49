"""The Kubernetes API's own vocabulary, as the stand-in speaks it: errors as ``Status`` objects,
timestamps, resource quantities, merge and JSON patches, label and field selectors."""
import copy
import re
import time
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation

GIT_VERSION = "v1.34.0-mxbench-standin"
PID_ANNOTATION = "standin.mxbench/pid"
TOKEN = "standin-token"
GPU = "nvidia.com/gpu"


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
