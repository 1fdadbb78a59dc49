"""Read any MXNet training log into tidy tables; never die on a line.

Reads what MXNet's Module API and ``Speedometer`` print, in any vintage
(``Batch [20]`` of 2016 or ``Batch [0-20]`` of 1.9), with or without the
``Node[rank]`` prefix, plus MXNet's P2P notice and other C++ warnings and
mxbench's structured ``:::MXBENCH`` events. Lines of several workers may
interleave in one stream untagged (the seed's two-machine log): the k-th line
for the same epoch and batch is then taken to be worker k's. A file holding a
restarted run (two runs appended) is measured on its last run.

Any input is read in time linear in its size and in bounded memory: lines are
read in pieces of at most ``MAX_LINE`` characters, no regex can start a match
inside a word, and only a sample of the unparsed lines is kept.
"""
import re
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, List, Optional, Tuple

import pandas as pd

from mxbench_train.events import parse_event

NODE = re.compile(r"Node\[(\d+)\]")
SPEED = re.compile(r"Epoch\[(\d+)\] Batch \[(?:\d+-)?(\d+)\]\s+Speed: ([\d.]+|nan|inf) samples/sec(.*)")
# The lookbehind lets a match start only at a word's start: without it finditer retries
# from every character of a long word, quadratic in the line's length
METRIC = re.compile(r"(?<![\w-])(?:Train-)?([\w-]+)=([-\d.eE+]+|nan|inf)")
EPOCH_VALUE = re.compile(r"Epoch\[(\d+)\] (Time cost|Train-accuracy|Validation-accuracy)=([-\d.eE+]+|nan)")
P2P_NOTICE = re.compile(r"only (\d+) out of (\d+) GPU pairs are enabled direct access")
P2P_ROW = re.compile(r"(?:^|[\s:])([.v]{2,})\s*$")
# MXNet's C++ side (dmlc logging, to stderr): "[12:00:01] ../src/kvstore/./comm.h:757: message"
CPP_NOTICE = re.compile(r"\[\d\d:\d\d:\d\d\] ([^\s:]+\.(?:cc|h|cpp|cu|cuh|hpp):\d+: .*)")
# MXNet's own lines that carry nothing the report needs
KNOWN = re.compile(r"Resetting Data Iterator|Change learning rate|Saved checkpoint|Epoch\[\d+\] Train-")

MAX_LINE = 64 * 1024  # characters read at once: a file without newlines never becomes one huge string
MAX_UNPARSED = 100  # unparsed lines kept as a sample; all are counted
MAX_UNPARSED_CHARS = 1000  # of each kept line
MAX_NOTICES = 20  # distinct C++ notices kept
# C++ notices every run prints, which tell a reader of the report nothing
ROUTINE_NOTICE = re.compile(r"ImageRecordIOParser2: .* threads for decoding|Subgraph backend \w+ is activated|"
                            r"Using Pooled \(\w+\) StorageManager")
MAX_RESTARTS = 100  # the last restarts kept: the last tells where the measured run begins

SPEED_COLUMNS = ["worker", "epoch", "batch", "samples_per_sec", "train_accuracy"]
EPOCH_COLUMNS = ["worker", "epoch", "time_cost_s", "train_accuracy", "validation_accuracy"]
EPOCH_FIELDS = {"Time cost": "time_cost_s", "Train-accuracy": "train_accuracy",
                "Validation-accuracy": "validation_accuracy"}


@dataclass
class ParsedLog:
    speed: pd.DataFrame  # one row per worker x Speedometer reading (of the last run)
    epochs: pd.DataFrame  # one row per worker x epoch (of the last run)
    events: List[dict] = field(default_factory=list)  # of the last run
    p2p: Optional[dict] = None
    unparsed: List[str] = field(default_factory=list)  # the first MAX_UNPARSED unparsed lines
    unparsed_count: int = 0  # all unparsed lines (pieces of over-long lines included)
    notices: List[str] = field(default_factory=list)  # distinct C++ notices, "file.cc:123: message"
    restarts: List[int] = field(default_factory=list)  # 1-based lines where a new run began (the last 100)

    def __post_init__(self):
        self.unparsed_count = max(self.unparsed_count, len(self.unparsed))

    @property
    def workers(self) -> int:
        declared = [e.get("num_workers") for e in self.events if e.get("event") == "run_start"]
        seen = set(self.speed["worker"]) | set(self.epochs["worker"])
        return max([len(seen), *[d for d in declared if isinstance(d, int)]], default=0)

    def restart_note(self) -> str:
        """One line for people, '' when the log holds a single run."""
        if not self.restarts:
            return ""
        lines = ", ".join(map(str, self.restarts))
        return f"restarted at line{'s' if len(self.restarts) > 1 else ''} {lines}; measured the last run"


