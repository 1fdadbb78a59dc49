"""Structured event lines, MLPerf-logging style: one prefixed JSON object a line.

A worker logs ``:::MXBENCH {"event": "run_start", ...}`` at start and
``run_end`` at the end; the lines survive any log prefix (``Node[1]``,
timestamps) because readers look for the marker anywhere in the line.
"""
import json

from . import json_input

MARKER = ":::MXBENCH "


def format_event(event, **fields):
    return MARKER + json.dumps({"event": event, **fields}, sort_keys=True, default=str)


def parse_event(line):
    """The event dict in ``line``, or None when the line holds none (or a broken one)."""
    at = line.find(MARKER)
    if at < 0:
        return None
    try:
        record = json_input.loads(line[at + len(MARKER):])
    except ValueError:
        return None
    return record if isinstance(record, dict) and "event" in record else None
