"""The stand-in's kubelet: runs each pod's container as a local process (paths translated, ``$(VAR)``
and field references expanded), records its output as the pod's log and reports its end.

What is real: each pod's processes run in a cgroup v2 of their own, as a real kubelet puts them
(``mxbench_train.cgroup.RoleCgroup``, removed when the container ended): a pod reading
``/proc/self/cgroup`` and its ``cpu.pressure`` reads its own, as on a cgroup v2 node. Simplified:
no cgroup namespace (the pod sees its full cgroup path, not ``/``), no resource limits in it, and
where this host cannot make cgroups (not root, no v2 mount) the pod stays in the kubelet's own and
is told so (``MXBENCH_CGROUP_UNAVAILABLE``, which a real kubelet never sets): it reads the host-wide
PSI then, and says why.

Each pod's processes run in the pod's network namespace, or its node's for ``hostNetwork``
(``network``: made before the process starts, removed once the container ended), entered with
``nsenter --net`` (which execs the command: the pid is the command's). The command is looked up on
the container's PATH first, so a missing one is still a StartError, as with a container runtime.
"""
import math
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from mxbench_train.cgroup import RoleCgroup
from mxbench_train.plan_runner import entering

from .api import PID_ANNOTATION, parse_quantity
from .objects import node_ip

LOG_PIECE = 16 << 10  # the CRI's longest log entry: longer lines are stored in pieces


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


def image_folder(image):
    """The local folder an image stands for (an absolute path to an existing folder), else None."""
    path = Path(image)
    return path if path.is_absolute() and path.is_dir() else None


class Kubelet:
    """Runs the containers of the pods the scheduler bound; one runner thread per pod."""

    def __init__(self, store, root, network):
        self.store = store
        self.root = Path(root)
        self.network = network
        self.runners = []

    def start(self, pod):
        """Run the pod's container in a runner thread of its own."""
        runner = threading.Thread(target=self._run_container, args=(pod,), daemon=True,
                                  name=f"standin-pod-{pod.name}")
        self.runners.append(runner)
        runner.start()

    def _run_container(self, pod):
        """The kubelet's part for one pod: its network, the process, its output, its end."""
        try:
            self._start_container(pod)
        finally:
            self.network.leave(pod)

    def _start_container(self, pod):
        with self.store.lock:
            if pod.deleting or pod.deadline_exceeded or self.store.stopping:
                return self._finish(pod, None, "ContainerCannotRun", "the pod was stopped before it started")
            try:
                argv, env, cwd = self._launch_plan(pod)
            except FileNotFoundError as error:  # a hostPath that must exist does not: stays Pending
                self.store.record_event(pod, "FailedMount", f"MountVolume.SetUp failed: {error}", "Warning")
                pod.runner_active = False
                return self.store.touch(pod)
            self.store.record_event(pod, "Pulled", f'Container image "{pod.container.get("image", "")}" '
                                                   f'already present on machine', container=True)
        try:
            enter = self.network.enter(pod, pod.node, pod.obj["spec"].get("hostNetwork", False))
        except (RuntimeError, subprocess.SubprocessError) as error:  # an ip call failed or hung
            with self.store.lock:
                message = f"failed to set up the pod's network: {error}"
                self.store.record_event(pod, "FailedCreatePodSandBox", message, "Warning")
                return self._finish(pod, 128, "StartError", message)
        cgroup = RoleCgroup.make(f"pod-{pod.name}")
        if cgroup.folder is None:  # no cgroup here: the pod would read the kubelet's as its own
            env.update(cgroup.env())
        try:
            self._run_process(pod, argv, env, cwd, cgroup, enter)
        finally:
            cgroup.remove()

    def _run_process(self, pod, argv, env, cwd, cgroup, enter):
        try:
            if enter:  # nsenter would only exit 127 on a command it cannot find: look it up as exec would
                program = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=env.get("PATH", os.defpath))
                program = os.path.join(cwd, program) if program else None
                if program is None or not os.access(program, os.X_OK):
                    raise FileNotFoundError(2, os.strerror(2), argv[0])
                argv = enter + [program] + argv[1:]
            proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=entering(cgroup))
        except OSError as error:
            with self.store.lock:
                message = (f"failed to create containerd task: failed to start container process: "
                           f"exec: {argv[0]!r}: {error.strerror}")
                self.store.record_event(pod, "Failed", f"Error: {message}", "Warning", container=True)
                return self._finish(pod, 128, "StartError", message)
        with self.store.lock:
            pod.proc, pod.started_at = proc, time.time()
            pod.obj["metadata"].setdefault("annotations", {})[PID_ANNOTATION] = str(proc.pid)
            with (self.root / "pids.log").open("a") as f:
                f.write(f"{pod.namespace}/{pod.name} {proc.pid}\n")
            self.store.record_event(pod, "Created", f"Created container: {pod.container['name']}", container=True)
            self.store.record_event(pod, "Started", f"Started container {pod.container['name']}", container=True)
            if pod.deleting or pod.deadline_exceeded or self.store.stopping:
                os.killpg(proc.pid, signal.SIGKILL)
            self.store.touch(pod)
        reader = threading.Thread(target=self._record_output, args=(pod, proc.stdout), daemon=True)
        reader.start()
        code = proc.wait()
        try:  # the container's end takes everything left in it along, as a PID namespace would
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        reader.join(5)
        with self.store.lock:
            code = code if code >= 0 else 128 - code
            self._finish(pod, code, "Completed" if code == 0 else "Error", None)

    def _finish(self, pod, exit_code, reason, message):
        pod.exit_code = 1 if exit_code is None else exit_code
        pod.term_reason, pod.term_message = reason, message
        pod.finished_at, pod.finished, pod.runner_active, pod.kill_at = time.time(), True, False, None
        if pod.removed:
            return
        self.store.touch(pod)
        self.store.wake_control.notify_all()  # its GPUs are free again
        if pod.deleting:
            self.store.remove(pod)

    def _record_output(self, pod, stream):
        # in pieces of at most LOG_PIECE bytes, as the CRI writes a container's long lines: an
        # endless line is served as it comes, not held back until its newline
        for line in iter(lambda: stream.readline(LOG_PIECE), b""):
            arrived = time.time_ns()
            with self.store.lock:
                pod.log.append((arrived, line))
                self.store.changed.notify_all()
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
