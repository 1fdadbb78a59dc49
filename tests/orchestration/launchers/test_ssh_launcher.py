"""The SSH launcher against two real sshd (127.0.0.1, 127.0.0.2), real MXNet training, real faults.

Hosts come from Airflow SSH connections (AIRFLOW_CONN_* in JSON) through the provider's SSHHook,
exactly as the DAG resolves them. Each host has its own work folder; the roles' pid files there
tell which processes ran on it, and every test checks none of them outlives the launcher.
"""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import train_python
from mxbench.airflow_glue import connections
from mxbench.launchers.ssh.commands import SshHost, host_settings, role_command, setup_command
from mxbench.matrix.variants import Variant
from mxbench.run_folder import RunFolder
from mxbench_train.errors import MxbenchError
from mxbench_train.localhost import free_port, processes, start_ticks
from mxbench_train.localhost import is_running as alive
from mxbench_train.plan_runner import LaunchTimeout, RoleFailed
from mxbench_train.role_plan import Role
from support.waiting import wait_for

pytestmark = pytest.mark.slow  # MXNet jobs over two real sshd hosts

CONN_IDS = ("mxbench_ssh_1", "mxbench_ssh_2")
ONE_HOST = Variant("tiny1", "1 process (CPU)", 32, kvstore="local", num_layers=8, epochs=1, disp_batches=2)
TWO_HOSTS = Variant("tiny2h", "2 hosts x 1 worker", 32, workers=2, hosts=2, kvstore="dist_sync", num_layers=8,
                    epochs=1, disp_batches=2)
LONG = Variant("long2h", "2 hosts x 1 worker", 32, workers=2, hosts=2, kvstore="dist_sync", num_layers=8,
               epochs=200, disp_batches=2)


def use_hosts(monkeypatch, fleet, extras=({}, {}), connections_=None):
    """Point the mxbench_ssh_* connections at the fleet (the training env's python on each)."""
    for i, conn_id in enumerate(CONN_IDS):
        conn = connections_[i] if connections_ else \
            fleet.connection(i, **{"mxbench_python": train_python(), **extras[i]})
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
    return {"ssh_connections": list(CONN_IDS)}


def launcher(params):
    return connections.launcher_for("ssh", params)


def run_dir_for(tmp_path, key="run"):
    path = tmp_path / f"dagrun-{tmp_path.name}" / key  # the hosts are shared: one remote folder a test
    path.mkdir(parents=True)
    return path


def remote_pids(fleet, run_dir):
    """{role@host: pid} from the supervisors' pid files on every host."""
    found = {}
    for host in fleet.hosts:
        for pid_file in (remote_folder(fleet, host, run_dir) / "pids").glob("*.json"):
            for role, record in json.loads(pid_file.read_text()).items():
                found[f"{role}@{host.name}"] = record["pid"]
    return found


def remote_folder(fleet, host, run_dir):
    """``host``'s folder of the run: its connection's own in the run's folder in its work folder."""
    return host.workdir / "runs" / run_dir.parent.name / run_dir.name / CONN_IDS[fleet.hosts.index(host)]


def before_removal(monkeypatch, fleet, run_dir):
    """What the hosts held just before the launcher removed the run's folders:
    {"pids": {role@host: pid}, "rank_logs": {conn_id: [names]}}."""
    from mxbench.launchers.ssh.ssh_launcher import SshLauncher

    seen, remove = {"pids": {}, "rank_logs": {}}, SshLauncher._remove_run_folder

    def read_then_remove(self, host, folder):
        seen["pids"].update(remote_pids(fleet, run_dir))
        seen["rank_logs"][host.conn_id] = sorted(p.name for p in Path(folder).glob("rank*.log"))
        return remove(self, host, folder)

    monkeypatch.setattr(SshLauncher, "_remove_run_folder", read_then_remove)
    return seen



def children_of(parent):
    return [pid for pid, stat in processes() if stat.ppid == parent]


def wait_all_dead(pids, seconds=10.0):
    wait_for(lambda: not any(alive(p) for p in pids), timeout=seconds, interval=0.1)
    return [p for p in pids if alive(p)]


# --- pure: command building -------------------------------------------------------------------

