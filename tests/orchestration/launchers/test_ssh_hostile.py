"""The SSH launcher against hosts that are not to be trusted (issue 16: points 1 and 4).

A compromised host must not become a compromised Airflow worker, and another local user of a
shared host must not get into a run. Real components throughout: a hostile SFTP server built on
paramiko's own server classes (in this process, on loopback), the real sshd hosts of
``standins.sshd``, real MXNet training where a run is needed.
"""
import json
import os
import socket
import stat
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pandas as pd
import paramiko
import pytest

from conftest import train_python
from mxbench.airflow_glue import connections
from mxbench.launchers.ssh import ssh_launcher
from mxbench.launchers.ssh.commands import SshHost, host_settings, isolation_flag, role_command
from mxbench.launchers.ssh.remote_role import RemoteRole
from mxbench.launchers.ssh.ssh_launcher import SshLauncher
from mxbench.launchers.ssh.transfer import FETCH_FILE_OVERHEAD, FETCH_HOST_MAX_NAMES, ByteBudget, fetch_outputs
from mxbench.matrix.variants import Variant
from mxbench.run_folder import DagRunFolder, RunFolder
from mxbench_train import role_log
from mxbench_train.errors import MxbenchError
from mxbench_train.role_plan import Role

pytestmark = pytest.mark.slow  # hostile hosts through real sshd, some running MXNet

CONN_IDS = ("mxbench_ssh_1", "mxbench_ssh_2")
ONE_HOST = Variant("tiny1", "1 process (CPU)", 32, kvstore="local", num_layers=8, epochs=1, disp_batches=2)
MiB = 1 << 20


# --- a hostile SFTP server: paramiko's server classes, in process ------------------------------

class RemoteFile:
    """What the hostile server serves: ``size`` is what it claims; ``endless`` files never end."""

    def __init__(self, content=b"", size=None, endless=False, mode=stat.S_IFREG | 0o644):
        self.content, self.endless, self.mode = content, endless, mode
        self.size = len(content) if size is None else size

    def read(self, offset, length):
        if self.endless:
            return b"A" * length
        return self.content[offset:offset + length] or paramiko.SFTP_EOF


def attributes(name, f):
    attrs = paramiko.SFTPAttributes()
    attrs.filename, attrs.st_mode, attrs.st_size = name, f.mode, f.size
    attrs.st_uid = attrs.st_gid = 0
    attrs.st_atime = attrs.st_mtime = int(time.time())
    return attrs


class EndlessEmptyFiles(list):
    """A folder that lists empty files without end. Paramiko's server sends a listing 16 names a
    reply, slicing it (``[:16]``, then ``[16:]`` for the rest): here the rest is always as long."""

    def __init__(self):
        super().__init__()
        self.listed = 0

    def __getitem__(self, index):
        if index.start:
            return self
        self.listed += 16
        return [attributes(f"empty-{n:09d}.log", RemoteFile()) for n in range(self.listed - 16, self.listed)]

    def get(self, name, default=None):
        return RemoteFile() if name.startswith("empty-") else default


class HostileSftp(paramiko.SFTPServerInterface):
    folders = {}  # path: {name as listed: RemoteFile} or EndlessEmptyFiles; set by the fixture

    def _find(self, path):
        folder, _, name = path.rpartition("/")
        while folder not in self.folders and "/" in folder:  # "/run/../../x": the folder is "/run"
            folder, _, rest = folder.rpartition("/")
            name = f"{rest}/{name}"
        return self.folders.get(folder, {}).get(name)

    _attrs = staticmethod(attributes)

    def list_folder(self, path):
        listing = self.folders.get(path.rstrip("/"), {})
        if isinstance(listing, EndlessEmptyFiles):
            return listing
        return [self._attrs(name, f) for name, f in listing.items()]

    def stat(self, path):
        f = self._find(path)
        return self._attrs(path, f) if f else paramiko.SFTP_NO_SUCH_FILE

    lstat = stat

    def open(self, path, flags, attr):
        f = self._find(path)
        if f is None:
            return paramiko.SFTP_NO_SUCH_FILE
        handle = paramiko.SFTPHandle(flags)
        handle.read = f.read
        handle.stat = lambda: self._attrs(path, f)
        return handle


class AnyoneServer(paramiko.ServerInterface):
    def get_allowed_auths(self, username):
        return "none"

    def check_auth_none(self, username):
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED


class HostileClient:
    """What SshLauncher gets from ``connect``: an SSHClient whose transport reaches the hostile server."""

    def __init__(self, transport):
        self.transport = transport

    def open_sftp(self):
        return paramiko.SFTPClient.from_transport(self.transport)

    def get_transport(self):
        return self.transport

    def exec_command(self, *_args, **_kw):
        raise paramiko.SSHException("this server runs no commands")

    def close(self):
        pass


@pytest.fixture
def hostile_sftp(monkeypatch):
    """Connect to a fresh in-process SFTP server serving ``folders``: a paramiko SFTPClient."""
    clients, servers = [], []

    def connect(folders):
        monkeypatch.setattr(HostileSftp, "folders", folders)
        listener = socket.create_server(("127.0.0.1", 0))
        server = {}

        def serve():
            conn, _ = listener.accept()
            transport = paramiko.Transport(conn)
            transport.add_server_key(paramiko.ECDSAKey.generate())
            transport.set_subsystem_handler("sftp", paramiko.SFTPServer, HostileSftp)
            transport.start_server(server=AnyoneServer())
            server["transport"] = transport

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        client = paramiko.Transport(socket.create_connection(listener.getsockname()))
        client.connect()
        client.auth_none("anyone")
        thread.join(10)
        listener.close()
        clients.append(client)
        servers.append(server["transport"])
        return client

    yield connect
    for transport in clients + servers:
        transport.close()


