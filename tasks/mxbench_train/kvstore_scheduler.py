"""The scheduler role of a ``dist_*`` kvstore, run straight from libmxnet.

``import mxnet`` with ``DMLC_ROLE=scheduler`` runs the scheduler and exits, but first imports the
whole package, numpy and every operator's generated Python function (0.7 CPU s more to start,
``benchmarks/kvstore_scheduler.py``); the scheduler only registers nodes and holds barriers in
ps-lite, in C++, and never calls back into Python. This makes the same C calls on the same
library (found by MXNet's own ``libinfo``) without the Python package: ``MXKVStoreCreate("dist")``,
``MXKVStoreRunServer`` (which returns once every node has finalized), then ``MXNotifyShutdown``,
as MXNet's exit hook does. A server role still imports mxnet: it unpickles the workers' optimizer.
"""
import ctypes
import importlib.util
from pathlib import Path

from .errors import MxbenchError

_CONTROLLER = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


def library_path() -> str:
    """The libmxnet that ``import mxnet`` would load here: MXNet's ``libinfo.find_lib_path``, read
    from its file (importing it as ``mxnet.libinfo`` would import the whole package first)."""
    spec = importlib.util.find_spec("mxnet")
    if spec is None or not spec.submodule_search_locations:
        raise MxbenchError("kvstore scheduler: mxnet is not installed in this python")
    libinfo_file = Path(list(spec.submodule_search_locations)[0]) / "libinfo.py"
    libinfo_spec = importlib.util.spec_from_file_location("_mxbench_mxnet_libinfo", libinfo_file)
    if libinfo_spec is None or libinfo_spec.loader is None:
        raise MxbenchError(f"kvstore scheduler: cannot read {libinfo_file}")
    libinfo = importlib.util.module_from_spec(libinfo_spec)
    libinfo_spec.loader.exec_module(libinfo)
    try:
        return libinfo.find_lib_path()[0]
    except RuntimeError as exc:  # its message lists the paths it tried
        raise MxbenchError(f"kvstore scheduler: {exc}") from None


def run() -> None:
    """Run the scheduler role that ``DMLC_*`` in the environment describes, until the job ends."""
    path = library_path()
    try:
        lib = ctypes.CDLL(path, ctypes.RTLD_LOCAL)
    except OSError as exc:
        raise MxbenchError(f"kvstore scheduler: cannot load {path}: {exc}") from None
    lib.MXGetLastError.restype = ctypes.c_char_p

    def check(status: int, call: str) -> None:
        if status != 0:
            # MXNet's message, without the C++ stack trace it appends: a launcher quotes a role's last line
            message = lib.MXGetLastError().decode(errors="replace").split("Stack trace:")[0].strip()
            raise MxbenchError(f"kvstore scheduler: {call} failed: {message}")

    handle = ctypes.c_void_p()
    check(lib.MXKVStoreCreate(b"dist", ctypes.byref(handle)), "MXKVStoreCreate")
    controller = _CONTROLLER(lambda *_: None)  # a scheduler gets no commands; kept alive while it runs
    check(lib.MXKVStoreRunServer(handle, controller, None), "MXKVStoreRunServer")
    check(lib.MXNotifyShutdown(), "MXNotifyShutdown")