PAYLOADS = ["$(touch pwned)", "; touch pwned", "`touch pwned`", "a' ; touch pwned; '", "x && touch pwned"]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_role_command_quotes_every_value(payload):
    host = SshHost("h", "127.0.0.2", python=f"/opt/{payload}/python", workdir=f"/w/{payload}",
                   env={"NOTE": "overridden by the plan", "HOST_ONLY": payload})
    role = Role("worker-0", "worker", "127.0.0.2", (host.python, "-m", "mxbench_train", "train", payload),
                {"DMLC_ROLE": "worker", "NOTE": payload})
    command = role_command(host, role, f"/w/{payload}/runs/d/r")
    tokens = shlex.split(command)
    assert tokens[:3] == ["cd", f"/w/{payload}/runs/d/r", "&&"]
    assert tokens[3:7] == ["exec", "env", "DMLC_ROLE=worker", f"HOST_ONLY={payload}"]
    assert tokens[7] == f"NOTE={payload}"  # the plan's value wins over the host's
    # the supervisor and the role both keep the run folder off sys.path (-P)
    assert tokens[8:] == [host.python, "-P", "-m", "mxbench_train", "supervise", "--role", "worker-0", "--pid-file",
                          f"/w/{payload}/runs/d/r/pids/worker-0.json", "--heartbeat-timeout", "30", "--",
                          host.python, "-P", *role.argv[1:]]
    assert shlex.split(setup_command(host, RunFolder(f"/local/{payload}/r"))) == [
        host.python, "-P", "-m", "mxbench_train.host_workdir", "--workdir", f"/w/{payload}", "--dag-run", payload,
        "--run", "r", "--host", "h"]


def test_connection_extras_are_checked_before_anything_runs():
    ok = host_settings("c", "127.0.0.2", {"mxbench_workdir": "/srv/mx/", "mxbench_python": "/opt/py/bin/python"})
    assert (ok.address, ok.workdir, ok.python, ok.data_dir) == ("127.0.0.2", "/srv/mx", "/opt/py/bin/python", None)
    assert host_settings("c", "localhost", {}).address == "127.0.0.1"  # roles bind an address, not a name
    assert host_settings("c", "gpu1.example", {"mxbench_address": "10.1.2.3"}).address == "10.1.2.3"
    for extra, why in [({"mxbench_workdir": "relative/dir"}, "absolute"),
                       ({"mxbench_python": "py\nthon"}, "interpreter"),
                       ({"mxbench_python": "-c"}, "interpreter"), ({"mxbench_python": "A=B"}, "interpreter"),
                       ({"mxbench_data_dir": "data"}, "absolute")]:
        with pytest.raises(MxbenchError, match=why):
            host_settings("c", "127.0.0.2", extra)
    with pytest.raises(MxbenchError, match="cannot resolve host 'no-such-host.invalid'"):
        host_settings("c", "no-such-host.invalid", {})


# --- real sshd ----------------------------------------------------------------------------------

def test_target_asks_the_hosts(ssh_hosts, monkeypatch):
    target = launcher(use_hosts(monkeypatch, ssh_hosts)).target()
    assert (target.launcher, target.hosts, target.gpus_per_host, target.one_machine) == ("ssh", 2, 0, False)


def test_the_quiet_check_looks_at_the_runs_hosts_over_their_connections(ssh_hosts, monkeypatch):
    """Each of the variant's hosts runs quiet-probe over its connection, all in one window; the
    launcher's connections are closed after."""
    from mxbench.hosts import quiet_gate
    from mxbench.results.machines import fingerprint
    from mxbench_train import telemetry

    ssh = launcher(use_hosts(monkeypatch, ssh_hosts))
    readings = ssh.quiet_probe(TWO_HOSTS, 0.5)
    assert sorted(readings) == list(CONN_IDS) and not ssh._clients
    here = fingerprint(telemetry.machine_facts())[0]  # the loopback hosts are this machine
    for reading in readings.values():
        assert reading["window_s"] >= 0.5 and isinstance(reading["foreign_cores"], float)
        # its machine facts name the kind of machine as the trainer's environment does: its thresholds' key
        assert fingerprint(reading["machine"])[0] == here
    assert list(ssh.quiet_probe(ONE_HOST, 0.5)) == [CONN_IDS[0]]
    record = quiet_gate.check(ssh, TWO_HOSTS, 1)
    assert record["samples"] == 1 and sorted(record["readings"]) == list(CONN_IDS)