def files_under(root: Path, skip: Path):
    """{path: bytes} of every file under root outside ``skip`` (links as their target's text)."""
    found = {}
    for path in root.rglob("*"):
        if skip in path.parents or path == skip:
            continue
        if path.is_symlink():
            found[path] = os.readlink(path)
        elif path.is_file():
            found[path] = path.read_bytes()
    return found


def local_run_folder(tmp_path):
    run_dir = tmp_path / "runs" / "dagrun-1" / "run"
    run_dir.mkdir(parents=True)
    records = {"meta.json": b'{"status": "running"}', "pids.json": b"{}", "plan.json": b"[]",
               "remote.json": b"[]", "ssh.json": b'{"setup_s": 1}'}
    for name, data in records.items():
        (run_dir / name).write_bytes(data)
    (tmp_path / "secret-target").write_bytes(b"untouched")
    (run_dir / "rank1.log").symlink_to(tmp_path / "secret-target")  # as if someone had planted it
    return run_dir, records


def test_a_hostile_listing_writes_nothing_outside_the_run_folder_nor_over_local_records(hostile_sftp, tmp_path):
    run_dir, records = local_run_folder(tmp_path)
    outside = tmp_path / "absolute-target"
    listing = {
        "../../escaped.txt": RemoteFile(b"escaped"),
        "../escaped2.txt": RemoteFile(b"escaped"),
        str(outside): RemoteFile(b"absolute"),
        "..": RemoteFile(b"dotdot"),
        ".": RemoteFile(b"dot"),
        "meta.json": RemoteFile(b'{"status": "ok"}'),
        "pids.json": RemoteFile(b'{"x": {"pid": 1, "start": 1}}'),
        "ssh.json": RemoteFile(b"{}"),  # no record name, but a local file already: never written over
        "rank1.log": RemoteFile(b"through the symlink"),
        "bad\nname.log": RemoteFile(b"x"),
        "pids": RemoteFile(mode=stat.S_IFDIR | 0o755),
        "link": RemoteFile(b"", mode=stat.S_IFLNK | 0o777),
        "rank0.log": RemoteFile(b"Node[0] Epoch[0] Batch [2]\tSpeed: 100.0 samples/sec\n"),
        "gpu-rank0.csv": RemoteFile(b"index, utilization.gpu [%]\n0, 99\n"),
    }
    before = files_under(tmp_path, run_dir)
    sftp = paramiko.SFTPClient.from_transport(hostile_sftp({"/run": listing}))
    with pytest.raises(MxbenchError) as refused:
        fetch_outputs(sftp, "/run", RunFolder(run_dir), "host evil (127.0.0.1)")
    assert files_under(tmp_path, run_dir) == before  # nothing written, nothing changed outside
    assert not list(tmp_path.rglob("escaped*")) and not outside.exists()
    for name, data in records.items():
        assert (run_dir / name).read_bytes() == data
    assert (tmp_path / "secret-target").read_bytes() == b"untouched" and (run_dir / "rank1.log").is_symlink()
    assert sorted(p.name for p in run_dir.iterdir()) == sorted([*records, "rank1.log", "rank0.log", "gpu-rank0.csv"])
    assert (run_dir / "rank0.log").read_bytes() == listing["rank0.log"].content
    message = str(refused.value)
    assert message.startswith("host evil (127.0.0.1): fetching the run folder /run: ")
    # paramiko's client drops "." and ".." itself; every other refusal is named
    # a name is shown cut to 80 characters (an xdist worker's tmp_path makes this one longer)
    for shown in ("'../../escaped.txt'", "'../escaped2.txt'", repr(str(outside))[:80], "'meta.json'", "'pids.json'",
                  "'ssh.json'", "'rank1.log'", r"'bad\nname.log'"):
        assert shown in message, shown


