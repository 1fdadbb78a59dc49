"""One role on an SSH host: ``RemoteRole``, the handle ``run_plan`` drives for ``ssh.SshLauncher``."""
import threading
import time
from pathlib import Path
from typing import Optional

from mxbench.launchers.base import RoleLogSink
from mxbench.launchers.ssh.commands import HEARTBEAT_S, SshHost, link_lost, peer_silent
from mxbench_train.errors import MxbenchError
from mxbench_train.plan_runner import describe_exit
from mxbench_train.role_plan import Role


class RemoteRole:
    """A role running on a host through one SSH channel; its output streams into its log, and a
    worker's into the task log too (``RoleLogSink``: capped, long lines cut).

    It sends the supervisor a heartbeat byte every HEARTBEAT_S: a connection that dies without
    a word (a partition; stock sshd never notices) stops the role after HEARTBEAT_TIMEOUT_S.
    """

    def __init__(self, client, host: SshHost, role: Role, command: str, log_path: Path, echo: bool = False):
        import paramiko

        self.host, self.role, self.pid = host, role, None  # the remote pid lives in its pid file there
        self._code = None
        self._lost: Optional[BaseException] = None  # why the connection ended, where it did
        self._peer: Optional[tuple] = None
        self.link_fault: Optional[str] = None  # the host's link, where its silence lost the connection
        self._beat = time.monotonic()
        self.chan = None
        try:
            self._peer = client.get_transport().getpeername()  # asked now: a dead socket has none
            self.chan = client.get_transport().open_session()
            self.chan.set_combine_stderr(True)
            self.chan.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            if self.chan is not None:
                self.chan.close()
            hint = (" (sshd limits sessions per connection: its MaxSessions must exceed the roles per host)"
                    if isinstance(exc, paramiko.ChannelException) else "")
            raise MxbenchError(f"cannot start role {role.name} on {host}: {exc or type(exc).__name__}{hint}"
                               ) from None
        self._log = RoleLogSink(log_path, role.name, host.conn_id, echo)
        self._reader = threading.Thread(target=self._copy, daemon=True, name=f"ssh-{role.name}")
        self._reader.start()

    def _copy(self):
        while True:
            try:
                data = self.chan.recv(65536)
            except Exception:  # the channel or the connection is gone
                break
            if not data:
                break
            self._log.write(data)

    @property
    def returncode(self) -> Optional[int]:
        return self._code

    def poll(self) -> Optional[int]:
        if self._code is None and self.chan.exit_status_ready():
            # sshd may send the status before the last output: let the log catch up first, so
            # that an error quoting the log's last line quotes the right one
            self._reader.join(timeout=2)
            if not self._reader.is_alive():
                self._log.flush()  # a capped log writes its tail now and then: all of it, for the error
            self._code = self.chan.recv_exit_status()  # -1: the channel closed without a status
            if self._code < 0:
                transport = self.chan.get_transport()
                # read, not taken (get_exception clears it): the host's other roles want it too
                self._lost = getattr(transport, "saved_exception", None)
        elif self._code is None and time.monotonic() - self._beat > HEARTBEAT_S:
            self._beat = time.monotonic()
            try:
                self.chan.send(b".")
            except Exception:
                pass  # the connection is gone: exit_status_ready() says so next
        return self._code

    def describe(self) -> str:
        if self._code is None or self._code < 0:
            silent = peer_silent(self._peer) if self._peer else None
            if silent:
                self.link_fault = f"{self.host}: {silent}"
            why = silent or link_lost(self._lost)
            return f"lost its SSH connection to {self.host} (no exit status came back{': ' + why if why else ''})"
        return describe_exit(self._code)

    def terminate(self):
        """EOF on the supervisor's stdin: it stops the role's group (TERM, then KILL)."""
        try:
            self.chan.shutdown_write()
        except Exception:
            pass

    def kill(self):
        self.chan.close()

    def wait(self, timeout: float):
        end = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < end:
            time.sleep(0.05)

    def close(self):
        self._reader.join(timeout=2)  # the output still in flight, before the channel goes
        self.chan.close()
        self._reader.join(timeout=2)
        self._log.close()

    def record(self):
        return None  # nothing local to reap: the supervisor's pid file on the host is