def test_one_host_run_streams_logs_brings_results_back_and_caches_the_data(ssh_hosts, monkeypatch, cifar_rec,
                                                                        tmp_path, capsys):
    params = use_hosts(monkeypatch, ssh_hosts)
    # the hosts live for the whole session: another test may have staged this data set there already
    shutil.rmtree(ssh_hosts.hosts[0].workdir / "data" / cifar_rec.name, ignore_errors=True)
    first = run_dir_for(tmp_path, "first")
    pids = before_removal(monkeypatch, ssh_hosts, first)["pids"]
    launched = launcher(params).execute(ONE_HOST, cifar_rec, RunFolder(first), deadline_s=300)
    results = launched.results
    assert [(r.name, r.host, r.returncode) for r in results] == [("worker-0", "127.0.0.1", 0)]
    assert "Speed:" in (first / "rank0.log").read_text()  # brought back from host 1's work folder
    assert "Speed:" in (first / "roles" / "worker-0.log").read_text()  # streamed while it ran
    assert "[worker-0@mxbench_ssh_1]" in capsys.readouterr().out  # the task log shows progress
    assert json.loads((first / "ssh.json").read_text())["data_copied_to"] == ["mxbench_ssh_1"]
    copied = ssh_hosts.hosts[0].workdir / "data" / cifar_rec.name / "cifar10_train.rec"
    assert copied.read_bytes() == (cifar_rec / "cifar10_train.rec").read_bytes()
    assert list(pids) == ["worker-0@host1"] and not alive(pids["worker-0@host1"])
    # its files fetched, the run's folder on the host is gone (and its DAG run's, left empty)
    assert not remote_folder(ssh_hosts, ssh_hosts.hosts[0], first).parent.parent.exists()

    second = run_dir_for(tmp_path, "second")
    launcher(params).execute(ONE_HOST, cifar_rec, RunFolder(second), deadline_s=300)
    staging = json.loads((second / "ssh.json").read_text())
    assert staging["data_copied_to"] == [] and staging["data_s"] < 0.5  # checksums matched: nothing copied


def test_two_host_dist_sync_runs_each_role_on_its_host(ssh_hosts, monkeypatch, cifar_rec, tmp_path):
    run_dir = run_dir_for(tmp_path)
    seen = before_removal(monkeypatch, ssh_hosts, run_dir)
    pids = seen["pids"]
    launched = launcher(use_hosts(monkeypatch, ssh_hosts)).execute(TWO_HOSTS, cifar_rec, RunFolder(run_dir), 300)
    plan, results = launched.plan, launched.results
    assert [(r.name, r.host) for r in plan] == [("scheduler", "127.0.0.1"), ("server-0", "127.0.0.1"),
                                               ("server-1", "127.0.0.2"), ("worker-0", "127.0.0.1"),
                                               ("worker-1", "127.0.0.2")]
    assert all(r.returncode == 0 for r in results)
    assert sorted(pids) == ["scheduler@host1", "server-0@host1", "server-1@host2", "worker-0@host1",
                            "worker-1@host2"]  # each supervisor wrote its pid file on its own host
    assert not wait_all_dead(pids.values(), 0)
    for rank in (0, 1):
        assert "Speed:" in (run_dir / f"rank{rank}.log").read_text()
    # each host's work folder had one worker's rank log (ps-lite numbers ranks as workers register)
    assert [len(seen["rank_logs"][c]) for c in CONN_IDS] == [1, 1]
    assert not any(remote_folder(ssh_hosts, host, run_dir).exists() for host in ssh_hosts.hosts)
    assert plan[-1].env["DMLC_NODE_HOST"] == "127.0.0.2"


def test_hosts_sharing_one_work_folder_each_keep_their_own_run_folder(ssh_hosts, monkeypatch, cifar_rec, tmp_path):
    """Homes on one NFS mount: every host resolves the same work folder (here both hosts are given
    host 1's); set-up, training, fetch and removal on one host must not touch another's files."""
    shared = {"mxbench_workdir": str(ssh_hosts.hosts[0].workdir)}
    run_dir = run_dir_for(tmp_path)
    seen = before_removal(monkeypatch, ssh_hosts, run_dir)
    launched = launcher(use_hosts(monkeypatch, ssh_hosts, (shared, shared))).execute(TWO_HOSTS, cifar_rec,
                                                                                          RunFolder(run_dir), 300)
    results = launched.results
    assert all(r.returncode == 0 for r in results)
    for rank in (0, 1):
        assert "Speed:" in (run_dir / f"rank{rank}.log").read_text()
    assert [len(seen["rank_logs"][c]) for c in CONN_IDS] == [1, 1]  # each host's own, fetched from its folder
    remote = {r["conn_id"]: r["run_dir"] for r in json.loads((run_dir / "remote.json").read_text())}
    dag_run_folder = ssh_hosts.hosts[0].workdir / "runs" / run_dir.parent.name
    assert remote == {c: str(dag_run_folder / run_dir.name / c) for c in CONN_IDS}
    assert not dag_run_folder.exists()  # both removed, then the folders above them, left empty


