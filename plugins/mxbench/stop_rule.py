"""Stop when sure: whether an optional round (beyond ``repeats``, up to ``max_repeats``) is still
worth its time.

A round is skipped once, for every launcher pair of its variant, the paired interval of the
rounds before it is narrower than ±``target_gap``/2 (``verdict.settled``). Only earlier rounds
count, so every run of one round decides alike, whichever runs first. A pair that cannot be
paired (a failed run, overlapping runs) is never settled: the budget is spent instead.

Imported by the run task only for optional rounds: it parses logs (pandas), which the run path
itself never loads (``run_stage``). No Airflow here.
"""
import shutil
import tempfile
from pathlib import Path
from typing import Optional

import pandas as pd

from .metrics import NoSpeedLines, launcher_pairs, paired_rounds, run_metrics
from .parse import parse_run_logs
from .run_folder import read_json, run_logs
from .verdict import settled


def measured(run: dict, dag_dir: Path, images_per_epoch: Optional[float]) -> dict:
    """One earlier run as ``paired_rounds`` needs it: launcher, round, status, times and its
    steady-state samples/s (the report's own figure, from the same parser)."""
    meta = read_json(dag_dir / run["key"] / "meta.json") or {}
    row = {"launcher": run["launcher"], "repeat": run["repeat"], "status": meta.get("status", "not run"),
           "started_at": meta.get("started_at"), "ended_at": meta.get("ended_at"), "samples_per_sec": None}
    if row["status"] == "ok":
        try:
            parsed = parse_run_logs(run_logs(dag_dir / run["key"]))
            row["samples_per_sec"] = run_metrics(parsed, f"run {run['key']}", images_per_epoch)["samples_per_sec"]
        except NoSpeedLines:
            row["status"] = "failed"
    return row


def skip_reason(run: dict, dag_dir: Path, target_gap: float, fetch_unit=None) -> Optional[str]:
    """Why optional ``run`` need not run (every launcher pair of its variant settled by the rounds
    before it), or None: run it. ``dag_dir``: the DAG run's folder (its ``request.json`` and
    ``data.json``, and the earlier rounds' folders unless ``fetch_unit(key, into)`` fetches each
    from the artifact store into folder ``into``)."""
    request = read_json(dag_dir / "request.json") or {}
    images = ((read_json(dag_dir / "data.json", {}) or {}).get("records") or {}).get("train")
    earlier = [r for r in request.get("runs") or []
               if r["variant"]["id"] == run["variant"]["id"] and r["round"] < run["round"]]
    launchers = list(dict.fromkeys(r["launcher"] for r in earlier))
    if len(launchers) < 2:
        return None  # one launcher: no comparison to settle, its budget is all it gets
    scratch = Path(tempfile.mkdtemp(prefix="mxbench-stop-")) if fetch_unit else None
    try:
        for r in earlier if scratch else []:
            fetch_unit(r["key"], scratch)
        rows = pd.DataFrame([measured(r, scratch or dag_dir, images) for r in earlier])
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    rows = rows[rows["status"] != "skipped"]  # rounds already skipped: settled before, as now
    reasons = []
    for launcher, reference in launcher_pairs(launchers):
        pairs, _ = paired_rounds(rows, launcher, reference)
        if pairs is None:
            return None  # unpaired: only the budget stops it
        done, reason = settled(pairs, target_gap)
        if not done:
            return None
        reasons.append(f"{launcher}/{reference} {reason}")
    return f"round {run['round']} of {run['variant']['id']} skipped: " + "; ".join(reasons)
