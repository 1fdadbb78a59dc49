"""A role's streamed output, bounded: what an SSH host or a pod sends is untrusted.

Shared by the launchers that stream a role's output from elsewhere (ssh, kubernetes), so that
both cap it by one rule:

- ``CappedLog``: ``roles/<role>.log`` keeps the first half of its cap as it came, then only the
  latest half; once something was dropped the file is ``head + one marker line + tail``, the
  marker saying how many bytes are gone. Start-up notices (MXNet's P2P table) sit in the head,
  the last lines an error quotes in the tail.
- ``lines_of``: lines of a byte stream, a line that never ends coming in bounded pieces.
- ``TaskLogEcho``: the workers' lines in the Airflow task log, each cut short, and no more in all
  than half a role log's cap.

Stdlib only: the orchestration side imports it.
"""
import os
import time
from pathlib import Path
from typing import Iterable, Iterator, List

ROLE_LOG_MAX_BYTES = 32 << 20
MAX_LINE_BYTES = 64 << 10  # a longer line comes in pieces: what waits for a newline stays bounded
ECHO_LINE_CHARS = 1000  # a line echoed to the task log is cut here
# once something was dropped, the tail is rewritten behind the marker at most this often (and on
# flush/close): an endless stream costs one write of the tail per interval, not one per chunk
REWRITE_S = 30.0


def role_log_max_bytes() -> int:
    """MXBENCH_ROLE_LOG_MAX_BYTES, else ROLE_LOG_MAX_BYTES."""
    text = os.environ.get("MXBENCH_ROLE_LOG_MAX_BYTES", "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else ROLE_LOG_MAX_BYTES


def dropped_marker(dropped: int, limit: int) -> bytes:
    return (f"\n[mxbench: {dropped} bytes of this log were dropped here: a role log keeps its first and "
            f"last {limit // 2} bytes (MXBENCH_ROLE_LOG_MAX_BYTES={limit})]\n").encode()


class CappedLog:
    """A binary log file of at most about ``limit`` bytes (plus the one marker line).

    Appends as it comes until the cap is reached; only then is the tail held in memory (at most
    half the cap) and written behind the marker now and then.
    """

    def __init__(self, path, limit: int = 0):
        self.path = Path(path)
        self.limit = limit or role_log_max_bytes()
        self.head_max = self.limit // 2
        self.tail_max = self.limit - self.head_max
        self.written = 0  # bytes given to write(), kept or not
        self.dropped = 0
        self._file = open(self.path, "w+b")
        self._head = 0
        self._appended = 0  # bytes after the head, while nothing was dropped
        self._tail = bytearray()  # the tail, once something was dropped
        self._rewritten_at = 0.0

    def write(self, data: bytes) -> None:
        if not data or self._file.closed:  # a reader thread outliving close() writes nothing more
            return
        self.written += len(data)
        room = self.head_max - self._head
        if room > 0:
            self._file.write(data[:room])
            self._head += min(room, len(data))
            data = data[room:]
        if data and not self.dropped and self._appended + len(data) <= self.tail_max:
            self._file.write(data)
            self._appended += len(data)
            data = b""
        if not data:
            self._file.flush()
            return
        if not self.dropped:  # the first drop: what was appended after the head becomes the tail
            self._file.seek(self._head)
            self._tail = bytearray(self._file.read(self._appended))
        self._tail += data
        over = len(self._tail) - self.tail_max
        del self._tail[:over]
        self.dropped += over
        if time.monotonic() - self._rewritten_at >= REWRITE_S:
            self.flush()

    def flush(self) -> None:
        """Make the file whole: head, then (once something was dropped) the marker and the tail."""
        if self._file.closed:
            return
        if self.dropped:
            self._file.seek(self._head)
            self._file.write(dropped_marker(self.dropped, self.limit))
            self._file.write(self._tail)
            self._file.truncate()
            self._rewritten_at = time.monotonic()
        self._file.flush()

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


class LineSplitter:
    """Bytes in, lines out (without their newline); at most ``max_line`` bytes wait for a newline."""

    def __init__(self, max_line: int = MAX_LINE_BYTES):
        self.max_line = max_line
        self._pending = b""

    def feed(self, chunk: bytes) -> List[bytes]:
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        out = [piece for line in lines for piece in _pieces(line, self.max_line)]
        while len(self._pending) > self.max_line:
            out.append(self._pending[:self.max_line])
            self._pending = self._pending[self.max_line:]
        return out

    def end(self) -> List[bytes]:
        rest, self._pending = self._pending, b""
        return [rest] if rest else []


def lines_of(chunks: Iterable[bytes], max_line: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """The lines of a byte stream, without their newline; a line longer than ``max_line`` comes in
    pieces of ``max_line`` bytes."""
    splitter = LineSplitter(max_line)
    for chunk in chunks:
        yield from splitter.feed(chunk)
    yield from splitter.end()


def _pieces(line: bytes, size: int):
    if len(line) <= size:
        yield line
        return
    for i in range(0, len(line), size):
        yield line[i:i + size]


class TaskLogEcho:
    """A role's lines in the Airflow task log, prefixed ``[role]``: each cut at ECHO_LINE_CHARS,
    and, past ``budget`` characters, one last line saying where the rest is."""

    def __init__(self, prefix: str, budget: int, rest_in: str):
        self.prefix, self.left, self.rest_in = prefix, budget, rest_in

    def line(self, text: str) -> None:
        if self.left <= 0:
            return
        if len(text) > ECHO_LINE_CHARS:
            text = text[:ECHO_LINE_CHARS] + " [line cut]"
        self.left -= len(self.prefix) + len(text) + 2
        if self.left > 0:
            print(f"{self.prefix} {text}", flush=True)
        else:
            print(f"{self.prefix} [mxbench: more output than the task log takes from a role: the rest is in "
                  f"{self.rest_in} only]", flush=True)
