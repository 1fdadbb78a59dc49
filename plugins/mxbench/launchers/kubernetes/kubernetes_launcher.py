"""The Kubernetes launcher: the role plan as pods, one pod per role.

Same plan as local and ssh (``plan_roles``), driven by the same ``run_plan``; here a role is a pod
(``RolePod``; a run's pods are ``RunPods``: both in ``role_pods``) on a node of the cluster.
The DAG's run task (``mxbench.airflow_glue.operators``) builds a KubernetesPodOperator for a Kubernetes run and
hands this launcher that operator's Kubernetes client, its ``PodManager`` and the base pod its
``build_pod_request_obj`` made (pod template, labels, namespace); nothing here imports Airflow.

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
- A pod is untrusted (its image may be a trigger user's choice, its output anything): role logs
  are capped (``RoleLogSink``), long lines cut, the log read as a stream with a byte limit, and its
  outputs unpacked only inside the run folder, never over the launcher's records, within size
  caps (``pod_outputs.unpack``); anything refused fails the run, naming the pod. The image must
  be the connection's or match its ``allowed_images``; hostNetwork needs ``allow_host_network``;
  no service account token is mounted unless asked for.

Pod settings and manifests are pure (``pods``): configuration (the Kubernetes
connection's extra ``mxbench_pod``), checked against ``SETTINGS_SCHEMA``; see docs/launchers.md. With an
MXNet build under test, every pod of a run runs the build's image (``image_for``).
"""
import json
import sys
import time
import uuid
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence

from mxbench.builds.record import RunBuild
from mxbench.launchers.base import Launched, StepTimes, cores_per_host, write_plan
from mxbench.launchers.kubernetes.pods import (
    RUN_DIR,
    PodSettings,
    _quantity_int,
    _ready,
    _tolerated,
    api_error,
    image_for,
    pod_data_dir,
    pod_network_of,
    pod_network_read,
    pod_template,
    role_pod,
    run_label,
)
from mxbench.launchers.kubernetes.role_pods import REQUEST_TIMEOUT_S, RolePod, RunPods, delete_run_pods
from mxbench.matrix.jobs import job_for
from mxbench.matrix.variants import Target, Variant
from mxbench.run_folder import RunFolder
from mxbench_train.errors import MxbenchError
from mxbench_train.localhost import network_namespace
from mxbench_train.plan_runner import run_plan
from mxbench_train.pod_outputs import NETWORK_READINGS
from mxbench_train.role_plan import Role, plan_roles

STANDIN_MARK = "mxbench-standin"  # in the stand-in API server's /version


# --- the launcher ----------------------------------------------------------------------------

def network_readings(run_folder: RunFolder) -> List[dict]:
    """The pods' readings of their own network, as unpacked from their outputs (within its caps)."""
    readings = []
    for path in sorted((run_folder.path / NETWORK_READINGS).glob("*.json")):
        try:
            readings.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return readings


@dataclass(frozen=True)
class Node:
    name: str
    hostname: str  # its kubernetes.io/hostname label, which pods are pinned by
    cores: int
    gpus: int
    machine: str
    pod_network: Optional[str] = None  # what its annotations say of the pod network (pods.pod_network_of)


