"""Cheap integrity checks of a RecordIO pair (.rec + .idx) before training reads it.

ImageRecordIter on a truncated file fails late and obscurely (or silently reads
fewer images); these checks fail early with the file's name and the cause.
Stdlib only.
"""
import struct
from pathlib import Path

from .errors import MxbenchError

MAGIC = 0xCED7230A
LENGTH_MASK = (1 << 29) - 1


def idx_path(rec_path):
    return Path(rec_path).with_suffix(".idx")


def read_index(idx):
    """[(key, offset)] from an .idx file."""
    entries = []
    for n, line in enumerate(Path(idx).read_text().splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        try:
            entries.append((int(parts[0]), int(parts[1])))
        except (IndexError, ValueError):
            raise MxbenchError(f"{idx}: line {n} is not 'key<TAB>offset': {line[:60]!r}") from None
    return entries


def check_record_file(rec_path, what="record file"):
    """Verify that ``rec_path`` and its .idx exist and agree; return the record count."""
    rec, idx = Path(rec_path), idx_path(rec_path)
    if not rec.is_file():
        raise MxbenchError(f"{what} {rec} does not exist")
    if not idx.is_file():
        raise MxbenchError(f"{what} {rec} has no index {idx.name} beside it (make it with im2rec)")
    entries = read_index(idx)
    if not entries:
        raise MxbenchError(f"{what} {rec}: index {idx.name} is empty")
    size = rec.stat().st_size
    last_offset = max(offset for _, offset in entries)
    with open(rec, "rb") as f:
        f.seek(last_offset)
        header = f.read(8)
    if len(header) < 8:
        raise MxbenchError(f"{what} {rec} is truncated: {idx.name} points at byte {last_offset} of {size}")
    magic, lrec = struct.unpack("<II", header)
    if magic != MAGIC:
        raise MxbenchError(f"{what} {rec} is corrupt: no record at byte {last_offset} named by {idx.name}")
    end = last_offset + 8 + (lrec & LENGTH_MASK)
    if end > size:
        raise MxbenchError(f"{what} {rec} is truncated: last record ends at byte {end}, file has {size}")
    return len(entries)