def test_a_too_long_name_or_a_launchers_step_times_are_refused_by_name_and_the_rest_fetched(hostile_sftp, tmp_path,
                                                                                              monkeypatch):
    """On main a 300-character name stopped the host's fetch (ENAMETOOLONG: later files not fetched,
    its remote folder kept), and a host's kubernetes.json (another launcher's step times) was
    fetched into the run folder, where it reaches the run's record."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    long_name = "a" * 300 + ".log"
    listing = {
        "kubernetes.json": RemoteFile(b'{"pull_s": 0}'),
        "local.json": RemoteFile(b'{"launch_s": 0}'),
        "rank0.log": RemoteFile(b"first\n"),
        long_name: RemoteFile(b"x"),
        "\u00e9" * 128 + ".log": RemoteFile(b"x"),  # 128 characters, 260 bytes
        "rank1.log": RemoteFile(b"after\n"),
    }
    ssh = SshLauncher([SshHost("h1", "127.0.0.1")])
    monkeypatch.setattr(ssh, "_client", lambda host: HostileClient(hostile_sftp({"/a": listing})))
    removed = []
    monkeypatch.setattr(ssh, "_remove_run_folder", lambda host, folder: removed.append(folder))
    with pytest.raises(MxbenchError) as refused:
        ssh._fetch(ssh.hosts, {"h1": "/a"}, RunFolder(run_dir))
    assert sorted(p.name for p in run_dir.iterdir()) == ["rank0.log", "rank1.log"]
    assert (run_dir / "rank1.log").read_bytes() == b"after\n"
    message = str(refused.value)
    assert message.startswith("host h1 (127.0.0.1): fetching the run folder /a: refused 'kubernetes.json': not a "
                              "plain name of a run output")
    for shown in ("'local.json'", repr(long_name)[:80], "'\u00e9\u00e9"):
        assert f"refused {shown}" in message, shown
    assert removed == ["/a"]  # nothing there is ever fetched: the folder goes


def test_a_name_this_file_system_refuses_is_refused_by_name(hostile_sftp, tmp_path, monkeypatch):
    """A file system with a shorter name limit than NAME_MAX: its ENAMETOOLONG refuses one name."""
    import errno

    from mxbench.launchers.ssh import transfer

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    fetch_file = transfer._fetch_file

    def short_names(sftp, remote_path, local_path, *args):
        if len(local_path.name) > 20:
            raise OSError(errno.ENAMETOOLONG, "File name too long", str(local_path))
        return fetch_file(sftp, remote_path, local_path, *args)

    monkeypatch.setattr(transfer, "_fetch_file", short_names)
    listing = {"b" * 30 + ".log": RemoteFile(b"x"), "rank0.log": RemoteFile(b"ok\n")}
    sftp = paramiko.SFTPClient.from_transport(hostile_sftp({"/run": listing}))
    with pytest.raises(transfer.FetchProblems) as refused:
        fetch_outputs(sftp, "/run", RunFolder(run_dir), "host h1")
    assert refused.value.whole and (run_dir / "rank0.log").read_bytes() == b"ok\n"
    assert f"refused {'b' * 30 + '.log'!r}: a longer name than this file system takes" in str(refused.value)


def test_fetching_stops_at_the_caps_per_file_and_per_run(hostile_sftp, tmp_path, monkeypatch):
    monkeypatch.setenv("MXBENCH_FETCH_FILE_MAX_BYTES", str(1 * MiB))
    monkeypatch.setenv("MXBENCH_FETCH_RUN_MAX_BYTES", str(3 * MiB))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = {"rank0.log": RemoteFile(b"ok\n"),
             "huge.csv": RemoteFile(size=1 << 40, endless=True),  # claims 1 TiB
             "liar.log": RemoteFile(size=10, endless=True)}  # claims 10 bytes, never ends
    second = {"rank1.log": RemoteFile(size=1 << 30, endless=True), "gpu-rank1.csv": RemoteFile(b"late\n")}
    ssh = SshLauncher([SshHost("h1", "127.0.0.1"), SshHost("h2", "127.0.0.2")])
    client = HostileClient(hostile_sftp({"/a": first, "/b": second}))
    monkeypatch.setattr(ssh, "_client", lambda host: client)
    started = time.monotonic()
    with pytest.raises(MxbenchError) as cut:
        ssh._fetch(ssh.hosts, {"h1": "/a", "h2": "/b"}, RunFolder(run_dir))
    assert time.monotonic() - started < 60
    sizes = {p.name: p.stat().st_size for p in run_dir.iterdir()}
    overhead = FETCH_FILE_OVERHEAD  # what each file costs besides its bytes
    assert sizes == {"rank0.log": 3, "huge.csv": MiB, "liar.log": MiB, "rank1.log": MiB - 3 - 4 * overhead}
    assert sum(sizes.values()) + 4 * overhead == 3 * MiB  # the run's cap holds over both hosts
    assert str(cut.value).startswith("host h1 (127.0.0.1): fetching the run folder /a: 'huge.csv' cut at "
                                     f"{MiB} bytes (MXBENCH_FETCH_FILE_MAX_BYTES)")
    assert "'liar.log' cut at" in str(cut.value)
    # host 2 on its own: what the run may still take, then nothing more, each said
    run_dir2 = tmp_path / "run2"
    run_dir2.mkdir()
    budget = ByteBudget(3 * MiB)
    budget.left = MiB - 3 - 3 * FETCH_FILE_OVERHEAD
    with pytest.raises(MxbenchError, match=r"host h2 \(127\.0\.0\.2\): .*'rank1\.log' cut at \d+ bytes "
                                           r"\(MXBENCH_FETCH_RUN_MAX_BYTES\).*'gpu-rank1\.csv' not fetched"):
        fetch_outputs(client.open_sftp(), "/b", RunFolder(run_dir2), "host h2 (127.0.0.2)", budget)
    assert budget.left == 0


def test_a_listing_without_end_is_read_only_up_to_a_cap(hostile_sftp, tmp_path):
    """Empty files cost no bytes, yet each is an inode on the worker: a host listing them without
    end must neither keep the fetch reading nor fill the run folder."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    listing = EndlessEmptyFiles()
    sftp = paramiko.SFTPClient.from_transport(hostile_sftp({"/run": listing}))
    outcome = {}

    def fetch():
        try:
            fetch_outputs(sftp, "/run", RunFolder(run_dir), "host evil (127.0.0.1)")
        except MxbenchError as exc:
            outcome["error"] = str(exc)

    thread = threading.Thread(target=fetch, daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), f"still reading the listing after {listing.listed} names"
    assert len(list(run_dir.iterdir())) == FETCH_HOST_MAX_NAMES
    assert listing.listed < 2 * FETCH_HOST_MAX_NAMES  # read ahead a little, never on and on
    assert outcome["error"] == (f"host evil (127.0.0.1): fetching the run folder /run: it lists more than "
                                f"{FETCH_HOST_MAX_NAMES} names: the rest were not read")
    # the session still works after a listing stopped early (its replies in flight drained)
    assert sftp.stat("/run/empty-000000000.log").st_size == 0


