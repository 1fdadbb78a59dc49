"""The SSH launcher: the role plan over SSH, each role on its host.

Hosts are Airflow SSH connections. The DAG task resolves them (``mxbench.airflow_glue.connections``, the
provider's SSHHook) into plain ``SshHost`` settings and a ``connect`` callable, so nothing here
imports Airflow or sees a key or password. Each role runs on its host under ``python -m
mxbench_train supervise``, in its own session, with its environment inline in one quoted command
(sshd drops ``environment=`` requests without AcceptEnv). The supervisor kills the role's group
when its channel closes: a launcher that stops, dies or loses the connection leaves nothing
running there. ``run_plan`` drives the roles exactly as it drives local processes.

On each host: ``<workdir>/data/<data set>/`` (copied over SFTP, skipped when its manifest already
matches) or a shared ``mxbench_data_dir``, and ``<workdir>/runs/<dag run>/<run>/<conn id>/``, the
roles' working folder there (one per host, even where homes are one NFS mount and every host has
the same work folder), whose rank logs and telemetry come back into the local run folder at the
end; then it is removed (a failed run's stays where the connection says ``mxbench_keep_failed_runs``).

An MXNet build under test runs on every host with its own interpreter: the connection's
``mxbench_builds`` entry for it, or a venv ``<workdir>/builds/...`` that the host makes itself at
``prepare_build`` (``mxbench_train.host_build``: pip there, a lock, a stamp written last) and each
run finds again in the command that makes its folder (no extra round trip).

A host is not trusted (a compromised GPU host must not become a compromised Airflow worker), nor
are its other local users: the work folder (default ``~/.cache/mxbench``) must be the SSH
user's own and closed to others (``mxbench_train.host_workdir`` checks it there before each
run); no interpreter runs with a host-writable folder on ``sys.path`` (``-P``, or ``-I`` before
Python 3.11, which also hides a ``pip install --user``); what comes back is capped in bytes and
files and lands only as new plain files in the run folder (``transfer.fetch_outputs``); streamed
role logs are capped.
"""
import json
import posixpath
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from mxbench.builds.record import RunBuild
from mxbench.launchers.base import Launched, StepTimes, cores_per_host, write_plan
from mxbench.launchers.ssh.commands import (
    LINK_SILENCE_S,
    SshHost,
    build_command,
    builds_problem,
    command_error,
    isolation_flag,
    link_lost,
    peer_silent,
    probe_command,
    quiet_command,
    reap_command,
    remote_data_dir,
    remove_command,
    role_command,
    setup_command,
    sha256_command,
    version_command,
)
from mxbench.launchers.ssh.remote_role import RemoteRole
from mxbench.launchers.ssh.transfer import (
    ByteBudget,
    FetchProblems,
    answer_max_bytes,
    check_shared,
    fetch_outputs,
    fetch_run_max_bytes,
    local_manifest,
    stage,
)
from mxbench.matrix.jobs import job_for
from mxbench.matrix.variants import Target, Variant
from mxbench.results import answers
from mxbench.run_folder import RunFolder
from mxbench_train.errors import MxbenchError
from mxbench_train.plan_runner import LaunchInterrupted, run_plan
from mxbench_train.role_plan import plan_roles

COMMAND_TIMEOUT_S = 120.0  # a setup command (probe, reap, mkdir) on a host
BUILD_TIMEOUT_S = 1800.0  # pip, making a build's venv on a host: it may download a GPU wheel of 1 GB
BUILD_WAIT_S = BUILD_TIMEOUT_S + 600 + 300 + 60  # and host_build's venv and import-check limits, and some slack
ANSWER_CHUNK = 1 << 16
ANSWER_POLL_S = 0.2  # how often a command's stderr and deadline are looked at while its stdout is quiet
KEEPALIVE_S = 5  # paramiko's keepalive: an idle connection still has data in flight to go unanswered
# the fetch of a run's files is tried again while a link that went silent comes back within this
# long of its first loss (a switch rebooting, a cable reseated), a few seconds apart
FETCH_RETRY_S = 120.0
FETCH_RETRY_PAUSE_S = 2.0