def worth_reporting(notice: str) -> bool:
    return not ROUTINE_NOTICE.search(notice)


class _Workers:
    """Who printed a line, and whether the line shows that the job started over.

    An untagged line is the k-th repeat of its key, so worker k's. A repeat may
    also be a second run appended to the file; dist_sync workers move in lock
    step, so no worker still prints inside an epoch that every known worker has
    finished (printed its ``Time cost``): such a line begins a new run. So does
    a tagged worker's line (or a per-rank file's) in an epoch it has finished.
    """

    def __init__(self, fixed: Optional[int]):
        self.fixed, self.declared = fixed, 0
        self.seen, self.ids = Counter(), set()
        self.finished = Counter()  # epoch -> untagged Time cost lines
        self.last_finished = {}  # n -> the last epoch with n untagged Time cost lines: O(1) a line
        self.done = {}  # worker -> the last epoch it finished (tagged lines, or a fixed worker)

    def tag(self, line: str) -> Optional[int]:
        """The line's worker when it names one (``Node[r]`` or a per-rank file), else None."""
        tagged = NODE.search(line) if "Node[" in line else None
        return int(tagged.group(1)) if tagged else self.fixed

    def is_restart(self, tag: Optional[int], epoch: int) -> bool:
        """Whether a line printed inside ``epoch`` (not after it, like Validation-accuracy) is a new run's."""
        if tag is not None:
            return self.done.get(tag, -1) >= epoch
        known = max(len(self.ids), self.declared, 1)
        return self.last_finished.get(known, -1) >= epoch

    def of(self, tag: Optional[int], key) -> int:
        if tag is None:
            self.seen[key] += 1
            tag = self.seen[key] - 1
        self.ids.add(tag)
        return tag

    def finish(self, tag: Optional[int], epoch: int):
        if tag is None:
            self.finished[epoch] += 1
            n = self.finished[epoch]
            self.last_finished[n] = max(self.last_finished.get(n, -1), epoch)
        else:
            self.done[tag] = max(self.done.get(tag, -1), epoch)


class _Run:
    """What one run of the trainer left in the log; a restart begins a new one."""

    def __init__(self, worker: Optional[int]):
        self.workers = _Workers(worker)
        self.speed, self.epochs, self.events, self.ranks = [], {}, [], set()


def _number(text):
    try:
        return float(text)
    except ValueError:
        return float("nan")


def _cut(lines: Iterable[str]) -> Iterator[Tuple[str, bool]]:
    """(piece, continues) of each line: at most MAX_LINE characters each, as ``_read`` reads files."""
    for line in lines:
        yield line[:MAX_LINE], False
        for at in range(MAX_LINE, len(line), MAX_LINE):
            yield line[at:at + MAX_LINE], True


def _read(f) -> Iterator[Tuple[str, bool]]:
    """(piece, continues) of each line of ``f``, read MAX_LINE characters at most at a time."""
    continues = False
    for piece in iter(lambda: f.readline(MAX_LINE), ""):
        yield piece, continues
        continues = not piece.endswith("\n")


def parse_lines(lines: Iterable[str], worker: Optional[int] = None) -> ParsedLog:
    """Parse ``lines``; ``worker`` attributes untagged lines of a one-worker file."""
    return _parse(_cut(lines), worker)