def test_each_file_costs_the_run_budget_more_than_its_bytes(hostile_sftp, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    listing = {f"empty-{i:03d}.log": RemoteFile() for i in range(40)}
    sftp = paramiko.SFTPClient.from_transport(hostile_sftp({"/run": listing}))
    budget = ByteBudget(10 * FETCH_FILE_OVERHEAD)
    with pytest.raises(MxbenchError, match=rf"host h \(127\.0\.0\.1\): fetching the run folder /run: 'empty-010\.log' "
                                           rf"not fetched: the run's {10 * FETCH_FILE_OVERHEAD} bytes "
                                           rf"\(MXBENCH_FETCH_RUN_MAX_BYTES\) are used up .*; and 20 more"):
        fetch_outputs(sftp, "/run", RunFolder(run_dir), "host h (127.0.0.1)", budget)
    assert sorted(p.name for p in run_dir.iterdir()) == [f"empty-{i:03d}.log" for i in range(10)]
    assert budget.left == 0


# --- streamed role logs over real sshd -----------------------------------------------------------

FLOOD = r"""
import sys
out = sys.stdout.buffer
out.write(b"HEAD: the P2P notice\n")
for i in range(20000):
    out.write(b"spam %06d\n" % i)
for _ in range(256):  # 16 MiB on one line, without end
    out.write(b"x" * 65536)
out.write(b"\nlast line\n")
out.flush()
"""


def test_a_role_that_floods_keeps_a_capped_log_and_bounded_memory(ssh_hosts, monkeypatch, tmp_path, capsys):
    import shlex

    monkeypatch.setenv("MXBENCH_ROLE_LOG_MAX_BYTES", "65536")
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_IDS[0].upper()}", json.dumps(ssh_hosts.connection(0)))
    ssh = connections.launcher_for("ssh", {"ssh_connections": [CONN_IDS[0]]})
    host = ssh.hosts[0]
    role = Role("worker-0", "worker", host.address, (sys.executable, "-c", FLOOD), {})
    log = tmp_path / "worker-0.log"
    tracemalloc.start()
    try:
        remote = RemoteRole(ssh._client(host), host, role, shlex.join(role.argv), log, echo=True)
        remote.wait(120)
        assert remote.poll() == 0
        remote._reader.join(60)  # every byte streamed before the channel goes
        remote.close()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        ssh.close()
    assert peak < 8 * MiB, f"streaming 16 MiB on one line took {peak} bytes at its peak"
    data = log.read_bytes()
    sent = len(b"HEAD: the P2P notice\n") + 20000 * 12 + 16 * MiB + len(b"\nlast line\n")
    assert data.startswith(b"HEAD: the P2P notice\nspam 000000\n") and data.endswith(b"x\nlast line\n")
    assert len(data) < 65536 + 200
    assert f"[mxbench: {sent - 65536} bytes of this log were dropped here".encode() in data
    shown = "".join(line for line in capsys.readouterr().out.splitlines(True) if line.startswith("[worker-0@"))
    assert "[worker-0@mxbench_ssh_1] HEAD: the P2P notice" in shown
    assert f"the rest is in {log} only" in shown
    assert len(shown) < 2 * 65536 + 1000  # the task log got about as much as the role log keeps


def test_an_endless_line_is_shown_cut_not_buffered(ssh_hosts, monkeypatch, tmp_path, capsys):
    import shlex

    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_IDS[0].upper()}", json.dumps(ssh_hosts.connection(0)))
    ssh = connections.launcher_for("ssh", {"ssh_connections": [CONN_IDS[0]]})
    host = ssh.hosts[0]
    script = "import sys\nfor _ in range(64): sys.stdout.write('y' * 65536)\n"  # 4 MiB, no newline at all
    role = Role("worker-1", "worker", host.address, (sys.executable, "-c", script), {})
    try:
        remote = RemoteRole(ssh._client(host), host, role, shlex.join(role.argv), tmp_path / "w.log", echo=True)
        remote.wait(60)
        remote._reader.join(60)
        remote.close()
    finally:
        ssh.close()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[worker-1@")]
    assert lines and all(len(line) <= role_log.ECHO_LINE_CHARS + 100 for line in lines)
    assert lines[0].endswith("[line cut]")


# --- the work folder on a host ---------------------------------------------------------------------

def use_host1(monkeypatch, fleet, **extra):
    conn = fleet.connection(0, mxbench_python=train_python(), **extra)
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_IDS[0].upper()}", json.dumps(conn))
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_IDS[1].upper()}", json.dumps(fleet.connection(1)))
    return connections.launcher_for("ssh", {"ssh_connections": list(CONN_IDS)})


NOBODY = 65534
SHARED_GROUP = 100  # "users": a group of many, unlike the test user's own private group (root's "root")


def unsafe_workdir(tmp_path, kind):
    """A work folder another user of the host could get into, and what the refusal says."""
    if kind == "world-writable":
        folder = tmp_path / "shared"
        folder.mkdir()
        folder.chmod(0o777)
        os.chown(folder, -1, SHARED_GROUP)
        return folder, r"work folder .*/shared is writable by its group and others \(mode 0777\)"
    if kind == "group-writable":
        folder = tmp_path / "team"
        folder.mkdir()
        folder.chmod(0o770)
        os.chown(folder, -1, SHARED_GROUP)
        return folder, r"work folder .*/team is writable by its group \(mode 0770\)"
    if kind == "someone else's":
        folder = tmp_path / "theirs"
        folder.mkdir(mode=0o755)
        os.chown(folder, NOBODY, NOBODY)
        return folder, r"work folder .*/theirs belongs to (nobody|uid 65534), not to root"
    if kind == "a symlink to someone else's":
        target = tmp_path / "theirs"
        target.mkdir(mode=0o700)
        os.chown(target, NOBODY, NOBODY)
        (tmp_path / "link").symlink_to(target)
        return tmp_path / "link", r"work folder .*/theirs belongs to"
    if kind == "below an open folder":
        above = tmp_path / "open"
        above.mkdir()
        above.chmod(0o777)  # not sticky: anyone may rename what is in it
        return above / "mine", r"work folder .*/open/mine: .*/open above it is writable by others and not sticky"
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["world-writable", "group-writable", "someone else's", "a symlink to someone else's",
                                  "below an open folder"])