class SftpLost(MxbenchError):
    """An SFTP session that failed; ``link_down``: its host did not answer a new connection then."""

    def __init__(self, message: str, link_down: bool):
        super().__init__(message)
        self.link_down = link_down


# --- the launcher -------------------------------------------------------------------------------

class SshLauncher:
    name = "ssh"

    def __init__(self, hosts: Sequence[SshHost]):
        if not hosts:
            raise MxbenchError("the ssh launcher has no hosts: list SSH connection ids in the "
                               "ssh_connections param")
        seen = {}
        for host in hosts:  # its default address and those of its other links (mxbench_links)
            for address in dict.fromkeys([host.address, *(address for address, _ in host.links.values())]):
                if address in seen:
                    raise MxbenchError(f"ssh connections {seen[address]!r} and {host.conn_id!r} are the same "
                                       f"address {address}: each host needs its own (ps-lite binds it)")
                seen[address] = host.conn_id
        self.hosts = list(hosts)
        self._clients: Dict[str, object] = {}
        self._isolation: Dict[tuple, str] = {}  # (conn_id, interpreter): its isolation_flag, asked once

    # connections

    def _client(self, host: SshHost):
        client = self._clients.get(host.conn_id)
        if client is not None and client.get_transport() is not None and client.get_transport().is_active():
            return client
        self._clients[host.conn_id] = client = connect(host)
        return client

    def close(self):
        for client in self._clients.values():
            try:
                client.close()
            except Exception:
                pass
        self._clients.clear()

    def _run(self, host: SshHost, command: str, what: str, timeout: float = COMMAND_TIMEOUT_S) -> str:
        """Run a setup command on ``host``; its stdout, or an error naming host and cause."""
        code, out, err = run_command(self._client(host), command, timeout)
        if code != 0:
            raise MxbenchError(f"{host}: {what} failed: "
                               f"{command_error(code, err, host, self._isolation.get((host.conn_id, host.python)))}")
        return out

    def _flag(self, host: SshHost) -> str:
        """How every mxbench_train command on ``host`` runs isolated (isolation_flag of its version)."""
        key = (host.conn_id, host.python)  # a build's interpreter may be another Python
        if key not in self._isolation:
            version = self._probe(host, version_command(host), "asking the training interpreter its version",
                                  schema=answers.VERSION)
            self._isolation[key] = isolation_flag(version)
        return self._isolation[key]

    def _probe(self, host: SshHost, command: str, what: str, timeout: float = COMMAND_TIMEOUT_S,
               schema: Optional[dict] = None):
        """The JSON answer on the last line ``command`` prints on ``host``, checked against ``schema``
        (``results.answers``): an error naming the host and what is wrong with it."""
        out = self._run(host, command, what, timeout)
        try:
            answer = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise MxbenchError(f"{host}: {what} printed no result: {out[-300:]!r}") from None
        wrong = answers.problem(schema, answer) if schema else None
        if wrong:
            raise MxbenchError(f"{host}: {what} answered malformed: {wrong}")
        return answer

    def _on_each(self, hosts, step) -> dict:
        """``step(host)`` on every host at once ({conn_id: result}); the first host's error wins."""
        with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
            futures = {h.conn_id: pool.submit(step, h) for h in hosts}
        return {conn_id: future.result() for conn_id, future in futures.items()}

    # the launcher interface

    def target(self) -> Target:
        from mxbench_train.localhost import machine_id, network_namespace

        try:
            probes = self._on_each(self.hosts, lambda h: self._probe(h, probe_command(h, isolation=self._flag(h)),
                                                                     "probing the training env", schema=answers.PROBE))
        finally:
            self.close()
        here = [h.conn_id for h in self.hosts if probes[h.conn_id].get("machine") == machine_id()]
        # a host with a network namespace of its own reaches the others through a link
        ours = network_namespace()
        same_stack = [c for c in here if probes[c].get("network") in (None, ours)]
        own_stack = [c for c in here if c not in same_stack]
        notes = [f"the hosts {', '.join(same_stack)} are the machine Airflow runs on (addresses of its own): no "
                 "network was crossed there, and they share its cores"] if same_stack else []
        notes += [f"the hosts {', '.join(own_stack)} are the machine Airflow runs on, each in a network namespace "
                  "of its own: their traffic crossed the link between the namespaces, and they share its "
                  "cores"] if own_stack else []
        networks = {h.network: [g.conn_id for g in self.hosts if g.network == h.network] for h in self.hosts
                    if h.network}
        notes += [f"the network of {', '.join(conn_ids)}: {network}" for network, conn_ids in networks.items()]
        notes += [f"host key checking is OFF for {h.conn_id} (its connection says no_host_key_check)"
                  for h in self.hosts if not h.checks_host_key]
        links = [name for name in self.hosts[0].links if all(name in h.links for h in self.hosts)]
        return Target(self.name, hosts=len(self.hosts), gpus_per_host=min(p["gpus"] for p in probes.values()),
                      on_this_machine=bool(here), notes=tuple(notes), links=tuple(links))

    def quiet_probe(self, variant: Variant, seconds: float) -> Dict[str, dict]:
        """The run's hosts (the first ``variant.hosts``) over the same ``seconds``, each by
        ``python -m mxbench_train quiet-probe`` over its connection: {conn_id: reading}. Ours there
        are the probe and its SSH session; every other process on the host is foreign."""
        hosts = self.hosts[:variant.hosts]
        try:
            return self._on_each(hosts, lambda h: self._probe(
                h, quiet_command(h, seconds, self._flag(h)), "looking at how busy the host is",
                timeout=seconds + COMMAND_TIMEOUT_S))
        finally:
            self.close()

    def build_problem(self, build: Optional[RunBuild]) -> Optional[str]:
        """Why some host cannot run ``build`` (None: all can): see ``builds_problem``."""
        problems = [p for p in (builds_problem(h, build) for h in self.hosts) if p]
        return "; ".join(problems) or None

    def prepare_build(self, build: Optional[RunBuild]) -> None:
        """Make ``build``'s venv on every host that makes its own (first use; a stamp check after),
        before any run: a host whose pip fails names its cause once, at expand time."""
        if build is None:
            return
        try:
            self._on_each(self.hosts, lambda h: self._build_python(h, build, h.workdir))
        finally:
            self.close()

    def _build_python(self, host: SshHost, build: RunBuild, workdir: str) -> str:
        """The interpreter ``build`` runs with on ``host``: its ``mxbench_builds`` entry, else its venv
        there, made on first use (``mxbench_train.host_build``: under a lock, a stamp written last,
        a failed install removed and named)."""
        problem = builds_problem(host, build)
        if problem:
            raise MxbenchError(problem)
        if host.python_for(build):
            return host.python_for(build)
        made = self._probe(host, build_command(host, build, workdir, self._flag(host), BUILD_TIMEOUT_S),
                           f"making the venv of {build}", timeout=BUILD_WAIT_S)
        python = self._venv_python(host, made, f"making the venv of {build}")
        if made.get("made") is True and isinstance(made.get("seconds"), (int, float)):
            print(f"mxbench: {host}: made the venv of {build} in {made['seconds']:.0f} s: {python}", file=sys.stderr)
        return python

    def _venv_python(self, host: SshHost, answer, what: str) -> str:
        """The venv interpreter host_build names (a host's word: checked), which runs with the
        isolation of ``host.python``, the Python it was made from."""
        python = answer.get("python") if isinstance(answer, dict) else None
        if not (isinstance(python, str) and python.startswith("/") and python.isprintable()):
            raise MxbenchError(f"{host}: {what} printed no interpreter path: {str(answer)[:300]!r}")
        self._isolation[(host.conn_id, python)] = self._flag(host)
        return python

    def execute(self, variant: Variant, data_dir, run_folder: RunFolder, deadline_s: float,
                build: Optional[RunBuild] = None) -> Launched:
        """Run the variant's plan on the first ``variant.hosts`` hosts, over their link ``variant.link``
        (its addresses and rate; SSH itself keeps to each connection's host), with ``build``'s
        interpreter on each. ``ssh.json`` in the run folder says how long each step took, which
        interpreter each host ran and which hosts the data was copied to."""
        hosts = [h.over(variant.link) for h in self.hosts[:variant.hosts]]
        remote: Dict[str, str] = {}  # conn_id: this run's folder there, once made (what fetch cleans up)
        steps, ran, interrupted = StepTimes(run_folder.step_times("ssh")), False, False
        try:
            with steps("setup_s"):  # connect, checked folders, the build, cores and a port: all hosts at once
                ready = self._on_each(hosts, lambda h: self._setup(h, run_folder, remote, build, steps))
            # ~ resolved there, and the build's interpreter
            hosts = [replace(h, workdir=ready[h.conn_id]["workdir"], python=ready[h.conn_id]["build_python"])
                     for h in hosts]
            steps.record["pythons"] = {h.conn_id: h.python for h in hosts}
            run_folder.remote.write_text(json.dumps(
                [{"conn_id": h.conn_id, "address": h.address, "run_dir": remote[h.conn_id]} for h in hosts], indent=1))
            probes = {conn_id: r["probe"] for conn_id, r in ready.items()}
            with steps("data_s"):
                data_arg, steps.record["data_copied_to"] = self._stage_data(hosts, Path(data_dir))
            job = job_for(variant, data_dir=data_arg, log_dir=".", python=hosts[0].python,
                          pythons={h.address: h.python for h in hosts}, hosts=[h.address for h in hosts],
                          port=probes[hosts[0].conn_id]["port"],
                          cores_per_host=cores_per_host({c: (p["cores"], p.get("machine")) for c, p in probes.items()}))
            plan = plan_roles(job)
            write_plan(run_folder, plan)
            by_address = {h.address: h for h in hosts}

            def start(role, log_path):
                host = by_address[role.host]
                command = role_command(host, role, remote[host.conn_id], self._flag(host))
                return RemoteRole(self._client(host), host, role, command, log_path, echo=role.kind == "worker")

            with steps("roles_s"):
                results = run_plan(plan, run_folder.path, deadline_s=deadline_s, start=start)
            ran = True
        except LaunchInterrupted:
            interrupted = True  # the task is being killed: no time to fetch, Airflow SIGKILLs soon
            raise
        finally:
            try:
                if not interrupted:
                    # a failed run's rank logs tell why: bring back what there is, keep the first error
                    with steps("fetch_s"):
                        self._fetch(hosts, remote, run_folder, run_ok=ran)
            except Exception:
                if ran:
                    raise
            finally:
                self.close()
        rates = [h.link_bits for h in hosts]
        return Launched(plan, results, {"python": hosts[0].python},
                        link_bits=min(rates) if len(hosts) > 1 and all(rates) else None)

    def _setup(self, host: SshHost, run_folder: RunFolder, remote: Dict[str, str], build: Optional[RunBuild] = None,
               steps: Optional[StepTimes] = None) -> dict:
        """The host's work folder checked and a fresh folder for its part of the run made (recorded
        in ``remote``), the build's venv found in the same command (expand_variants made it), then
        what the host offers with the build's interpreter: {workdir, run_dir, python (its version),
        build_python, probe}."""
        flag = self._flag(host)
        problem = builds_problem(host, build)
        if problem:
            raise MxbenchError(problem)
        venv_build = build if build is not None and not host.python_for(build) else None
        what = "preparing the run folder" + (f" and finding the venv of {build} (expand_variants makes it: clear "
                                             "that task to make it again)" if venv_build else "")
        folders = self._probe(host, setup_command(host, run_folder, flag, venv_build), what, schema=answers.WORK_FOLDER)
        remote[host.conn_id] = folders["run_dir"]
        if venv_build:
            python = self._venv_python(host, folders.get("build"), what)
            if steps is not None and isinstance(folders["build"].get("seconds"), (int, float)):
                steps.record[f"build_check_s.{host.conn_id}"] = folders["build"]["seconds"]  # on the host
        else:
            python = host.python_for(build) if build else host.python
        builder = replace(host, python=python)
        probe = self._probe(builder, probe_command(builder, host.address, self._flag(builder)),
                            "probing the training env", schema=answers.PROBE_WITH_PORT)
        return {**folders, "build_python": python, "probe": probe}

    def _stage_data(self, hosts, data_dir: Path):
        """Put the data set on every host: (the path the trainer gets, the same on each host;
        the hosts it had to be copied to)."""
        shared = {h.data_dir for h in hosts}
        if len(shared) > 1:
            raise MxbenchError(f"hosts {', '.join(h.conn_id for h in hosts)} of one job must all set the same "
                               f"mxbench_data_dir or none; they set {sorted(map(str, shared))}")
        want = local_manifest(data_dir)
        copied = []
        for host in hosts:
            with self._sftp(host, "copying the data set") as sftp:
                if host.data_dir:
                    check_shared(sftp, host, host.data_dir, want)
                elif stage(sftp, remote_data_dir(host, data_dir), data_dir, want):
                    copied.append(host.conn_id)
        if hosts[0].data_dir:  # one shared folder: its content checked once, on the first host
            sums = self._probe(hosts[0], sha256_command(hosts[0], hosts[0].data_dir), "checksumming the shared data",
                               schema=answers.CHECKSUMS)
            wrong = [name for name in want if sums.get(name) != want[name]["sha256"]]
            if wrong:
                raise MxbenchError(f"{hosts[0]}: the shared data folder {hosts[0].data_dir} (mxbench_data_dir) holds "
                                   f"other versions of {', '.join(wrong)} than this DAG run prepared")
        if hosts[0].data_dir:
            return hosts[0].data_dir, copied
        # relative to the host's run folder (<workdir>/runs/<dag run>/<run>/<conn id>), so hosts with
        # different workdirs share one command line
        return posixpath.join("..", "..", "..", "..", "data", data_dir.name), copied

    def _fetch(self, hosts, remote, run_folder: RunFolder, run_ok: bool = True):
        """Every host's rank logs and telemetry (a host that fails does not stop the others), then
        the run's folder there is removed, unless the run failed and the connection keeps failed
        runs (mxbench_keep_failed_runs). A folder that could not be fetched whole stays; one whose
        only problem is names mxbench never takes goes (nothing more there is ever fetched)."""
        errors, budget = [], ByteBudget(fetch_run_max_bytes())
        for host in hosts:
            if host.conn_id not in remote:
                continue  # it never got a run folder
            try:
                self._fetch_host(host, remote[host.conn_id], run_folder, budget)
            except MxbenchError as exc:
                errors.append(exc)
                if not getattr(exc, "whole", False):
                    continue
            if run_ok or not host.keep_failed_runs:
                self._remove_run_folder(host, remote[host.conn_id])
        if errors:
            raise errors[0]

    def _fetch_host(self, host: SshHost, remote_dir: str, run_folder: RunFolder, budget: ByteBudget) -> None:
        """One host's files of the run. A link that goes down meanwhile (the host does not answer a
        new connection) is waited for: the fetch starts again on a new connection while the link
        comes back within FETCH_RETRY_S, skipping the files it brought already (each one lands
        whole or not at all: ``transfer._fetch_file``)."""
        done: set = set()
        give_up = None
        while True:
            try:
                with self._sftp(host, "fetching the run's logs") as sftp:
                    return fetch_outputs(sftp, remote_dir, run_folder, str(host), budget, done)
            except FetchProblems:
                raise
            except MxbenchError as exc:  # a reconnection refused while the link is still down counts too
                if give_up is None and not getattr(exc, "link_down", False):
                    raise
                give_up = give_up or time.monotonic() + FETCH_RETRY_S
                if time.monotonic() >= give_up:
                    raise MxbenchError(f"{exc} (the link did not come back within {FETCH_RETRY_S:g} s)") from None
                print(f"mxbench: {exc}: trying again ({len(done)} file(s) fetched already)", file=sys.stderr)
                self._forget(host)
                time.sleep(FETCH_RETRY_PAUSE_S)

    def _forget(self, host: SshHost) -> None:
        """Drop ``host``'s connection: the next call connects anew."""
        client = self._clients.pop(host.conn_id, None)
        if client is not None:
            try:
                client.close()
            except Exception:
                pass

    def _remove_run_folder(self, host: SshHost, folder: str):
        """A folder left behind costs only disk: a failure to remove it is a warning, not the run's."""
        try:
            self._run(host, remove_command(folder), f"removing the run folder {folder}")
        except MxbenchError as exc:
            print(f"mxbench: warning: {exc}", file=sys.stderr)

    @contextmanager
    def _sftp(self, host: SshHost, what: str):
        import paramiko

        sftp, peer = None, None
        try:
            transport = self._client(host).get_transport()
            peer = transport.getpeername()
            # not client.open_sftp(): its channel waits up to an hour for a host that went silent
            chan = transport.open_session(timeout=COMMAND_TIMEOUT_S)
            chan.settimeout(LINK_SILENCE_S)  # each request's answer
            chan.invoke_subsystem("sftp")
            sftp = paramiko.SFTPClient(chan)
            yield sftp
        except (OSError, EOFError, paramiko.SSHException, paramiko.SFTPError) as exc:
            # paramiko says a dropped connection in more ways than one (a read cut short by the silence
            # bound, then the file's close reading the rest as a "garbage packet"): ask the link each time
            silent = peer_silent(peer) if peer else None
            why = silent or (link_lost(exc) if isinstance(exc, (TimeoutError, EOFError)) else f"{exc}")
            raise SftpLost(f"{host}: {what} over SFTP failed: {why or type(exc).__name__}", bool(silent)) from None
        finally:
            if sftp is not None:
                sftp.close()

    def reap(self, run_folder: RunFolder) -> List:
        """Kill what an earlier attempt of this run left on its hosts; [(role@conn, pid)] hit."""
        try:
            recorded = json.loads(run_folder.remote.read_text())
        except (OSError, ValueError):
            return []  # that attempt never got to a host
        by_conn = {h.conn_id: h for h in self.hosts}
        killed = []
        try:
            for entry in recorded:
                host = by_conn.get(entry["conn_id"])
                if host is None:
                    print(f"mxbench: cannot reap run {run_folder.path.name} on {entry['conn_id']}: not among this "
                          "run's ssh connections", file=sys.stderr)
                    continue
                try:
                    out = self._run(host, reap_command(host, entry["run_dir"], self._flag(host)),
                                    "reaping an earlier attempt")
                except MxbenchError as exc:
                    print(f"mxbench: {exc}", file=sys.stderr)
                    continue
                try:
                    killed += [(f"{role}@{host.conn_id}", pid) for role, pid in json.loads(out.splitlines()[-1])]
                except (ValueError, IndexError, TypeError):
                    print(f"mxbench: {host}: reaping printed no result: {out[-300:]!r}", file=sys.stderr)
        finally:
            self.close()
        return killed