def crashing_python(tmp_path, after_s):
    """A training interpreter whose trainer segfaults ``after_s`` seconds into training."""
    wrapper = tmp_path / "python-crashing"
    wrapper.write_text(f"""#!/usr/bin/env bash
if [[ $1 == -[PI] && $2 == -m && $3 == mxbench_train && $4 == train ]]; then  # the trainer, not its supervisor
  {shlex.quote(train_python())} "$@" &
  sleep {after_s}
  echo "Segmentation fault (simulated)" >&2
  kill -SEGV $! ; wait $!; exit $?
fi
exec {shlex.quote(train_python())} "$@"
""")
    wrapper.chmod(0o755)
    return str(wrapper)


def test_a_worker_crashing_on_host_2_stops_every_role_on_both_hosts(ssh_hosts, monkeypatch, cifar_rec, tmp_path):
    keep = {"mxbench_keep_failed_runs": True}  # the failed run's folders stay on the hosts, pid files too
    params = use_hosts(monkeypatch, ssh_hosts, (keep, {**keep, "mxbench_python": crashing_python(tmp_path, 6)}))
    run_dir = run_dir_for(tmp_path)
    started = time.monotonic()
    with pytest.raises(RoleFailed) as failed:
        launcher(params).execute(LONG, cifar_rec, RunFolder(run_dir), deadline_s=300)
    assert time.monotonic() - started < 60
    assert failed.value.role.name == "worker-1" and failed.value.role.host == "127.0.0.2"
    # MXNet's own SIGSEGV handler prints a stack trace and aborts
    assert re.search(r"worker-1 on host 127\.0\.0\.2 was killed by SIG(SEGV|ABRT) \(exit status 1(39|34)\)",
                     str(failed.value))
    pids = remote_pids(ssh_hosts, run_dir)
    assert len(pids) == 5 and not wait_all_dead(pids.values(), 5)
    assert all(remote_folder(ssh_hosts, host, run_dir).exists() for host in ssh_hosts.hosts)  # kept, as asked


def test_the_deadline_stops_every_role_on_both_hosts(ssh_hosts, monkeypatch, cifar_rec, tmp_path):
    run_dir = run_dir_for(tmp_path)
    pids = before_removal(monkeypatch, ssh_hosts, run_dir)["pids"]
    # 20 s: a worker has begun its rank log by then even beside other tests (8 s was not always enough)
    with pytest.raises(LaunchTimeout, match="deadline"):
        launcher(use_hosts(monkeypatch, ssh_hosts)).execute(LONG, cifar_rec, RunFolder(run_dir), deadline_s=20)
    assert len(pids) == 5 and not wait_all_dead(pids.values(), 5)
    # failed, and no connection keeps failed runs: fetched, then removed all the same
    assert (run_dir / "rank1.log").exists() or (run_dir / "rank0.log").exists()
    assert not any(remote_folder(ssh_hosts, host, run_dir).exists() for host in ssh_hosts.hosts)
    assert "channel closed, stopping the role" in (run_dir / "roles" / "worker-1.log").read_text()


