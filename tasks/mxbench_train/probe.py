"""What a training host offers, asked on the host itself (the SSH launcher's ``target()``).

Binding the address the roles will bind proves the host owns it: ps-lite binds
``DMLC_PS_ROOT_URI`` and ``DMLC_NODE_HOST`` itself and fails late otherwise.
"""
import os
import sys

from .errors import MxbenchError
from .localhost import free_port, machine_id, network_namespace
from .telemetry import gpu_environment


def probe(address=None) -> dict:
    gpu = gpu_environment()
    port = None
    if address:
        try:
            port = free_port(address)
        except OSError as exc:
            raise MxbenchError(f"cannot bind {address} on this host ({exc.strerror}): ps-lite's roles bind "
                               "it, so it must be an address this host owns") from None
    return {"cores": os.cpu_count() or 1, "gpus": len(gpu["gpus"]) if gpu["available"] else 0,
            "gpu_reason": None if gpu["available"] else gpu["reason"], "port": port, "machine": machine_id(),
            "network": network_namespace(),
            "python": sys.version.split()[0]}
