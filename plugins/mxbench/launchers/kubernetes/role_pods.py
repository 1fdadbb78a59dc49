"""A Kubernetes run's pods: ``RunPods`` (one attempt's pods, listed, created and deleted together)
and ``RolePod`` (one role's pod, the handle ``run_plan`` drives), for ``kubernetes.KubernetesLauncher``."""
import os
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

from mxbench.launchers.base import LOCAL_ONLY, RoleLogSink
from mxbench.launchers.kubernetes.pods import CONTAINER, DELETE_GRACE_S, api_error, failure_of
from mxbench.run_folder import RunFolder
from mxbench_train.errors import MxbenchError
from mxbench_train.plan_runner import describe_exit
from mxbench_train.pod_outputs import BundleError, OutputsBlock, unpack
from mxbench_train.role_log import CappedLog, lines_of
from mxbench_train.role_plan import Role

STATUS_POLL_S = 0.25  # one list call per run this often, whatever run_plan's own poll rate
# RolePod.returncode of a pod that did not start in time, that vanished (deleted by someone else,
# its node lost), whose API server stopped answering, or whose node is not Ready (unreachable: its
# link down or throttled to a trickle): no exit code, describe() says why
START_TIMEOUT, GONE, API_LOST, NODE_LOST = -1000, -1001, -1002, -1003
NODE_POLL_S = 2.0  # one node list per run this often: a node's Ready changes on a scale of seconds
FETCH_RETRY_S = 120.0  # how long a log read cut short by its node's link is tried again
FETCH_RETRY_PAUSE_S = 1.0
RETRY = object()  # RolePod._read_log: cut short, read again
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
        self._nodes: Dict[str, object] = {}
        self._nodes_read_at = 0.0
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

    def node_lost(self, name: str) -> Optional[str]:
        """Why node ``name`` is not Ready, naming it and its address, as last listed; None while it is
        (or cannot be read: a lost API server is ``status``'s to tell). The control plane marks a node
        Ready: Unknown once its kubelet has not posted its status for a while (node-monitor-grace-period):
        the node or its link is down, or the link is throttled to a trickle."""
        with self._lock:  # one caller lists; the others read the last list meanwhile, never wait on the API
            due = time.monotonic() - self._nodes_read_at > NODE_POLL_S
            if due:
                self._nodes_read_at = time.monotonic()
        if due:
            try:
                listed = self.client.list_node(_request_timeout=REQUEST_TIMEOUT_S).items
            except Exception:
                listed = None
            if listed is not None:
                with self._lock:
                    self._nodes = {n.metadata.name: n for n in listed}
        with self._lock:
            node = self._nodes.get(name)
        ready = next((c for c in node.status.conditions or [] if c.type == "Ready"), None) if node else None
        if ready is None or ready.status == "True":
            return None
        address = next((a.address for a in node.status.addresses or [] if a.type == "InternalIP"), "no address")
        said = f"{ready.reason}: {ready.message}"
        if ready.status == "Unknown":
            return (f"node {name} ({address}) is unreachable: its kubelet has not posted its status since "
                    f"{ready.last_heartbeat_time} ({said}); the link to the node is down or throttled to a trickle, "
                    "or the node is down")
        return f"node {name} ({address}) is not ready ({said})"

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
    """A role running as a pod: the handle ``run_plan`` drives (see mxbench_train.plan_runner.LocalProcess).

    A pod must be scheduled within ``startup_timeout_s`` and, once scheduled, run within as much
    again (an image pull), as the KubernetesPodOperator's schedule and startup timeouts do."""

    def __init__(self, pods: RunPods, role: Role, body: dict, log_path: Path, run_folder: RunFolder,
                 startup_timeout_s: float, echo: bool = False):
        self.pods, self.role, self.log_path, self.run_folder = pods, role, Path(log_path), run_folder
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
        self.link_fault: Optional[str] = None  # why its node was lost, where that ended it (run_plan's RoleFailed)
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
        lost = self.pods.node_lost(pod.spec.node_name) if pod is not None and pod.spec.node_name else None
        if pod is None:
            self._returncode, self._why = GONE, f"its pod {self.name} is gone (deleted, or its node was lost)"
        elif lost and pod.status.phase in ("Pending", "Running"):  # a run with a node gone measures nothing
            self._returncode, self._why, self.link_fault = NODE_LOST, f"lost its node: {lost} (pod {self.name})", lost
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
        if self._returncode in (START_TIMEOUT, GONE, API_LOST, NODE_LOST):
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
            for end in (self._stream.shutdown, self._stream.close):  # the socket first: close() alone waits
                try:  # for the follower's read, which a pod still running on a lost node may never finish
                    end()
                except Exception:
                    pass
        return not self._follower.is_alive()

    def fetch_log(self) -> None:
        """The ended pod's whole log, read again (streams have gaps): the rank logs and telemetry of
        its outputs block go into the run folder, and the rest replaces ``roles/<role>.log`` where it
        holds at least what was streamed (a rotated log may not). Read as a stream, at most
        FETCH_MAX_BYTES, into a capped log: the block (at the end) is kept apart, so the cap never
        cuts it off. Whatever unpacking refuses is kept in ``outputs_refused``: it fails the run.
        The API server reads the log from the pod's node, over the node's link: a read cut short (or
        refused by a server error) is tried again once the node is Ready, for up to FETCH_RETRY_S;
        nothing of a cut read is kept."""
        give_up = time.monotonic() + FETCH_RETRY_S
        while True:
            block = self._read_log()
            if block is not RETRY:
                break
            if time.monotonic() > give_up:
                print(f"mxbench: pod {self.name}: its log could not be read whole within {FETCH_RETRY_S:g} s "
                      "(its node's link did not come back); what was streamed stays", file=sys.stderr)
                return
            self._wait_for_node(give_up)
        if block is None:
            return
        try:
            data, skipped = block.result()
        except BundleError as exc:
            print(f"mxbench: pod {self.name}: {exc}", file=sys.stderr)
            return
        if data:
            try:
                unpack(data, self.run_folder.path, keep=LOCAL_ONLY | {RunFolder.ROLES})
            except BundleError as exc:
                self.outputs_refused = f"role {self.role.name}: the outputs of pod {self.name}: {exc}"
                print(f"mxbench: {self.outputs_refused}", file=sys.stderr)
        if skipped:
            print(f"mxbench: pod {self.name} left out of its outputs (too big for the log): {', '.join(skipped)}",
                  file=sys.stderr)

    def _read_log(self):
        """One read of the whole log: its OutputsBlock once read whole; RETRY where the read was cut
        short or the server failed (5xx); None where there is nothing to read (never started, gone)
        or it is over FETCH_MAX_BYTES."""
        from kubernetes.client.exceptions import ApiException

        try:  # the raw response: the client's own decoding turns the body into "b'...'"
            response = self.pods.client.read_namespaced_pod_log(
                self.name, self.pods.namespace, container=CONTAINER, _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as exc:
            if (exc.status or 0) >= 500:
                print(f"mxbench: reading the log of pod {self.name} failed: {api_error(exc)}", file=sys.stderr)
                return RETRY
            return None  # never started, or gone: what the follower streamed stays
        except Exception as exc:  # the API server did not answer
            print(f"mxbench: reading the log of pod {self.name} failed: {exc}", file=sys.stderr)
            return RETRY
        follower_done = self._end_stream(wait_s=5)
        fetched = self.log_path.with_name(f".{self.log_path.name}.fetched")
        block, kept, read, outcome = OutputsBlock(), 0, 0, None
        try:
            with CappedLog(fetched) as log:
                for raw in lines_of(response.stream(decode_content=True)):
                    read += len(raw) + 1
                    if read > FETCH_MAX_BYTES:
                        print(f"mxbench: pod {self.name}: its log is over {FETCH_MAX_BYTES} bytes; read no further "
                              "(its outputs block, at the end, is lost)", file=sys.stderr)
                        break
                    if block.feed(raw.decode(errors="replace")):
                        log.write(raw + b"\n")
                        kept += len(raw) + 1
                else:
                    outcome = block
        except Exception as exc:  # the stream broke (its node's link dropped): read again
            outcome = RETRY
            print(f"mxbench: reading the log of pod {self.name} again failed: {exc}", file=sys.stderr)
        finally:
            response.close()  # not drained when cut short: never back into the pool
        if follower_done and outcome is block and kept >= self._streamed:
            os.replace(fetched, self.log_path)
        else:
            fetched.unlink(missing_ok=True)
        return outcome

    def _wait_for_node(self, give_up: float) -> None:
        """Until the pod's node is Ready again (or ``give_up``), and a pause either way."""
        time.sleep(FETCH_RETRY_PAUSE_S)
        try:
            pod = self.pods.status(self.name, fresh=True)
        except ApiLost:  # no node to wait for that can be read: the next read says what it can
            return
        node = pod.spec.node_name if pod is not None else None
        while node and self.pods.node_lost(node) and time.monotonic() < give_up:
            time.sleep(NODE_POLL_S)

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
        try:
            if not self._stopped_by_us and self._returncode is not None and self._returncode >= 0:
                self.fetch_log()  # it ended by itself: its log and outputs are complete
            self._end_stream(wait_s=0)
        finally:  # a fetch that failed (the API server lost) still leaves no pod behind
            self.pods.delete(self.name)

    def record(self) -> Optional[dict]:
        return {"pod": self.name, "namespace": self.pods.namespace}