def _parse(pieces: Iterable[Tuple[str, bool]], worker: Optional[int]) -> ParsedLog:
    run, restarts, lineno = _Run(worker), deque(maxlen=MAX_RESTARTS), 0
    unparsed, unparsed_count, notices = [], 0, []
    p2p: Optional[dict] = None
    p2p_rows_left = 0

    def new_run():
        restarts.append(lineno)
        return _Run(worker)

    for raw, continues in pieces:
        if not continues:
            lineno += 1
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        if continues:  # the rest of an over-long line: not read as a line of its own
            unparsed_count += 1
            if len(unparsed) < MAX_UNPARSED:
                unparsed.append(line[:MAX_UNPARSED_CHARS])
            continue
        event = parse_event(line)
        if event is not None:
            if event.get("event") == "run_start":
                if event.get("rank") in run.ranks:
                    run = new_run()
                run.ranks.add(event.get("rank"))
                if isinstance(event.get("num_workers"), int):
                    run.workers.declared = max(run.workers.declared, event["num_workers"])
            run.events.append(event)
            continue
        if p2p_rows_left and p2p is not None:  # rows are counted only once the header set p2p
            row = P2P_ROW.search(line)
            if row:
                p2p["matrix"].append(row.group(1))
                p2p_rows_left -= 1
                continue
            p2p_rows_left = 0
        if "Epoch[" in line:
            match = SPEED.search(line)
            if match:
                epoch, batch = int(match.group(1)), int(match.group(2))
                tag = run.workers.tag(line)
                if run.workers.is_restart(tag, epoch):
                    run = new_run()
                metrics = {m.group(1).lower(): m.group(2) for m in METRIC.finditer(match.group(4))}
                run.speed.append((run.workers.of(tag, ("speed", epoch, batch)), epoch, batch,
                                  _number(match.group(3)), _number(metrics.get("accuracy", "nan"))))
                continue
            match = EPOCH_VALUE.search(line)
            if match:
                epoch, name = int(match.group(1)), EPOCH_FIELDS[match.group(2)]
                tag = run.workers.tag(line)
                # Validation-accuracy is printed after the epoch's Time cost
                if name != "validation_accuracy" and run.workers.is_restart(tag, epoch):
                    run = new_run()
                who = run.workers.of(tag, (name, epoch))
                run.epochs.setdefault((who, epoch), {"worker": who, "epoch": epoch})[name] = _number(match.group(3))
                if name == "time_cost_s":
                    run.workers.finish(tag, epoch)
                continue
        notice = CPP_NOTICE.search(line) if "] " in line else None
        if notice and len(notices) < MAX_NOTICES and notice.group(1).rstrip() not in notices:
            notices.append(notice.group(1).rstrip())  # without its time: the same warning of each run once
        match = P2P_NOTICE.search(line) if "GPU pairs" in line else None
        if match:
            enabled, total = int(match.group(1)), int(match.group(2))
            p2p = {"enabled_pairs": enabled, "total_pairs": total, "matrix": []}
            # n GPUs have n(n-1) ordered pairs; MXNet prints one row per GPU after the notice
            p2p_rows_left = next((n for n in range(2, 65) if n * (n - 1) == total), 0)
        if notice or match or KNOWN.search(line):
            continue
        unparsed_count += 1
        if len(unparsed) < MAX_UNPARSED:
            unparsed.append(line[:MAX_UNPARSED_CHARS])
    speed_df = pd.DataFrame(run.speed, columns=SPEED_COLUMNS).astype(
        {"worker": "int64", "epoch": "int64", "batch": "int64", "samples_per_sec": "float64",
         "train_accuracy": "float64"})
    epochs_df = (pd.DataFrame(list(run.epochs.values()), columns=EPOCH_COLUMNS)
                 .astype({"worker": "int64", "epoch": "int64", "time_cost_s": "float64",
                          "train_accuracy": "float64", "validation_accuracy": "float64"})
                 .sort_values(["worker", "epoch"], ignore_index=True))
    return ParsedLog(speed_df, epochs_df, run.events, p2p, unparsed, unparsed_count, notices,
                     list(restarts))


def parse_log(path, worker: Optional[int] = None) -> ParsedLog:
    with open(path, errors="replace") as f:
        return _parse(_read(f), worker)


def parse_run_logs(paths: Iterable[Path]) -> ParsedLog:
    """Several per-rank logs of one job (``rank0.log``, ``rank1.log``...) as one ParsedLog."""
    parts = []
    for path in sorted(paths):
        rank = re.search(r"rank(\d+)", Path(path).name)
        parts.append(parse_log(path, int(rank.group(1)) if rank else None))
    if not parts:
        return parse_lines([])
    return ParsedLog(
        speed=pd.concat([p.speed for p in parts], ignore_index=True),
        epochs=pd.concat([p.epochs for p in parts], ignore_index=True),
        events=[e for p in parts for e in p.events],
        p2p=next((p.p2p for p in parts if p.p2p), None),
        unparsed=[line for p in parts for line in p.unparsed][:MAX_UNPARSED],
        unparsed_count=sum(p.unparsed_count for p in parts),
        notices=list(dict.fromkeys(n for p in parts for n in p.notices))[:MAX_NOTICES],
        restarts=[n for p in parts for n in p.restarts])
