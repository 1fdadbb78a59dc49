"""Stop when sure: how many rounds a variant needs, between ``repeats`` and ``max_repeats``, and
whether an optional round (beyond ``repeats``) is still worth its time.

Stein's two-stage rule (``verdict.rounds_planned``): the first ``repeats`` rounds' spread fixes
how many rounds give every launcher pair of the variant an interval of ±``target_gap``/2; the
rounds beyond that are skipped. Only the first stage decides, so every run of one round decides
alike whichever runs first, and the verdict stays exact (``verdict.compare_two_stage``). A pair
that cannot be paired (a failed run, overlapping runs) gets the whole budget.

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
from .variants import budget, leg
from .verdict import rounds_planned


def measured(run: dict, dag_dir: Path, images_per_epoch: Optional[float]) -> dict:
    """One earlier run as ``paired_rounds`` needs it: launcher, round, status, times and its
    steady-state samples/s (the report's own figure, from the same parser)."""
    meta = read_json(dag_dir / run["key"] / "meta.json") or {}
    row = {"launcher": leg(run), "repeat": run["repeat"], "status": meta.get("status", "not run"),
           "started_at": meta.get("started_at"), "ended_at": meta.get("ended_at"), "samples_per_sec": None}
    if row["status"] == "ok":
        try:
            parsed = parse_run_logs(run_logs(dag_dir / run["key"]))
            row["samples_per_sec"] = run_metrics(parsed, f"run {run['key']}", images_per_epoch)["samples_per_sec"]
        except NoSpeedLines:
            row["status"] = "failed"
    return row


def skip_reason(run: dict, dag_dir: Path, fetch_unit=None) -> Optional[str]:
    """Why optional ``run`` need not run (the first stage's rounds plan fewer rounds than its own,
    for every launcher pair of its variant), or None: run it. ``dag_dir``: the DAG run's folder
    (its ``request.json``, ``data.json`` and, unless ``fetch_unit(key, into)`` fetches each from
    the artifact store into folder ``into``, the first stage's run folders)."""
    request = read_json(dag_dir / "request.json") or {}
    params = request.get("params") or {}
    first_n, most = budget(params)
    if run["round"] <= first_n:
        return None
    first = [r for r in request.get("runs") or []
             if r["variant"]["id"] == run["variant"]["id"] and r["round"] <= first_n]
    launchers = list(dict.fromkeys(leg(r) for r in first))
    if len(launchers) < 2:
        return None  # one launcher: no comparison to settle, its budget is all it gets
    images = ((read_json(dag_dir / "data.json", {}) or {}).get("records") or {}).get("train")
    scratch = Path(tempfile.mkdtemp(prefix="mxbench-stop-")) if fetch_unit else None
    try:
        for r in first if scratch else []:
            fetch_unit(r["key"], scratch)
        rows = pd.DataFrame([measured(r, scratch or dag_dir, images) for r in first])
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    reasons = []
    for launcher, reference in launcher_pairs(launchers):
        pairs, _ = paired_rounds(rows, launcher, reference)
        if pairs is None:
            return None  # unpaired: only the budget stops it
        total, reason = rounds_planned(pairs, float(params["target_gap"]), most)
        if run["round"] <= total:
            return None
        reasons.append(f"{launcher}/{reference} {reason}")
    return f"round {run['round']} of {run['variant']['id']} skipped: " + "; ".join(reasons)
