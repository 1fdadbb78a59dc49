"""The kind of machine a number was measured on: its fingerprint. Pure (hashlib, json).

Two identical machines are one kind: host name, Python and MXNet are left out (the MXNet version
is what a history compares). The results store keys its environments by it; the contention
thresholds (``results.contention``) are looked up by it, from a run's ``environment`` or from
the machine facts a quiet probe reports.
"""
import hashlib
import json
from typing import Tuple


def fingerprint(environment: dict) -> Tuple[str, dict]:
    """(fingerprint, facts) of a run's ``environment`` (its metrics.json, or a quiet probe's
    ``machine``): the hardware a number depends on."""
    gpu = environment.get("gpu") or {}
    names = [g.get("name") for g in gpu.get("gpus") or []] if gpu.get("available") else []
    facts = {"gpu_model": " + ".join(sorted(set(filter(None, names)))) or None, "gpu_count": len(names),
             "driver": gpu.get("driver") if names else None, "cuda": gpu.get("cuda") if names else None,
             "cpu_model": environment.get("cpu_model"), "cpu_count": environment.get("cpu_count")}
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]
    host_class = (f"gpu: {facts['gpu_count']}x {facts['gpu_model']}" if names
                  else f"cpu: {facts['cpu_model'] or 'unknown'} x{facts['cpu_count'] or '?'}")
    return digest, {**facts, "host_class": host_class}