KILLABLE = """
import json, sys
from mxbench.airflow_glue import connections
from mxbench.matrix.variants import Variant
from mxbench.run_folder import RunFolder
v = Variant(**json.loads(sys.argv[1]))
connections.launcher_for("ssh", {"ssh_connections": ["mxbench_ssh_1", "mxbench_ssh_2"]}).execute(
    v, sys.argv[2], RunFolder(sys.argv[3]), 600)
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killing_the_task_process_leaves_nothing_on_either_host(ssh_hosts, monkeypatch, cifar_rec, tmp_path, sig):
    """SIGTERM (Airflow's on_kill path): the launcher stops every role. SIGKILL: no launcher code
    runs at all; the remote supervisors notice the dropped connection."""
    from dataclasses import asdict

    use_hosts(monkeypatch, ssh_hosts)
    run_dir = run_dir_for(tmp_path)
    task = subprocess.Popen([sys.executable, "-c", KILLABLE, json.dumps(asdict(LONG)), str(cifar_rec), str(run_dir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        end = time.monotonic() + 90
        while time.monotonic() < end and "Speed:" not in _read(run_dir / "roles" / "worker-1.log"):
            assert task.poll() is None, task.stderr.read().decode()[-2000:]
            time.sleep(0.2)
        pids = remote_pids(ssh_hosts, run_dir)
        assert len(pids) == 5 and all(alive(p) for p in pids.values())  # training on both hosts
        task.send_signal(sig)
        task.wait(30)
        assert not wait_all_dead(pids.values(), 15), "roles outlived the killed launcher"
    finally:
        task.kill()


def _read(path):
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def test_reap_kills_what_an_earlier_attempt_left_on_a_host(ssh_hosts, monkeypatch, tmp_path):
    """A host that never saw the channel drop (a partition): the retry reaps by the pid files there."""
    ssh = launcher(use_hosts(monkeypatch, ssh_hosts))
    run_dir = run_dir_for(tmp_path)
    remote = remote_folder(ssh_hosts, ssh_hosts.hosts[1], run_dir)
    (remote / "pids").mkdir(parents=True)
    leftover = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        start = start_ticks(leftover.pid)
        (remote / "pids" / "worker-1.json").write_text(json.dumps({"worker-1": {"pid": leftover.pid, "start": start}}))
        (run_dir / "remote.json").write_text(json.dumps([{"conn_id": "mxbench_ssh_2", "address": "127.0.0.2",
                                                          "run_dir": str(remote)}]))
        assert ssh.reap(RunFolder(run_dir)) == [("worker-1@mxbench_ssh_2", leftover.pid)]
        assert leftover.wait(5) == -signal.SIGKILL
    finally:
        leftover.kill()


# --- connection faults: each names the host and the cause ---------------------------------------

def test_a_dead_host_is_named_with_its_cause(ssh_hosts, monkeypatch):
    dead = {**ssh_hosts.connection(0, mxbench_python=train_python()), "host": "127.0.0.3",
            "port": free_port("127.0.0.3")}
    params = use_hosts(monkeypatch, ssh_hosts,
                       connections_=[ssh_hosts.connection(0, mxbench_python=train_python()), dead])
    started = time.monotonic()
    with pytest.raises(MxbenchError, match=r"host mxbench_ssh_2 \(127\.0\.0\.3\): cannot connect: .*refused"):
        launcher(params).target()
    assert time.monotonic() - started < 10


def test_a_key_the_host_does_not_accept_is_an_authentication_failure(ssh_hosts, monkeypatch, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "stranger")], check=True)
    params = use_hosts(monkeypatch, ssh_hosts, ({"key_file": str(tmp_path / "stranger")}, {}))
    with pytest.raises(MxbenchError, match=r"host mxbench_ssh_1 \(127\.0\.0\.1\): authentication failed"):
        launcher(params).target()


def test_an_unknown_or_wrong_host_key_is_refused_while_checking_is_on(ssh_hosts, monkeypatch):
    unknown = ssh_hosts.connection(0, mxbench_python=train_python())
    del unknown["extra"]["host_key"]
    params = use_hosts(monkeypatch, ssh_hosts, connections_=[unknown, ssh_hosts.connection(1)])
    with pytest.raises(MxbenchError, match=r"mxbench_ssh_1 .*host key is unknown"):
        launcher(params).target()
    wrong = ssh_hosts.connection(0, host_key=ssh_hosts.hosts[1].host_key)
    params = use_hosts(monkeypatch, ssh_hosts, connections_=[wrong, ssh_hosts.connection(1)])
    with pytest.raises(MxbenchError, match=r"mxbench_ssh_1 .*host key does not match"):
        launcher(params).target()
    # turning checking off is explicit, and then the unknown key is accepted
    unknown["extra"]["no_host_key_check"] = True
    params = use_hosts(monkeypatch, ssh_hosts,
                       connections_=[unknown, ssh_hosts.connection(1, mxbench_python=train_python())])
    assert launcher(params).target().hosts == 2


@pytest.mark.parametrize("payload", ["$(touch pwned)", "; touch pwned", "`touch pwned`", "x\ntouch pwned"])
def test_a_shell_payload_in_a_connection_extra_runs_nothing(ssh_hosts, monkeypatch, payload, cifar_rec, tmp_path):
    workdir = ssh_hosts.hosts[0].workdir / "payload"
    params = use_hosts(monkeypatch, ssh_hosts, ({"mxbench_python": payload, "mxbench_workdir": f"{workdir}/{payload}"},
                                                {}))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MxbenchError) as refused:
        launcher(params).execute(ONE_HOST, cifar_rec, RunFolder(run_dir_for(tmp_path)), 60)
    assert "mxbench_ssh_1" in str(refused.value)
    for root in (ssh_hosts.root, tmp_path, Path.home(), Path("/tmp")):
        assert not list(root.rglob("pwned")) if root != Path("/tmp") else not (root / "pwned").exists()


def test_hosts_that_are_one_machine_share_its_cores():
    from mxbench.launchers.base import cores_per_host

    assert cores_per_host({"a": (8, "m1"), "b": (8, "m2")}) == 8
    assert cores_per_host({"a": (8, "m1"), "b": (8, "m1")}) == 4
    assert cores_per_host({"a": (2, "m1"), "b": (2, "m1"), "c": (2, "m1")}) == 1
    assert cores_per_host({"a": (6, None), "b": (6, None)}) == 6  # no machine id: each host its own


def test_a_connection_lost_mid_run_fails_the_run_naming_the_host_and_stops_everything(ssh_hosts, monkeypatch,
                                                                                     cifar_rec, tmp_path):
    """Host 2's sshd session process dies mid-run (as when the host drops off the network)."""
    import threading

    keep = {"mxbench_keep_failed_runs": True}
    params = use_hosts(monkeypatch, ssh_hosts, (keep, keep))
    run_dir = run_dir_for(tmp_path)
    host2 = ssh_hosts.hosts[1]

    def cut_host2():
        end = time.monotonic() + 90
        while time.monotonic() < end and "Speed:" not in _read(run_dir / "roles" / "worker-1.log"):
            time.sleep(0.2)
        for pid in children_of(host2.pid):  # the per-connection sshd serving the launcher
            os.kill(pid, signal.SIGKILL)

    cutter = threading.Thread(target=cut_host2)
    cutter.start()
    with pytest.raises(RoleFailed, match=r"on host 127\.0\.0\.2 lost its SSH connection to host mxbench_ssh_2"):
        launcher(params).execute(LONG, cifar_rec, RunFolder(run_dir), deadline_s=300)
    cutter.join()
    pids = remote_pids(ssh_hosts, run_dir)
    assert len(pids) == 5 and not wait_all_dead(pids.values(), 10)


def test_a_changed_file_on_the_host_is_copied_again(ssh_hosts, monkeypatch, cifar_rec, tmp_path):
    from mxbench.launchers.ssh.transfer import local_manifest, stage

    host = ssh_hosts.hosts[0]
    ssh = launcher(use_hosts(monkeypatch, ssh_hosts))
    remote = f"{host.workdir}/data/changed-{tmp_path.name}"
    want = local_manifest(cifar_rec)
    sftp = ssh._client(ssh.hosts[0]).open_sftp()
    try:
        assert stage(sftp, remote, cifar_rec, want) is True
        assert stage(sftp, remote, cifar_rec, want) is False  # cache hit
        copied = Path(remote) / "cifar10_val.rec"
        data = bytearray(copied.read_bytes())
        data[100] ^= 0xFF  # same size, other content: as a half-finished earlier copy could leave it
        time.sleep(1.1)  # a new modification time
        copied.write_bytes(bytes(data))
        assert stage(sftp, remote, cifar_rec, want) is True
        assert copied.read_bytes() == (cifar_rec / "cifar10_val.rec").read_bytes()
    finally:
        sftp.close()
        ssh.close()


def test_a_shared_data_folder_is_used_as_is_and_checked(ssh_hosts, monkeypatch, cifar_rec, tmp_path):
    import shutil

    shared = tmp_path / "shared"
    shutil.copytree(cifar_rec, shared)
    params = use_hosts(monkeypatch, ssh_hosts,
                       ({"mxbench_data_dir": str(shared), "mxbench_env": {"MXBENCH_MARK": "a b"}},
                        {"mxbench_data_dir": str(shared)}))
    run_dir = run_dir_for(tmp_path)
    launched = launcher(params).execute(ONE_HOST, cifar_rec, RunFolder(run_dir), 300)
    plan, results = launched.plan, launched.results
    assert results[0].returncode == 0
    assert f"{shared}/cifar10_train.rec" in plan[0].argv
    assert json.loads((run_dir / "ssh.json").read_text())["data_copied_to"] == []
    (shared / "cifar10_val.rec").write_bytes(b"\0" * (shared / "cifar10_val.rec").stat().st_size)
    with pytest.raises(MxbenchError, match=r"mxbench_ssh_1 .*shared data folder .* other versions of cifar10_val.rec"):
        launcher(params).execute(ONE_HOST, cifar_rec, RunFolder(run_dir_for(tmp_path, "again")), 300)


def test_a_connection_without_its_own_credentials_is_refused(ssh_hosts, monkeypatch):
    bare = ssh_hosts.connection(0, mxbench_python=train_python())
    del bare["extra"]["key_file"]
    use_hosts(monkeypatch, ssh_hosts, connections_=[bare, ssh_hosts.connection(1)])
    with pytest.raises(MxbenchError, match="'mxbench_ssh_1' has no key or password"):
        launcher({"ssh_connections": list(CONN_IDS)})
    loose = ssh_hosts.connection(0, allow_host_key_change=True)
    use_hosts(monkeypatch, ssh_hosts, connections_=[loose, ssh_hosts.connection(1)])
    with pytest.raises(MxbenchError, match="allow_host_key_change"):
        launcher({"ssh_connections": list(CONN_IDS)})


def test_fetching_after_a_failure_keeps_the_first_error(monkeypatch, tmp_path):
    """The roles failed; the SFTP fetch then fails too (the connection is gone): the role's error stands."""
    import paramiko

    from mxbench.launchers.ssh.ssh_launcher import SshLauncher

    class DeadTransport:
        def getpeername(self):
            return ("127.0.0.1", 22)

        def open_session(self, timeout=None):
            raise paramiko.SSHException("Server connection dropped: ")

    class DeadClient:
        def get_transport(self):
            return DeadTransport()

        def close(self):
            pass

    ssh = SshLauncher([SshHost("h1", "127.0.0.1", connect=lambda: DeadClient())])
    monkeypatch.setattr(ssh, "_client", lambda host: DeadClient())
    monkeypatch.setattr(ssh, "_on_each", lambda hosts, step: (_ for _ in ()).throw(MxbenchError("FIRST ERROR")))
    run_dir = run_dir_for(tmp_path)
    with pytest.raises(MxbenchError, match="FIRST ERROR"):
        ssh.execute(ONE_HOST, tmp_path, RunFolder(run_dir), 60)
    with pytest.raises(MxbenchError, match=r"host h1 \(127.0.0.1\): fetching the run's logs over SFTP failed: "
                                           "Server connection dropped"):
        ssh._fetch(ssh.hosts, {"h1": "/nowhere"}, RunFolder(run_dir))


@pytest.mark.alone  # two busy loops, and it lists every run's cgroup on the machine
def test_a_run_beside_two_busy_loops_reads_its_own_cgroup_and_is_marked_contended(ssh_hosts, monkeypatch, cifar_rec,
                                                                                  tmp_path):
    """Issue 39: over real sshd, the supervisor puts the role in a cgroup of its own on the host
    (removed after); with two busy loops outside it, the worker reads that cgroup's pressure and
    the run is marked contended."""
    from mxbench.results import contention
    from mxbench_train import cgroup
    from mxbench_train.events import parse_event

    mount = cgroup.v2_mount()
    before = {p.name for p in mount.iterdir() if p.name.startswith(cgroup.PREFIX)}
    run_dir = run_dir_for(tmp_path)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        launcher(use_hosts(monkeypatch, ssh_hosts)).execute(ONE_HOST, cifar_rec, RunFolder(run_dir), deadline_s=300)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    events = [e for e in map(parse_event, (run_dir / "rank0.log").read_text().splitlines()) if e]
    (reading,) = contention.host_readings(events)
    assert reading["pressure_source"] == "the role's own cgroup" and isinstance(reading["run_pressure"], float)
    row = contention.summarise(events)
    assert row["contended"] is True and row["run_pressure"] == reading["run_pressure"], row
    assert {p.name for p in mount.iterdir() if p.name.startswith(cgroup.PREFIX)} - before == set()
