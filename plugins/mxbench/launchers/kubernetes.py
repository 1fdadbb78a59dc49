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
- A pod is untrusted (its image may be a trigger user's choice, its output anything): role logs
  are capped (``RoleLogSink``), long lines cut, the log read as a stream with a byte limit, and its
  outputs unpacked only inside the run folder, never over the launcher's records, within size
  caps (``pod_outputs.unpack``); anything refused fails the run, naming the pod. The image must
  be the connection's or match its ``allowed_images``; hostNetwork needs ``allow_host_network``;
  no service account token is mounted unless asked for.

Pod settings and manifests are pure (``kubernetes_pods``): configuration (the Kubernetes
connection's extra ``mxbench_pod``), checked against ``SETTINGS_SCHEMA``; see the README. With an
MXNet build under test, every pod of a run runs the build's image (``image_for``).
"""
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from mxbench_train.errors import MxbenchError
from mxbench_train.launcher import describe_exit, run_plan
from mxbench_train.pod_outputs import BundleError, OutputsBlock, unpack
from mxbench_train.role_log import CappedLog, lines_of
from mxbench_train.roles import Role, plan_roles

from ..jobs import job_for
from ..variants import Target, Variant
from .base import LOCAL_ONLY, Launched, RoleLogSink, RunBuild, Steps, cores_per_host, write_plan
from .kubernetes_pods import (CONTAINER, DELETE_GRACE_S, RUN_DIR, PodSettings, _quantity_int, _ready, _tolerated,
                              api_error, failure_of, image_for, pod_data_dir, pod_template, role_pod, run_id)

STATUS_POLL_S = 0.25  # one list call per run this often, whatever run_plan's own poll rate
STANDIN_MARK = "mxbench-standin"  # in the stand-in API server's /version
# RolePod.returncode of a pod that did not start in time, that vanished (deleted by someone else,
# its node lost), or whose API server stopped answering: no exit code, describe() says why
START_TIMEOUT, GONE, API_LOST = -1000, -1001, -1002
REQUEST_TIMEOUT_S = 30  # every API call: a hung API server must not hang the run
API_GRACE_S = 60.0
# a pod's log is untrusted: lines longer than this are cut into pieces of it (the reader's pending
# line stays bounded, an endless line included); the fetch after the pod ends reads at most
# FETCH_MAX_BYTES (past it, the outputs block at the end is lost and the streamed log stays)
FETCH_MAX_BYTES = 1 << 30


# --- a run's pods ----------------------------------------------------------------------------

class RunPods:
    """The pods of one attempt of one run: created here, their status read in one list call per
    STATUS_POLL_S for all of them, deleted together. A lost API server is waited for up to
    API_GRACE_S (the pods run on meanwhile) before the run fails with it."""

    def __init__(self, client, namespace: str, run: str, attempt: str, pod_manager=None, should_stop=None):
        self.client, self.namespace, self.run, self.attempt = client, namespace, run, attempt
        self.pod_manager, self.should_stop = pod_manager, should_stop or (lambda: False)
        self.selector = f"mxbench.io/run={run},mxbench.io/attempt={attempt}"
        self._status: Dict[str, object] = {}
        self._read_at = 0.0
        self._listed_ok_at = time.monotonic()
        self._lock = threading.Lock()

    def create(self, body: dict):
        from kubernetes.client.exceptions import ApiException

        if self.should_stop():  # the task was killed before this pod existed: never start it
            raise MxbenchError("the task was killed; no more pods are started")
        try:
            pod = self.client.create_namespaced_pod(namespace=self.namespace, body=body,
                                                    _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as exc:
            raise MxbenchError(f"creating pod {body['metadata']['name']} failed: {api_error(exc)}") from None
        except Exception as exc:  # unreachable API server
            raise MxbenchError(f"creating pod {body['metadata']['name']} failed: {exc}") from None
        self._read_at = 0.0  # the next status() lists again, and sees it
        return pod

    def status(self, name: str, fresh: bool = False):
        """The pod's V1Pod as last listed (None once it is gone)."""
        with self._lock:
            if fresh or time.monotonic() - self._read_at > STATUS_POLL_S:
                try:
                    listed = self.client.list_namespaced_pod(self.namespace, label_selector=self.selector,
                                                             _request_timeout=REQUEST_TIMEOUT_S)
                except Exception as exc:  # keep the last view for a while: an API server restarts
                    if time.monotonic() - self._listed_ok_at > API_GRACE_S:
                        raise ApiLost(f"the Kubernetes API server has not answered for {API_GRACE_S:g} s: "
                                      f"{exc}") from None
                    self._read_at = time.monotonic()
                    return self._status.get(name)
                self._status = {p.metadata.name: p for p in listed.items}
                self._read_at = self._listed_ok_at = time.monotonic()
            return self._status.get(name)

    def events(self, name: str) -> str:
        """The latest warning about a pod (FailedScheduling, ...), as one line; '' when none."""
        try:
            events = self.client.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={name}",
                                                       _request_timeout=REQUEST_TIMEOUT_S)
        except Exception:
            return ""
        warnings = [e for e in events.items if e.type == "Warning"] or events.items
        # the last one listed when the times tie (the API lists events oldest first)
        latest = max(reversed(warnings), key=lambda e: str(e.last_timestamp or e.event_time
                                                           or e.metadata.creation_timestamp or ""), default=None)
        return f"{latest.reason}: {latest.message}" if latest else ""

    def delete(self, name: str, grace: int = DELETE_GRACE_S):
        """Graceful deletion: the pod object goes only once its containers have stopped."""
        try:
            self.client.delete_namespaced_pod(name, self.namespace, grace_period_seconds=grace,
                                              _request_timeout=REQUEST_TIMEOUT_S)
        except Exception as exc:  # gone already (404), or the API server is: activeDeadlineSeconds is the backstop
            if getattr(exc, "status", None) != 404:
                print(f"mxbench: deleting pod {name} failed: {exc}", file=sys.stderr)

    def delete_all(self, wait_s: float = 60.0):
        delete_run_pods(self.client, self.namespace, self.selector, wait_s)


def delete_run_pods(client, namespace: str, selector: str, wait_s: float = 60.0) -> List[str]:
    """Delete every pod the selector matches, gracefully, and wait (up to ``wait_s``) until they are
    gone, so that the next run never shares GPUs or ports with them; the names deleted."""
    from kubernetes.client.exceptions import ApiException

    try:
        names = [p.metadata.name for p in client.list_namespaced_pod(
            namespace, label_selector=selector, _request_timeout=REQUEST_TIMEOUT_S).items]
        if names:
            client.delete_collection_namespaced_pod(namespace, label_selector=selector,
                                                    grace_period_seconds=DELETE_GRACE_S,
                                                    _request_timeout=REQUEST_TIMEOUT_S)
        end = time.monotonic() + wait_s
        while names and wait_s and client.list_namespaced_pod(namespace, label_selector=selector,
                                                   _request_timeout=REQUEST_TIMEOUT_S).items:
            if time.monotonic() > end:
                raise MxbenchError(f"pods {selector} in namespace {namespace} were still there {wait_s:g} s after "
                                   "their deletion")
            time.sleep(0.2)
    except ApiException as exc:
        raise MxbenchError(f"deleting pods {selector} in namespace {namespace} failed: {api_error(exc)}") from None
    except MxbenchError:
        raise
    except Exception as exc:  # unreachable API server
        raise MxbenchError(f"deleting pods {selector} in namespace {namespace} failed: {exc}") from None
    return names


class ApiLost(MxbenchError):
    pass


class RolePod:
    """A role running as a pod: the handle ``run_plan`` drives (see mxbench_train.launcher.LocalProcess).

    A pod must be scheduled within ``startup_timeout_s`` and, once scheduled, run within as much
    again (an image pull), as the KubernetesPodOperator's schedule and startup timeouts do."""

    def __init__(self, pods: RunPods, role: Role, body: dict, log_path: Path, run_dir: Path,
                 startup_timeout_s: float, echo: bool = False):
        self.pods, self.role, self.log_path, self.run_dir = pods, role, Path(log_path), Path(run_dir)
        self.name = body["metadata"]["name"]
        self.pid = None  # nothing local: the pod is found by name and label
        self.startup_timeout_s = startup_timeout_s
        self._returncode: Optional[int] = None
        self._why = ""
        self._created = time.monotonic()
        self._scheduled_at: Optional[float] = None
        self._stop = threading.Event()
        self._stream, self._stopped_by_us = None, False
        self._streamed = 0  # bytes of the log's own lines the follower took (before the cap)
        self.outputs_refused: Optional[str] = None  # why unpacking its outputs refused something
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
        try:
            pod = self.pods.status(self.name)
            if pod is None:
                pod = self.pods.status(self.name, fresh=True)  # not a stale list?
        except ApiLost as exc:
            self._returncode, self._why = API_LOST, str(exc)
            return self._returncode
        if pod is None:
            self._returncode, self._why = GONE, f"its pod {self.name} is gone (deleted, or its node was lost)"
        elif pod.status.phase == "Succeeded":
            self._returncode = 0
        elif pod.status.phase == "Failed":
            self._returncode, self._why = failure_of(pod)
        elif pod.status.phase == "Pending":
            self._check_start_up(pod)
        return self._returncode

    def _check_start_up(self, pod):
        now = time.monotonic()
        scheduled = any(c.type == "PodScheduled" and c.status == "True" for c in pod.status.conditions or [])
        if scheduled and self._scheduled_at is None:
            self._scheduled_at = now
        since, what = (self._scheduled_at, "started after it was scheduled") if scheduled \
            else (self._created, "scheduled")
        if now - since > self.startup_timeout_s:
            event = self.pods.events(self.name)
            self._returncode = START_TIMEOUT
            self._why = (f"was not {what} within {self.startup_timeout_s:g} s (pod {self.name})"
                         + (f": {event}" if event else ""))

    def describe(self) -> str:
        if self._returncode in (START_TIMEOUT, GONE, API_LOST):
            return self._why
        code = self._returncode
        if code is None:
            text = "is still running"
        else:
            text = describe_exit(code)
        return f"{text} (pod {self.name}{'; ' + self._why if self._why else ''})"

    def wait_running(self, deadline: float) -> str:
        """Block until the pod runs, with the operator's own start-up wait (its PodManager) where
        there is one; its pod IP. Raises MxbenchError, naming the pod and why, when it ends or does
        not run in time (the start-up timeouts, or the run's ``deadline``)."""
        if self.pods.pod_manager is not None:
            import asyncio

            budget = max(1, int(min(self.startup_timeout_s, deadline - time.monotonic())))
            try:
                asyncio.run(self.pods.pod_manager.await_pod_start(
                    self.pod, schedule_timeout=budget, startup_timeout=budget, check_interval=STATUS_POLL_S))
            except Exception as exc:  # PodLaunchTimeoutException, PodLaunchFailedException, ApiException
                event = self.pods.events(self.name)
                raise MxbenchError(f"role {self.role.name}: pod {self.name} did not start: {exc}"
                                   + (f"; {event}" if event else "")) from None
        while True:
            pod = self.pods.status(self.name, fresh=True)
            if pod is not None and pod.status.phase == "Running" and pod.status.pod_ip:
                return pod.status.pod_ip
            if self.poll() is not None:
                self.fetch_log()  # its last words, if it ran at all
                raise MxbenchError(f"role {self.role.name} {self.describe()} before it ran")
            if time.monotonic() > deadline:
                raise MxbenchError(f"role {self.role.name}: pod {self.name} was not running when the run's deadline "
                                   "passed")
            time.sleep(STATUS_POLL_S)

    # logs

    def _follow(self, echo: bool):
        """Stream the pod's log into roles/<role>.log (capped) until it ends (a pod still pending has
        none); workers' lines are echoed to the task log, up to half the cap."""
        try:
            while not self._stop.is_set():
                pod = self.pods.status(self.name)
                if pod is None or pod.status.phase != "Pending":
                    break
                time.sleep(STATUS_POLL_S)
            if self._stop.is_set():
                return
            self._stream = self.pods.client.read_namespaced_pod_log(
                self.name, self.pods.namespace, container=CONTAINER, follow=True, _preload_content=False)
            block = OutputsBlock(max_chars=0)  # only to tell the block's lines from the log's: nothing kept
            sink = RoleLogSink(self.log_path, self.role.name, self.role.host, echo)
            try:
                for raw in lines_of(self._stream.stream(decode_content=True)):
                    if not block.feed(raw.decode(errors="replace")) or self._stop.is_set():
                        continue
                    sink.write_line(raw)
            finally:
                self._streamed = sink.written
                sink.close()
        except Exception as exc:  # a broken stream: the full log is fetched again at the end
            if not self._stop.is_set():
                print(f"mxbench: following the log of pod {self.name} stopped: {exc}", file=sys.stderr)

    def _end_stream(self, wait_s: float) -> bool:
        """Let the follower finish (its stream ends with the container), then cut it off; whether it
        has stopped writing."""
        self._follower.join(timeout=wait_s)
        self._stop.set()  # from here on it writes nothing more
        if self._stream is not None and self._follower.is_alive():
            try:
                self._stream.close()
            except Exception:
                pass
        return not self._follower.is_alive()

    def fetch_log(self) -> None:
        """The ended pod's whole log, read again (streams have gaps): the rank logs and telemetry of
        its outputs block go into the run folder, and the rest replaces ``roles/<role>.log`` where it
        holds at least what was streamed (a rotated log may not). Read as a stream, at most
        FETCH_MAX_BYTES, into a capped log: the block (at the end) is kept apart, so the cap never
        cuts it off. Whatever unpacking refuses is kept in ``outputs_refused``: it fails the run."""
        try:  # the raw response: the client's own decoding turns the body into "b'...'"
            response = self.pods.client.read_namespaced_pod_log(
                self.name, self.pods.namespace, container=CONTAINER, _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT_S)
        except Exception:
            return  # never started, or gone: what the follower streamed stays
        follower_done = self._end_stream(wait_s=5)
        fetched = self.log_path.with_name(f".{self.log_path.name}.fetched")
        block, kept, read, complete = OutputsBlock(), 0, 0, True
        try:
            with CappedLog(fetched) as log:
                for raw in lines_of(response.stream(decode_content=True)):
                    read += len(raw) + 1
                    if read > FETCH_MAX_BYTES:
                        complete = False
                        print(f"mxbench: pod {self.name}: its log is over {FETCH_MAX_BYTES} bytes; read no further "
                              "(its outputs block, at the end, is lost)", file=sys.stderr)
                        break
                    if block.feed(raw.decode(errors="replace")):
                        log.write(raw + b"\n")
                        kept += len(raw) + 1
        except Exception as exc:  # the stream broke: what the follower streamed stays
            complete = False
            print(f"mxbench: reading the log of pod {self.name} again failed: {exc}", file=sys.stderr)
        finally:
            response.close()  # not drained when cut short: never back into the pool
        if follower_done and complete and kept >= self._streamed:
            os.replace(fetched, self.log_path)
        else:
            fetched.unlink(missing_ok=True)
        if not complete:
            return
        try:
            data, skipped = block.result()
        except BundleError as exc:
            print(f"mxbench: pod {self.name}: {exc}", file=sys.stderr)
            return
        if data:
            try:
                unpack(data, self.run_dir, keep=LOCAL_ONLY | {"roles", "kubernetes.json"})
            except BundleError as exc:
                self.outputs_refused = f"role {self.role.name}: the outputs of pod {self.name}: {exc}"
                print(f"mxbench: {self.outputs_refused}", file=sys.stderr)
        if skipped:
            print(f"mxbench: pod {self.name} left out of its outputs (too big for the log): {', '.join(skipped)}",
                  file=sys.stderr)

    # stopping

    def terminate(self):
        self._stopped_by_us = True
        self.pods.delete(self.name)
        self._end_stream(wait_s=0)

    def kill(self):
        self._stopped_by_us = True
        self.pods.delete(self.name, grace=1)  # the least grace that is not a force deletion

    def wait(self, timeout: float):
        end = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < end:
            time.sleep(STATUS_POLL_S)

    def close(self):
        if not self._stopped_by_us and self._returncode is not None and self._returncode >= 0:
            self.fetch_log()  # it ended by itself: its log and outputs are complete
        self._end_stream(wait_s=0)
        self.pods.delete(self.name)

    def record(self) -> Optional[dict]:
        return {"pod": self.name, "namespace": self.pods.namespace}


# --- the launcher ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    name: str
    hostname: str  # its kubernetes.io/hostname label, which pods are pinned by
    cores: int
    gpus: int
    machine: str


class KubernetesLauncher:
    name = "kubernetes"

    def __init__(self, settings: PodSettings, client, pod_manager=None, base_pod: Optional[dict] = None,
                 on_pods: Optional[Callable] = None, should_stop: Optional[Callable[[], bool]] = None):
        """``client``: a kubernetes CoreV1Api; ``pod_manager`` and ``base_pod``: the operator's PodManager
        and its built pod (as a manifest), when run by it; ``on_pods(run_pods)`` learns of each run's
        pods before any is made (the operator's on_kill deletes them); once ``should_stop()`` is true
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
                found = [self.client.read_node(name, _request_timeout=REQUEST_TIMEOUT_S) for name in self.settings.nodes]
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
                     (n.status.node_info.machine_id if n.status.node_info else "") or n.metadata.name)
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
                      on_this_machine=bool(here), notes=tuple(notes),
                      host_network=self.settings.allow_host_network)

    # a run

    def build_problem(self, build: Optional[RunBuild]) -> Optional[str]:
        if build is not None and image_for(self.settings, build) is None:
            return (f"kubernetes connection {self.settings.conn_id!r} has no image for {build}: give one in "
                    "mxbench_pod.images (by version or package) or mxbench_pod.image_template")
        return None

    def prepare_build(self, build: Optional[RunBuild]) -> None:
        """Nothing to make: the build's image is the registry's business (docker/train.Dockerfile
        takes the MXNet package as a build argument)."""

    def execute(self, variant: Variant, data_dir, run_dir, deadline_s: float,
                build: Optional[RunBuild] = None) -> Launched:
        """Run the variant's plan as pods on the first ``variant.hosts`` nodes, in ``build``'s image.
        ``kubernetes.json`` in the run folder names the pods, nodes and image and times each step."""
        deadline = time.monotonic() + deadline_s  # pod start-up counts: the deadline is the run's
        problem = self.build_problem(build)
        if problem:  # expand_variants refuses it first
            raise MxbenchError(problem)
        settings = replace(self.settings, image=image_for(self.settings, build))
        run_dir = Path(run_dir)
        run, attempt = run_id(run_dir), uuid.uuid4().hex[:6]
        steps = Steps(run_dir / "kubernetes.json")
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
        write_plan(run_dir, plan)
        steps.record.update(namespace=settings.namespace, image=settings.image, run_label=run, attempt=attempt,
                            nodes=[n.name for n in nodes], host_network=host_network)
        pods = RunPods(self.client, settings.namespace, run, attempt, self.pod_manager, self.should_stop)
        if self.on_pods:
            self.on_pods(pods)
        scheduler_ip, handles = {}, []

        def start(role: Role, log_path):
            body = role_pod(self.base_pod, role, run=run, attempt=attempt, run_key=run_dir.name,
                            settings=settings, gpus=variant.gpus_per_worker if role.kind == "worker" else 0,
                            host_network=host_network, scheduler_ip=scheduler_ip.get("ip"), deadline_s=deadline_s)
            handle = RolePod(pods, role, body, log_path, run_dir, settings.startup_timeout_s,
                             echo=role.kind == "worker")
            handles.append(handle)
            if role.kind == "scheduler":  # the others need its address
                scheduler_ip["ip"] = handle.wait_running(deadline)
                steps.record["scheduler_ip"] = scheduler_ip["ip"]
            return handle

        try:
            with steps("roles_s"):
                results = run_plan(plan, run_dir, deadline_s=deadline - time.monotonic(), start=start)
        except BaseException:
            with steps("cleanup_s"):  # whatever run_plan could not stop: a pod that failed to start, say
                try:
                    pods.delete_all()
                except MxbenchError as exc:  # the run's own error matters more; the pods' deadline stops them
                    print(f"mxbench: {exc}; activeDeadlineSeconds stops them", file=sys.stderr)
            raise
        with steps("cleanup_s"):
            pods.delete_all()
        refused = [h.outputs_refused for h in handles if h.outputs_refused]
        if refused:  # a pod that sends names outside the run folder or past the caps: its numbers are not kept
            raise MxbenchError("; ".join(refused))
        return Launched(plan, results, {"image": settings.image})

    def reap(self, run_dir) -> List:
        """Delete every pod an earlier attempt of this run left; [(pod, 0)] deleted."""
        names = delete_run_pods(self.client, self.settings.namespace, f"mxbench.io/run={run_id(run_dir)}")
        return [(name, 0) for name in names]