class KubernetesLauncher:
    name = "kubernetes"

    def __init__(self, settings: PodSettings, client, pod_manager=None, base_pod: Optional[dict] = None,
                 on_pods: Optional[Callable] = None, should_stop: Optional[Callable[[], bool]] = None):
        """``client``: a kubernetes CoreV1Api; ``pod_manager`` and ``base_pod``: the pod operator's PodManager
        and its built pod (as a manifest), when run by the run task; ``on_pods(run_pods)`` learns of each
        run's pods before any is made (the run task's on_kill deletes them); once ``should_stop()`` is true
        no pod is created any more."""
        self.settings, self.client, self.pod_manager = settings, client, pod_manager
        self.base_pod = base_pod or pod_template(settings)
        self.on_pods, self.should_stop = on_pods, should_stop

    # the cluster

    def nodes(self) -> List[Node]:
        """The nodes runs use, in order: ``nodes`` as given, else every ready, schedulable node that
        the node selector matches and whose taints the pods tolerate, by name."""
        from kubernetes.client.exceptions import ApiException

        try:
            if self.settings.nodes:
                found = [self.client.read_node(name, _request_timeout=REQUEST_TIMEOUT_S)
                         for name in self.settings.nodes]
            else:
                selector = ",".join(f"{k}={v}" for k, v in sorted(self.settings.node_selector.items())) or None
                found = sorted(self.client.list_node(label_selector=selector, _request_timeout=REQUEST_TIMEOUT_S).items,
                               key=lambda n: n.metadata.name)
                found = [n for n in found if not n.spec.unschedulable and _ready(n)
                         and all(_tolerated(t, self.settings.tolerations) for t in n.spec.taints or [])]
        except ApiException as exc:
            raise MxbenchError(f"kubernetes connection {self.settings.conn_id!r}: reading the nodes failed: "
                               f"{api_error(exc)} (mxbench needs get/list on nodes)") from None
        except Exception as exc:  # connection refused, bad kubeconfig
            raise MxbenchError(f"kubernetes connection {self.settings.conn_id!r}: the API server cannot be "
                               f"reached: {exc}") from None
        if not found:
            raise MxbenchError(f"kubernetes connection {self.settings.conn_id!r}: no ready node matches "
                               f"{self.settings.node_selector or 'any selector'} with taints its pods tolerate")
        return [Node(n.metadata.name, (n.metadata.labels or {}).get("kubernetes.io/hostname", n.metadata.name),
                     _quantity_int((n.status.allocatable or {}).get("cpu", "1")),
                     _quantity_int((n.status.allocatable or {}).get(self.settings.gpu_resource, "0")),
                     (n.status.node_info.machine_id if n.status.node_info else "") or n.metadata.name,
                     pod_network_of(n.metadata.annotations or {}, len(found)))
                for n in found]

    def cores_per_node(self, variant: Variant, nodes: Sequence[Node]) -> int:
        """Cores each node gives this job, for its thread counts: nodes that are one machine share
        it, and pods with a CPU limit get no more than that (more threads would be throttled)."""
        cores = cores_per_host({n.name: (n.cores, n.machine) for n in nodes})
        limit = self.settings.limits.get("cpu") or self.settings.requests.get("cpu")
        if limit:
            cores = min(cores, max(1, _quantity_int(limit)) * -(-variant.workers // variant.hosts))
        return cores

    def version(self) -> str:
        from kubernetes.client import VersionApi

        try:
            return VersionApi(self.client.api_client).get_code().git_version or ""
        except Exception:
            return ""

    def target(self) -> Target:
        from mxbench_train.localhost import machine_id

        nodes = self.nodes()
        here = [n.name for n in nodes if n.machine == machine_id()]
        notes, stand_in = [], STANDIN_MARK in self.version()
        if stand_in:
            notes.append("the Kubernetes cluster is the local Kubernetes stand-in (the package standins/kube, run as "
                         "python -m standins.kube): "
                         "the real operator and client talk to a loopback API server that runs each pod as a "
                         "process on this machine (in a network namespace of its own where it has a pod "
                         "network), with no container runtime or image: its k8s/ssh gap is the launch path's "
                         "and the pod network's, not Docker's")
        if here:
            notes.append(f"the nodes {', '.join(here)} are the machine Airflow runs on: they share its cores")
        notes += [f"pod network {network}" for network in dict.fromkeys(n.pod_network for n in nodes if n.pod_network)]
        return Target(self.name, hosts=len(nodes), gpus_per_host=min(n.gpus for n in nodes),
                      on_this_machine=bool(here), notes=tuple(notes), stand_in=stand_in,
                      host_network=self.settings.allow_host_network)

    # a run

    def quiet_probe(self, variant: Variant, seconds: float) -> Dict[str, dict]:
        """Not looked at: a pod sees only its own ``/proc``, and nothing here reads a node's load
        without running on it, so the record says so rather than guessing."""
        from mxbench.hosts.quiet_gate import NOT_CHECKED_K8S

        raise MxbenchError(NOT_CHECKED_K8S)

    def build_problem(self, build: Optional[RunBuild]) -> Optional[str]:
        if build is not None and build.commit and image_for(self.settings, build) is None:
            return (f"kubernetes connection {self.settings.conn_id!r} has no image of commit {build.commit} "
                    f"for {build}: "
                    f"an image by version ({build.version}) or package is a release's, another MXNet; give one in "
                    f"mxbench_pod.images keyed by the commit, or an mxbench_pod.image_template that gives the "
                    f"manifest's image tagged src-{build.commit} (docker/train-source.Dockerfile)")
        if build is not None and image_for(self.settings, build) is None:
            return (f"kubernetes connection {self.settings.conn_id!r} has no image for {build}: give one in "
                    "mxbench_pod.images (by version or package) or mxbench_pod.image_template")
        return None

    def prepare_build(self, build: Optional[RunBuild]) -> None:
        """Nothing to make: the build's image is the registry's business (docker/train.Dockerfile
        takes the MXNet package as a build argument)."""

    def execute(self, variant: Variant, data_dir, run_folder: RunFolder, deadline_s: float,
                build: Optional[RunBuild] = None) -> Launched:
        """Run the variant's plan as pods on the first ``variant.hosts`` nodes, in ``build``'s image.
        ``kubernetes.json`` in the run folder names the pods, nodes and image and times each step."""
        deadline = time.monotonic() + deadline_s  # pod start-up counts: the deadline is the run's
        problem = self.build_problem(build)
        if problem:  # expand_variants refuses it first
            raise MxbenchError(problem)
        settings = replace(self.settings, image=image_for(self.settings, build))
        run, attempt = run_label(run_folder), uuid.uuid4().hex[:6]
        steps = StepTimes(run_folder.step_times("kubernetes"))
        host_network = variant.host_network or settings.host_network
        if host_network and not settings.allow_host_network:  # expand_variants refuses it first
            raise MxbenchError(f"variant {variant.id} runs its pods on the host network, which kubernetes connection "
                               f"{settings.conn_id!r} does not allow (mxbench_pod.allow_host_network)")
        with steps("setup_s"):
            nodes = self.nodes()[:variant.hosts]
            if len(nodes) < variant.hosts:
                raise MxbenchError(f"variant {variant.id} needs {variant.hosts} nodes; the cluster has {len(nodes)}")
            job = job_for(variant, data_dir=pod_data_dir(settings, data_dir), log_dir=RUN_DIR,
                          python=settings.python, hosts=[n.hostname for n in nodes], port=settings.port,
                          cores_per_host=self.cores_per_node(variant, nodes),
                          split_host_gpus=False)  # a pod sees only its own GPUs, as 0..k-1
            plan = plan_roles(job)
        write_plan(run_folder, plan)
        steps.record.update(namespace=settings.namespace, image=settings.image, run_label=run, attempt=attempt,
                            nodes=[n.name for n in nodes], host_network=host_network)
        pods = RunPods(self.client, settings.namespace, run, attempt, self.pod_manager, self.should_stop)
        if self.on_pods:
            self.on_pods(pods)
        scheduler_ip, handles = {}, []

        def start(role: Role, log_path):
            body = role_pod(self.base_pod, role, run=run, attempt=attempt, run_key=run_folder.path.name,
                            settings=settings, gpus=variant.gpus_per_worker if role.kind == "worker" else 0,
                            host_network=host_network, scheduler_ip=scheduler_ip.get("ip"), deadline_s=deadline_s)
            handle = RolePod(pods, role, body, log_path, run_folder, settings.startup_timeout_s,
                             echo=role.kind == "worker")
            handles.append(handle)
            if role.kind == "scheduler":  # the others need its address
                scheduler_ip["ip"] = handle.wait_running(deadline)
                steps.record["scheduler_ip"] = scheduler_ip["ip"]
            return handle

        try:
            with steps("roles_s"):
                results = run_plan(plan, run_folder.path, deadline_s=deadline - time.monotonic(), start=start)
        except BaseException:
            with steps("cleanup_s"):  # whatever run_plan could not stop: a pod that failed to start, say
                try:
                    pods.delete_all()
                except MxbenchError as exc:  # the run's own error matters more; the pods' deadline stops them
                    print(f"mxbench: {exc}; activeDeadlineSeconds stops them", file=sys.stderr)
            raise
        steps.record["pod_network"] = pod_network_read(network_readings(run_folder), network_namespace())
        with steps("cleanup_s"):
            pods.delete_all()
        refused = [h.outputs_refused for h in handles if h.outputs_refused]
        if refused:  # a pod that sends names outside the run folder or past the caps: its numbers are not kept
            raise MxbenchError("; ".join(refused))
        return Launched(plan, results, {"image": settings.image})

    def reap(self, run_folder: RunFolder) -> List:
        """Delete every pod an earlier attempt of this run left; [(pod, 0)] deleted."""
        names = delete_run_pods(self.client, self.settings.namespace, f"mxbench.io/run={run_label(run_folder)}")
        return [(name, 0) for name in names]