# --- SSH helpers ---------------------------------------------------------------------------------

def connect(host: SshHost):
    """An authenticated client for ``host``, or an error that says which host and why."""
    import paramiko

    if host.connect is None:
        raise MxbenchError(f"{host}: no way to connect (the connection was not resolved)")
    try:
        client = host.connect()
    except paramiko.BadHostKeyException:
        cause = ("its host key does not match the one the connection expects: refused (the host was "
                 "reinstalled, or someone is in between)")
    except paramiko.AuthenticationException:
        cause = "authentication failed: check the connection's login and key"
    except paramiko.SSHException as exc:
        if "known_hosts" in str(exc):
            cause = ("its host key is unknown: put it in the connection's extra host_key (or known_hosts); "
                     "no_host_key_check: true turns checking off")
        else:
            cause = f"SSH error: {exc}"
    except (OSError, EOFError) as exc:
        # paramiko's NoValidConnectionsError keeps each address's own error in .errors
        inner = next(iter(getattr(exc, "errors", {}).values()), exc)
        cause = f"cannot connect: {getattr(inner, 'strerror', None) or exc or type(exc).__name__}"
    else:
        watch_the_link(client)
        return client
    raise MxbenchError(f"{host}: {cause}")


def watch_the_link(client) -> None:
    """End ``client``'s connection once what it sends goes unacknowledged for LINK_SILENCE_S: the
    keepalive keeps data in flight on an idle connection, TCP_USER_TIMEOUT (Linux) drops the
    connection whose data no one acknowledges. A connection through a proxy command is no socket of
    ours: it keeps the kernel's own timeouts."""
    transport = client.get_transport()
    transport.set_keepalive(KEEPALIVE_S)
    sock = getattr(transport, "sock", None)
    if isinstance(sock, socket.socket) and hasattr(socket, "TCP_USER_TIMEOUT") and sock.family != socket.AF_UNIX:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(LINK_SILENCE_S * 1000))


