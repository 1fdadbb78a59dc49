"""Read any MXNet training log into tidy tables; never die on a line.

Reads what MXNet's Module API and ``Speedometer`` print, in any vintage
(``Batch [20]`` of 2016 or ``Batch [0-20]`` of 1.9), with or without the
``Node[rank]`` prefix, plus MXNet's P2P notice and mxbench's structured
``:::MXBENCH`` events. Lines of several workers may interleave in one stream
untagged (the seed's two-machine log): the k-th line for the same epoch and
batch is then taken to be worker k's.
"""
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, List, Optional

import pandas as pd

from mxbench_train.events import parse_event

NODE = re.compile(r"Node\[(\d+)\]")
SPEED = re.compile(r"Epoch\[(\d+)\] Batch \[(?:\d+-)?(\d+)\]\s+Speed: ([\d.]+|nan|inf) samples/sec(.*)")
METRIC = re.compile(r"(?:Train-)?([\w-]+)=([-\d.eE+]+|nan|inf)")
EPOCH_VALUE = re.compile(r"Epoch\[(\d+)\] (Time cost|Train-accuracy|Validation-accuracy)=([-\d.eE+]+|nan)")
P2P_NOTICE = re.compile(r"only (\d+) out of (\d+) GPU pairs are enabled direct access")
P2P_ROW = re.compile(r"(?:^|[\s:])([.v]{2,})\s*$")
# MXNet's own lines that carry nothing the report needs
KNOWN = re.compile(r"Resetting Data Iterator|Change learning rate|Saved checkpoint|Epoch\[\d+\] Train-")

SPEED_COLUMNS = ["worker", "epoch", "batch", "samples_per_sec", "train_accuracy"]
EPOCH_COLUMNS = ["worker", "epoch", "time_cost_s", "train_accuracy", "validation_accuracy"]
EPOCH_FIELDS = {"Time cost": "time_cost_s", "Train-accuracy": "train_accuracy",
                "Validation-accuracy": "validation_accuracy"}


@dataclass
class ParsedLog:
    speed: pd.DataFrame  # one row per worker x Speedometer reading
    epochs: pd.DataFrame  # one row per worker x epoch
    events: List[dict] = field(default_factory=list)
    p2p: Optional[dict] = None
    unparsed: List[str] = field(default_factory=list)

    @property
    def workers(self) -> int:
        declared = [e.get("num_workers") for e in self.events if e.get("event") == "run_start"]
        seen = set(self.speed["worker"]) | set(self.epochs["worker"])
        return max([len(seen), *[d for d in declared if isinstance(d, int)]], default=0)


class _Workers:
    """Who printed an untagged line: the k-th repeat of the same key is worker k."""

    def __init__(self, fixed: Optional[int]):
        self.fixed, self.seen = fixed, Counter()

    def of(self, line: str, key) -> int:
        tagged = NODE.search(line)
        if tagged:
            return int(tagged.group(1))
        if self.fixed is not None:
            return self.fixed
        self.seen[key] += 1
        return self.seen[key] - 1


def _number(text):
    try:
        return float(text)
    except ValueError:
        return float("nan")


def parse_lines(lines: Iterable[str], worker: Optional[int] = None) -> ParsedLog:
    """Parse ``lines``; ``worker`` attributes untagged lines of a one-worker file."""
    workers = _Workers(worker)
    speed, epochs, events, unparsed = [], {}, [], []
    p2p, p2p_rows_left = None, 0
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        event = parse_event(line)
        if event is not None:
            events.append(event)
            continue
        if p2p_rows_left:
            row = P2P_ROW.search(line)
            if row:
                p2p["matrix"].append(row.group(1))
                p2p_rows_left -= 1
                continue
            p2p_rows_left = 0
        match = SPEED.search(line)
        if match:
            epoch, batch = int(match.group(1)), int(match.group(2))
            metrics = {f"train_{m.group(1).lower()}": _number(m.group(2)) for m in METRIC.finditer(match.group(4))}
            speed.append({"worker": workers.of(line, ("speed", epoch, batch)), "epoch": epoch, "batch": batch,
                          "samples_per_sec": _number(match.group(3)),
                          "train_accuracy": metrics.get("train_accuracy", float("nan"))})
            continue
        match = EPOCH_VALUE.search(line)
        if match:
            epoch, name = int(match.group(1)), EPOCH_FIELDS[match.group(2)]
            who = workers.of(line, (name, epoch))
            epochs.setdefault((who, epoch), {"worker": who, "epoch": epoch})[name] = _number(match.group(3))
            continue
        match = P2P_NOTICE.search(line)
        if match:
            enabled, total = int(match.group(1)), int(match.group(2))
            p2p = {"enabled_pairs": enabled, "total_pairs": total, "matrix": []}
            # n GPUs have n(n-1) ordered pairs; MXNet prints one row per GPU after the notice
            p2p_rows_left = next((n for n in range(2, 65) if n * (n - 1) == total), 0)
            continue
        if KNOWN.search(line):
            continue
        unparsed.append(line)
    speed_df = pd.DataFrame(speed, columns=SPEED_COLUMNS).astype(
        {"worker": "int64", "epoch": "int64", "batch": "int64", "samples_per_sec": "float64",
         "train_accuracy": "float64"})
    epochs_df = (pd.DataFrame(list(epochs.values()), columns=EPOCH_COLUMNS)
                 .astype({"worker": "int64", "epoch": "int64", "time_cost_s": "float64",
                          "train_accuracy": "float64", "validation_accuracy": "float64"})
                 .sort_values(["worker", "epoch"], ignore_index=True))
    return ParsedLog(speed_df, epochs_df, events, p2p, unparsed)


def parse_log(path, worker: Optional[int] = None) -> ParsedLog:
    with open(path, errors="replace") as f:
        return parse_lines(f, worker)


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
        unparsed=[line for p in parts for line in p.unparsed])
