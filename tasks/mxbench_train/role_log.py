"""A role's streamed log with a size cap: what an SSH host or a pod sends is untrusted.

A role that prints without end (a hostile host, a trainer in a loop) must not fill the Airflow
worker's disk. ``CappedLog`` keeps the first half of the cap as it came, then only the latest
half: the file is always ``head + one marker line + tail``, and the marker says how many bytes
were dropped between them. Start-up notices (MXNet's P2P table) sit in the head, the last
lines an error quotes sit in the tail. Stdlib only: the orchestration side imports it.
"""
import os
import time
from pathlib import Path

ROLE_LOG_MAX_BYTES = 32 << 20
# once over the cap, the tail is rewritten at most this often (and at close): an endless stream
# costs one write of the tail per interval, not per chunk
REWRITE_S = 1.0


def role_log_max_bytes() -> int:
    """MXBENCH_ROLE_LOG_MAX_BYTES, else ROLE_LOG_MAX_BYTES."""
    text = os.environ.get("MXBENCH_ROLE_LOG_MAX_BYTES", "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else ROLE_LOG_MAX_BYTES


def dropped_marker(dropped: int, limit: int) -> bytes:
    return (f"\n[mxbench: {dropped} bytes of this log were dropped here: a role log keeps its first and "
            f"last {limit // 2} bytes (MXBENCH_ROLE_LOG_MAX_BYTES={limit})]\n").encode()


class CappedLog:
    """A binary log file of at most about ``limit`` bytes (plus the one marker line)."""

    def __init__(self, path, limit: int = 0):
        self.path = Path(path)
        self.limit = limit or role_log_max_bytes()
        self.head_max = self.limit // 2
        self.tail_max = self.limit - self.head_max
        self.dropped = 0
        self._file = open(self.path, "wb")
        self._head = 0
        self._tail = bytearray()
        self._written_at = 0.0

    def write(self, data: bytes) -> None:
        if not data:
            return
        room = self.head_max - self._head
        if room > 0:
            self._file.write(data[:room])
            self._head += min(room, len(data))
            data = data[room:]
            if not data:
                self._file.flush()
                return
        self._tail += data
        over = len(self._tail) - self.tail_max
        if over > 0:
            del self._tail[:over]
            self.dropped += over
        if time.monotonic() - self._written_at >= REWRITE_S:
            self.flush()

    def flush(self) -> None:
        """Write the tail behind the head (with the marker once something was dropped)."""
        if self._file.closed:
            return
        self._file.seek(self._head)
        if self.dropped:
            self._file.write(dropped_marker(self.dropped, self.limit))
        self._file.write(self._tail)
        self._file.truncate()
        self._file.flush()
        self._written_at = time.monotonic()

    def close(self) -> None:
        if not self._file.closed:
            self.flush()
            self._file.close()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