def test_a_work_folder_others_could_write_is_refused_by_name(ssh_hosts, monkeypatch, cifar_rec, tmp_path, kind):
    folder, why = unsafe_workdir(tmp_path, kind)
    ssh = use_host1(monkeypatch, ssh_hosts, mxbench_workdir=str(folder))
    run_dir = tmp_path / "dagrun" / "run"
    run_dir.mkdir(parents=True)
    with pytest.raises(MxbenchError, match=rf"host mxbench_ssh_1 \(127\.0\.0\.1\): preparing the run folder failed: "
                                           rf"{why}"):
        ssh.execute(ONE_HOST, cifar_rec, RunFolder(run_dir), 120)
    assert not list(Path(os.path.realpath(folder)).glob("runs")) and not (run_dir / "rank0.log").exists()


def test_a_sticky_shared_folder_above_is_fine_and_the_work_folder_is_made_private(ssh_hosts, monkeypatch, tmp_path):
    sticky = tmp_path / "scratch"
    sticky.mkdir()
    sticky.chmod(0o1777)  # like /tmp or /var/tmp: others cannot rename what is not theirs
    ssh = use_host1(monkeypatch, ssh_hosts, mxbench_workdir=str(sticky / "mxbench"))
    remote = {}
    try:
        ready = ssh._setup(ssh.hosts[0], RunFolder(tmp_path / "dagrun" / "run"), remote)
    finally:
        ssh.close()
    assert ready["workdir"] == str(sticky / "mxbench") and tuple(ready["python"]) >= (3, 9)
    for folder in (sticky / "mxbench", sticky / "mxbench" / "runs", Path(remote["mxbench_ssh_1"])):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_the_default_work_folder_is_under_the_ssh_users_home(ssh_hosts, monkeypatch, tmp_path):
    import pwd

    assert host_settings("c", "127.0.0.1", {}).workdir == "~/.cache/mxbench"
    conn = ssh_hosts.connection(0, mxbench_python=train_python())
    del conn["extra"]["mxbench_workdir"]
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_IDS[0].upper()}", json.dumps(conn))
    ssh = connections.launcher_for("ssh", {"ssh_connections": [CONN_IDS[0]]})
    remote = {}
    try:
        ready = ssh._setup(ssh.hosts[0], RunFolder(tmp_path / f"dagrun-{tmp_path.name}" / "run"), remote)
        home = pwd.getpwnam(ssh_hosts.user).pw_dir
        assert ready["workdir"] == os.path.realpath(f"{home}/.cache/mxbench")
        assert stat.S_IMODE(os.stat(ready["workdir"]).st_mode) & 0o022 == 0
        assert remote["mxbench_ssh_1"] == f"{ready['workdir']}/runs/dagrun-{tmp_path.name}/run/mxbench_ssh_1"
    finally:
        ssh._remove_run_folder(ssh.hosts[0], remote["mxbench_ssh_1"])
        ssh.close()
    assert not Path(remote["mxbench_ssh_1"]).parent.parent.exists()  # the run's and the DAG run's, left empty