def run_command(client, command: str, timeout: float = COMMAND_TIMEOUT_S, max_bytes: Optional[int] = None):
    """(exit status, stdout, stderr) of a short command; -1 when no status came back. A host's
    answer is untrusted: ``timeout`` bounds the whole command, and each of stdout and stderr is
    read up to ``max_bytes`` (``MXBENCH_SSH_ANSWER_MAX_BYTES``); past either, the command is
    dropped (its channel closed) and the error says which bound it passed."""
    import paramiko

    limit = answer_max_bytes() if max_bytes is None else max_bytes
    deadline = time.monotonic() + timeout
    out, err, chan = bytearray(), bytearray(), None
    try:
        chan = client.get_transport().open_session(timeout=timeout)
        chan.settimeout(ANSWER_POLL_S)
        chan.exec_command(command)
        chan.shutdown_write()  # no stdin: EOF at once
        stdout_open = True
        while True:
            while chan.recv_stderr_ready() and len(err) <= limit:
                err += chan.recv_stderr(min(ANSWER_CHUNK, limit + 1 - len(err)))
            if len(out) > limit or len(err) > limit:
                stream = "stdout" if len(out) > limit else "stderr"
                return -1, "", (f"its answer passed {limit} bytes on {stream} (MXBENCH_SSH_ANSWER_MAX_BYTES): "
                                "read no further")
            if time.monotonic() > deadline:
                return -1, "", f"no answer within {timeout:.0f} s"
            if stdout_open:
                try:
                    data = chan.recv(min(ANSWER_CHUNK, limit + 1 - len(out)))
                except socket.timeout:
                    continue
                out += data
                stdout_open = bool(data)
            elif chan.exit_status_ready() and not chan.recv_stderr_ready():
                break
            else:
                chan.status_event.wait(ANSWER_POLL_S)
        return chan.recv_exit_status(), out.decode(errors="replace"), err.decode(errors="replace")
    except (socket.timeout, TimeoutError):
        return -1, "", f"no answer within {timeout:.0f} s"
    except (paramiko.SSHException, OSError, EOFError) as exc:  # the connection went away mid-command
        return -1, "", f"connection lost: {exc or type(exc).__name__}"
    finally:
        if chan is not None:
            chan.close()  # a command still printing gets SIGPIPE there