def test_workdir_preparation_on_the_host_resolves_home_and_makes_folders_0700(monkeypatch, tmp_path):
    from mxbench_train.host_workdir import prepare

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir(mode=0o755)
    run = tmp_path / "home/.cache/mxbench/runs/d/r/h1"
    done = prepare("~/.cache/mxbench", "d", "r", "h1")
    assert done == {"workdir": str(tmp_path / "home/.cache/mxbench"), "run_dir": str(run),
                    "python": list(sys.version_info[:2])}
    for name in ("home/.cache/mxbench", "home/.cache/mxbench/runs", "home/.cache/mxbench/runs/d",
                 "home/.cache/mxbench/runs/d/r", "home/.cache/mxbench/runs/d/r/h1",
                 "home/.cache/mxbench/runs/d/r/h1/pids"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o700, name
    (run / "stale.log").write_text("an earlier attempt's")
    other = prepare("~/.cache/mxbench", "d", "r", "h2")["run_dir"]  # another host, the same (NFS) home
    (Path(other) / "rank1.log").write_text("host 2's")
    assert prepare("~/.cache/mxbench", "d", "r", "h1") == done
    assert sorted(p.name for p in run.iterdir()) == ["pids"]  # made afresh
    assert (Path(other) / "rank1.log").read_text() == "host 2's"  # and the other host's left alone
    for bad in ("..", "a/b", ""):
        with pytest.raises(MxbenchError, match="not a plain folder name"):
            prepare("~/.cache/mxbench", bad, "r", "h1")
        with pytest.raises(MxbenchError, match="not a plain folder name"):
            prepare("~/.cache/mxbench", "d", "r", bad)


def test_a_folder_only_the_users_private_group_may_write_is_fine(ssh_hosts, monkeypatch, tmp_path):
    """Debian/Ubuntu give each user a group of their own (USERGROUPS_ENAB); under umask 002 the
    user's ~/.cache, or a work folder they made, is then 0775/0770: no one else can write it."""
    import grp
    import pwd

    user = pwd.getpwnam(ssh_hosts.user)
    assert grp.getgrgid(user.pw_gid).gr_name == user.pw_name, "the test needs a user with a private group"
    cache = tmp_path / "home" / ".cache"
    cache.mkdir(parents=True)
    workdir = cache / "mxbench"
    workdir.mkdir()
    for folder, mode in ((cache, 0o775), (workdir, 0o770)):
        os.chown(folder, user.pw_uid, user.pw_gid)
        folder.chmod(mode)
    ssh = use_host1(monkeypatch, ssh_hosts, mxbench_workdir=str(workdir))
    remote = {}
    try:
        ready = ssh._setup(ssh.hosts[0], RunFolder(tmp_path / "dagrun" / "run"), remote)
    finally:
        ssh.close()
    assert ready["workdir"] == str(workdir) and Path(remote["mxbench_ssh_1"]).is_dir()


def test_a_group_named_after_the_user_but_with_another_member_is_not_private(monkeypatch, tmp_path):
    import grp

    from mxbench_train import host_folders, host_workdir

    real = grp.getgrgid
    monkeypatch.setattr(host_folders.grp, "getgrgid",  # as if another account were listed in the group
                        lambda gid: grp.struct_group((real(gid).gr_name, "x", gid, ["postgres"])))
    cache = tmp_path / "home" / ".cache"
    cache.mkdir(parents=True)
    cache.chmod(0o775)
    with pytest.raises(MxbenchError, match=r"work folder .*/\.cache/mxbench: .*/\.cache above it is writable by its "
                                           r"group and not sticky"):
        host_workdir.prepare(str(cache / "mxbench"), "d", "r", "h1")


# --- a training env installed with pip install --user ---------------------------------------------

def user_site_python(tmp_path):
    """This project's base interpreter (not a venv: venvs ignore the user's site-packages), seeing
    mxbench_train only through its user site-packages, where ``pip install --user -e`` puts a .pth
    (PYTHONUSERBASE puts that user site here rather than in the SSH user's real home)."""
    python = str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")
    site = tmp_path / "userbase" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    site.mkdir(parents=True)
    (site / "mxbench_train.pth").write_text(str(Path(__file__).resolve().parents[3] / "tasks") + "\n")
    wrapper = tmp_path / "python-user-site"
    wrapper.write_text(f"#!/bin/sh\nexec env PYTHONUSERBASE={tmp_path / 'userbase'} {python} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.mark.parametrize("flag", ["the interpreter's own", "-I"])
def test_a_user_site_install_is_set_up_from_python_3_11_and_named_before(ssh_hosts, monkeypatch, tmp_path, flag):
    """From 3.11 every command runs with -P, which keeps the user's site-packages; -I (older
    interpreters, forced here) hides them, and the error says what the training env must be."""
    if flag == "-I":
        monkeypatch.setattr(ssh_launcher, "isolation_flag", lambda version: "-I")
    python = user_site_python(tmp_path)
    conn = ssh_hosts.connection(0, mxbench_python=python, mxbench_workdir=str(tmp_path / "work"))
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_IDS[0].upper()}", json.dumps(conn))
    ssh = connections.launcher_for("ssh", {"ssh_connections": [CONN_IDS[0]]})
    remote = {}
    try:
        if flag == "-I":
            with pytest.raises(MxbenchError) as refused:
                ssh._setup(ssh.hosts[0], RunFolder(tmp_path / "dagrun" / "run"), remote)
            assert str(refused.value).startswith(
                f"host mxbench_ssh_1 (127.0.0.1): preparing the run folder failed: the training interpreter "
                f"{python!r} there cannot run mxbench_train (the connection's extra mxbench_python, or its "
                "mxbench_builds entry, must name one that has it) (its Python "
                "is older than 3.11, so mxbench runs it with -I, which ignores the user's site-packages: the "
                "training env must be a venv or a system install, not pip install --user): ")
        else:
            assert sys.version_info >= (3, 11), "this project's interpreter is older than 3.11"
            ready = ssh._setup(ssh.hosts[0], RunFolder(tmp_path / "dagrun" / "run"), remote)
            assert ready["probe"]["cores"] > 0 and Path(remote["mxbench_ssh_1"]).is_dir()
            assert ssh.target().hosts == 1  # the probe alone, as the DAG asks it first
    finally:
        ssh.close()


# --- nothing a host's user plants in the run folder is imported ----------------------------------

PLANTED = """import pathlib
pathlib.Path({marker!r}).write_text("planted mxbench_train imported")
raise SystemExit(99)
"""


@pytest.mark.parametrize("flag", ["-P", "-I"])
def test_a_planted_mxbench_train_in_the_run_folder_is_not_imported(ssh_hosts, monkeypatch, cifar_rec, tmp_path, flag):
    """-P where the interpreter has it (3.11+), -I before: either keeps the run folder off sys.path."""
    marker = tmp_path / "planted-ran"
    ssh = use_host1(monkeypatch, ssh_hosts)
    monkeypatch.setattr(ssh_launcher, "isolation_flag", lambda version: flag)
    run_dir = tmp_path / f"dagrun-{tmp_path.name}" / "run"
    run_dir.mkdir(parents=True)
    host_dir = ssh_hosts.hosts[0].workdir
    stage = SshLauncher._stage_data

    def plant_then_stage(self, hosts, data_dir):  # after the run folder is made, before any role starts
        for folder in (host_dir / "runs" / run_dir.parent.name / run_dir.name / CONN_IDS[0], host_dir):
            (folder / "mxbench_train").mkdir()
            (folder / "mxbench_train" / "__init__.py").write_text(PLANTED.format(marker=str(marker)))
            (folder / "mxbench_train" / "__main__.py").write_text("")
        return stage(self, hosts, data_dir)

    monkeypatch.setattr(SshLauncher, "_stage_data", plant_then_stage)
    try:
        launched = ssh.execute(ONE_HOST, cifar_rec, RunFolder(run_dir), 300)
        results = launched.results
    finally:
        import shutil

        shutil.rmtree(host_dir / "mxbench_train", ignore_errors=True)
    assert not marker.exists()
    assert [r.returncode for r in results] == [0] and "Speed:" in (run_dir / "rank0.log").read_text()


def test_roles_run_isolated_on_every_interpreter():
    assert (isolation_flag((3, 11)), isolation_flag((3, 13)), isolation_flag((3, 9))) == ("-P", "-P", "-I")
    host = SshHost("h", "127.0.0.2", python="/opt/py/bin/python")
    role = Role("server-0", "server", "127.0.0.2", (host.python, "-m", "mxbench_train", "serve"), {})
    words = role_command(host, role, "/w/runs/d/r", "-I").split()
    assert words[words.index("exec") + 2:words.index("exec") + 4] == [host.python, "-I"]
    assert words[-4:] == [host.python, "-I", "-m", "mxbench_train", "serve"][-4:] and words.count("-I") == 2


def test_keep_failed_runs_is_read_from_the_connection():
    assert host_settings("c", "127.0.0.1", {}).keep_failed_runs is False
    assert host_settings("c", "127.0.0.1", {"mxbench_keep_failed_runs": True}).keep_failed_runs is True
    assert host_settings("c", "127.0.0.1", {"mxbench_keep_failed_runs": "true"}).keep_failed_runs is True
    with pytest.raises(MxbenchError, match="mxbench_keep_failed_runs must be true or false"):
        host_settings("c", "127.0.0.1", {"mxbench_keep_failed_runs": "sometimes"})


# --- a host whose answers have no end --------------------------------------------------------------

HOSTILE_HOST = Path(__file__).parents[2] / "fixtures" / "bin" / "python-hostile-host"
ANSWER_BOUND = 512 << 10


def hostile_python(tmp_path, mode, command, answer=None):
    """An mxbench_python whose ``command`` answers as ``mode`` says (tests/fixtures/bin/
    python-hostile-host); (its path, the file that counts the bytes it got out)."""
    import shlex

    sent = tmp_path / f"sent-{mode}"
    variables = {"MXBENCH_HOSTILE": mode, "MXBENCH_HOSTILE_COMMAND": command, "MXBENCH_HOSTILE_COUNT": str(sent),
                 **({"MXBENCH_HOSTILE_ANSWER": answer} if answer is not None else {})}
    wrapper = tmp_path / f"python-hostile-{mode}-{abs(hash((command, answer)))}"
    wrapper.write_text("#!/bin/sh\nexec env " + shlex.join([f"{k}={v}" for k, v in variables.items()])
                       + f" {shlex.quote(train_python())} {shlex.quote(str(HOSTILE_HOST))} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper), sent


def hostile_first_host(monkeypatch, fleet, python):
    """mxbench_ssh_1 with the hostile interpreter, mxbench_ssh_2 a fine one."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_IDS[0].upper()}", json.dumps(fleet.connection(0, mxbench_python=python)))
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_IDS[1].upper()}",
                       json.dumps(fleet.connection(1, mxbench_python=train_python())))
    return connections.launcher_for("ssh", {"ssh_connections": list(CONN_IDS)})


def bounded(call, seconds=300):
    """``call()``, which must return: the bound under test is on bytes, this only keeps a hang
    from hanging the suite."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1)
    try:
        return pool.submit(call).result(timeout=seconds)
    finally:
        pool.shutdown(wait=False)


@pytest.mark.parametrize("mode", ["flood", "forever"])
def test_a_host_whose_probe_answer_has_no_end_is_cut_at_the_bound_and_named(ssh_hosts, monkeypatch, tmp_path, mode):
    """A host that answers the training-env probe with 128 MiB, or with an answer that never ends:
    read up to MXBENCH_SSH_ANSWER_MAX_BYTES and no further, in bounded memory; the ssh runs fail
    naming the host and the bound, the local launcher's go on."""
    from mxbench import launchers
    from mxbench.stages import pipeline

    monkeypatch.setenv("MXBENCH_SSH_ANSWER_MAX_BYTES", str(ANSWER_BOUND))
    python, sent = hostile_python(tmp_path, mode, "mxbench_train probe")
    ssh = hostile_first_host(monkeypatch, ssh_hosts, python)
    tracemalloc.start()
    try:
        targets, unavailable = bounded(lambda: pipeline.targets_for(
            ["ssh", "local"], {"ssh": ssh, "local": launchers.get("local")}.get))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert unavailable == {"ssh": "the ssh target is unavailable: host mxbench_ssh_1 (127.0.0.1): probing the "
                                  f"training env failed: its answer passed {ANSWER_BOUND} bytes on stdout "
                                  "(MXBENCH_SSH_ANSWER_MAX_BYTES): read no further"}
    assert list(targets) == ["local"]
    # the host got out what SSH's flow control let it: the bound and a window or two, never 128 MiB
    assert int(sent.read_text()) < 16 * MiB, int(sent.read_text())
    assert peak < 12 * MiB, f"reading the host's answer took {peak} bytes at its peak"


def test_a_host_that_answers_a_byte_a_second_is_dropped_at_the_commands_time_bound(ssh_hosts, monkeypatch, tmp_path):
    """Each read comes within the old idle timeout, so only a bound on the whole command ends it."""
    from mxbench.launchers.ssh.commands import probe_command

    python, _ = hostile_python(tmp_path, "trickle", "mxbench_train probe")
    ssh = hostile_first_host(monkeypatch, ssh_hosts, python)
    try:
        code, out, err = bounded(lambda: ssh_launcher.run_command(
            ssh._client(ssh.hosts[0]), probe_command(ssh.hosts[0]), timeout=4), seconds=120)
    finally:
        ssh.close()
    assert (code, out, err) == (-1, "", "no answer within 4 s")


def test_a_host_whose_quiet_probe_floods_is_recorded_not_quiet_checked(ssh_hosts, monkeypatch, tmp_path):
    """The quiet probe goes through the same bounded read: the check never raises and names the host."""
    from mxbench.hosts import quiet_gate

    monkeypatch.setenv("MXBENCH_SSH_ANSWER_MAX_BYTES", str(ANSWER_BOUND))
    python, sent = hostile_python(tmp_path, "forever", "mxbench_train quiet-probe")
    ssh = hostile_first_host(monkeypatch, ssh_hosts, python)
    record = bounded(lambda: quiet_gate.check(ssh, Variant("tiny2", "2 hosts", 32, hosts=2, workers=2), 5))
    assert record["quiet"] is None
    assert record["why"] == ("not checked: host mxbench_ssh_1 (127.0.0.1): looking at how busy the host is failed: "
                             f"its answer passed {ANSWER_BOUND} bytes on stdout (MXBENCH_SSH_ANSWER_MAX_BYTES): "
                             "read no further")
    assert int(sent.read_text()) < 16 * MiB


# --- a host whose answers are malformed ------------------------------------------------------------

@pytest.mark.parametrize("answer, cause", [
    ("[1, 2]", "the answer is an array, not object"),
    ('{"cores": 4, "port": null, "machine": "m"}', "the answer lacks 'gpus'"),
    ('{"cores": "4", "gpus": 0}', "cores is a string, not integer")])
def test_a_malformed_probe_answer_fails_that_launchers_runs_not_the_expand(ssh_hosts, monkeypatch, tmp_path,
                                                                           answer, cause):
    from mxbench import launchers
    from mxbench.stages import pipeline

    python, _ = hostile_python(tmp_path, "answer", "mxbench_train probe", answer)
    ssh = hostile_first_host(monkeypatch, ssh_hosts, python)
    targets, unavailable = pipeline.targets_for(["ssh", "local"], {"ssh": ssh, "local": launchers.get("local")}.get)
    assert unavailable == {"ssh": "the ssh target is unavailable: host mxbench_ssh_1 (127.0.0.1): probing the "
                                  f"training env answered malformed: {cause}"}
    assert list(targets) == ["local"]


@pytest.mark.parametrize("answer, cause", [
    ('{"foreign_cores": 3.0, "foreign_top": {"pid": 1, "cores": 3.0}}', "foreign_top is an object, not array"),
    ('{"foreign_cores": 3.0, "foreign_top": [{"pid": 1, "name": "x", "cores": "3"}]}',
     "foreign_top.0.cores is a string, not number"),
    ('{"foreign_cores": 3.0, "foreign_top": [{"pid": 1, "name": "x", "cores": null}]}',
     "foreign_top.0.cores is null, not number")])
def test_a_malformed_quiet_reading_fails_that_hosts_check_never_the_run(ssh_hosts, monkeypatch, tmp_path, answer,
                                                                        cause):
    from mxbench.hosts import quiet_gate

    python, _ = hostile_python(tmp_path, "answer", "mxbench_train quiet-probe", answer)
    ssh = hostile_first_host(monkeypatch, ssh_hosts, python)
    # the quiet probe answers {conn_id: reading}: the hostile host's reading is the answer itself
    record = quiet_gate.check(ssh, Variant("tiny2", "2 hosts", 32, hosts=2, workers=2), 5)
    assert record["quiet"] is None and record["samples"] == 1
    assert record["why"] == f"not checked: mxbench_ssh_1: its reading is malformed ({cause})"
    assert record["readings"]["mxbench_ssh_1"] == {"malformed": cause}
    assert record["readings"]["mxbench_ssh_2"]["foreign_cores"] >= 0  # the other host's reading is kept


MALFORMED_FACTS = {
    "gpu a string": ({"cpu_model": "x", "cpu_count": 2, "gpu": "A100"}, "gpu is a string, not object or null"),
    "gpus a list of strings": ({"cpu_model": "x", "cpu_count": 2, "gpu": {"available": True, "gpus": ["A100"]}},
                               "gpu.gpus.0 is a string, not object"),
    "a list": (["A100", "A100"], "the answer is an array, not object")}


@pytest.mark.parametrize("case", list(MALFORMED_FACTS))
def test_malformed_machine_facts_fail_that_hosts_run_and_join_and_store_complete(ssh_hosts, monkeypatch, tmp_path,
                                                                                 case):
    """A host's trainer reports machine facts of the wrong shape: through expand, the run tasks,
    parse, join (with the stored A/A noise lookup) and store, its run fails naming the cause and
    the local run beside it is measured and stored."""
    from mxbench import launchers, store
    from mxbench.stages import pipeline, run_stage

    facts, cause = MALFORMED_FACTS[case]
    python, _ = hostile_python(tmp_path, "facts", "mxbench_train train", json.dumps(facts))
    ssh = hostile_first_host(monkeypatch, ssh_hosts, python)
    launcher_for = {"ssh": ssh, "local": launchers.get("local")}.get
    params = {"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"], "launchers": ["ssh", "local"],
              "epochs": 1, "synthetic_images": 500}
    dag_dir, url = tmp_path / "dag-run", f"sqlite:///{tmp_path / 'results.db'}"
    targets, unavailable = pipeline.targets_for(["ssh", "local"], launcher_for)
    runs = pipeline.expand(params, DagRunFolder(dag_dir), targets, unavailable)
    data = pipeline.prepare_data(params, DagRunFolder(dag_dir), tmp_path / "data")
    for run in runs:
        run_stage.run_one(run, DagRunFolder(dag_dir), data, 600, launcher_for)  # the host's trainer exits 0
    pipeline.parse_all(DagRunFolder(dag_dir), launcher_for)
    pipeline.join(DagRunFolder(dag_dir), pipeline.stored_aa_noise(DagRunFolder(dag_dir), url))
    store.migrate(url)
    stored = store.record_dag_run(url, DagRunFolder(dag_dir), dag_id="mxbench_benchmark", run_id="manual__hostile",
                                  trigger="manual")
    table = pd.read_csv(dag_dir / "tables" / "runs.csv").set_index("launcher")
    assert table.loc["ssh", "status"] == "failed"
    assert table.loc["ssh", "cause"] == (f"parse: the machine facts its trainer reported are malformed (environment: "
                                         f"{cause}): its numbers are not kept")
    assert table.loc["local", "status"] == "ok" and table.loc["local", "samples_per_sec"] > 0
    assert stored["repeats"] == 2 and list(stored["fingerprints"]) == ["local"]
    history = store.history(url, "cpu1-bs32")
    assert sorted(history["status"]) == ["failed", "ok"]
