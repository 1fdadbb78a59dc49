"""Stop when sure: how many rounds a variant needs, between ``repeats`` and ``max_repeats``, and
whether an optional round (beyond ``repeats``) is still worth its time.

Stein's two-stage rule (``verdict.rounds_planned``): the first ``repeats`` quiet rounds' spread
fixes how many rounds give every launcher pair of the variant an interval of ±``target_gap``/2;
the rounds beyond that are skipped. Only the first stage's speeds decide, so every run of one round
decides alike whichever runs first, and the verdict stays exact (``verdict.compare_two_stage``);
of the later rounds, only whether an ended one was contended counts (it is replaced). A pair
that cannot be paired (a failed run, overlapping runs) gets the whole budget. A contended round
(a run that had other work on its hosts, ``results.contention``), of the first stage or a later
round that has ended, is left out of the plan and replaced by one more round, from a budget of its
own (``contended_replacements``, beyond ``max_repeats``); past it the contended rounds are judged
as measured. ``metrics.rounds_to_run`` is the rule, which ``metrics.launcher_ratios`` reads too,
so the verdict judges the rounds the plan ran and says which were replaced.

In the regression DAG the rounds beyond ``repeats`` are ``confirm_rounds``: they run only for a
variant and launcher whose first rounds look like a regression against the baseline the check
will use (``confirmation_skip_reason``), so that an alert rests on every round.

Imported by the run task only for optional rounds: it parses logs (pandas), which the run path
itself never loads (``stages.run_stage``). No Airflow here.
"""
import shutil
import tempfile
from typing import Optional

import pandas as pd

from mxbench.matrix.variants import budget, confirming, leg, measured_setup, stop_budget
from mxbench.results import contention
from mxbench.results.metrics import NoSpeedLines, contended_rounds, launcher_pairs, rounds_to_run, run_metrics
from mxbench.results.parse import parse_run_logs
from mxbench.run_folder import DagRunFolder, read_json
from mxbench_train.errors import MxbenchError


def measured(run: dict, dag_folder: DagRunFolder, images_per_epoch: Optional[float],
             thresholds: Optional[dict] = None) -> dict:
    """One earlier run as ``paired_rounds`` needs it: launcher, round, status, times, its
    steady-state samples/s (the report's own figure, from the same parser) and whether it was
    contended, judged with the DAG run's ``thresholds`` (``request.json``'s, as parse_logs will)."""
    folder = dag_folder.run(run["key"])
    meta = read_json(folder.meta) or {}
    row = {"launcher": leg(run), "repeat": run["repeat"], "status": meta.get("status", "not run"),
           "started_at": meta.get("started_at"), "ended_at": meta.get("ended_at"), "samples_per_sec": None,
           "environment": None, "contended": None}
    if row["status"] == "ok":
        try:
            parsed = parse_run_logs(folder.logs())
            row["samples_per_sec"] = run_metrics(parsed, f"run {run['key']}", images_per_epoch)["samples_per_sec"]
        except NoSpeedLines:
            row["status"] = "failed"
        else:  # the machine, as the trainer reported it (parse_logs writes it to metrics.json later)
            row["environment"] = contention.run_machine(parsed.events)  # None where malformed
            judged_with = contention.thresholds_for(thresholds, row["environment"], run["launcher"])
            row["contended"] = contention.summarise(parsed.events, judged_with)["contended"]
    return row


def skip_reason(run: dict, dag_folder: DagRunFolder, fetch_unit=None, baseline_for=None) -> Optional[str]:
    """Why optional ``run`` need not run, or None: run it. A launcher comparison's round: the first
    stage's rounds plan fewer rounds than its own, for every launcher pair of its variant. A
    regression DAG's confirmation round (``confirm_rounds``): its variant's first rounds under its
    launcher do not look like a regression against ``baseline_for(variant, launcher, fingerprint, setup)``
    (the baseline's repeats of that setup, ``variants.measured_setup``, as ``store.baseline`` gives
    them; ``confirmation_skip_reason``).
    ``dag_folder``: the DAG run's folder (its ``request.json``, ``data.json`` and, unless
    ``fetch_unit(key, into)`` fetches each from the artifact store into folder ``into``, the first
    stage's run folders)."""
    request = read_json(dag_folder.request) or {}
    params = request.get("params") or {}
    first_n, most = budget(params)
    if run["round"] <= first_n:
        return None
    earlier = [r for r in request.get("runs") or []
               if r["variant"]["id"] == run["variant"]["id"] and r["round"] < run["round"]]
    first = [r for r in earlier if r["round"] <= first_n]
    # the optional rounds before this one: only whether they were contended counts (to replace them)
    later = [] if confirming(params) else [r for r in earlier if r["round"] > first_n]
    if confirming(params):
        first = [r for r in first if leg(r) == leg(run)]
    launchers = list(dict.fromkeys(leg(r) for r in first))
    if len(launchers) < 2 and not confirming(params) and run["round"] <= most:
        return None  # one launcher: no comparison to settle, its budget is all it gets
    images = ((read_json(dag_folder.data, {}) or {}).get("records") or {}).get("train")
    scratch = DagRunFolder(tempfile.mkdtemp(prefix="mxbench-stop-")) if fetch_unit else None
    try:
        for r in first if scratch else []:
            fetch_unit(r["key"], scratch.path)  # the first stage must be there; a later round may not be yet
        thresholds = request.get("contention_thresholds")
        rows = pd.DataFrame([measured(r, scratch or dag_folder, images, thresholds) for r in first])
        ended = pd.DataFrame([measured(r, scratch or dag_folder, images, thresholds) for r in later
                              if _fetched(fetch_unit, r["key"], scratch)])
        if confirming(params):
            return confirmation_skip_reason(run, rows, machine_of(rows), baseline_for,
                                            float(params.get("min_drop", 0.05)),
                                            measured_setup(run["variant"], params))
    finally:
        if scratch:
            shutil.rmtree(scratch.path, ignore_errors=True)
    plan = stop_budget(params)
    ended_rows = pd.concat([rows, ended], ignore_index=True)
    if len(launchers) < 2:  # one launcher: only a contended round of its own, within the replacement budget
        contended = contended_rounds(ended_rows, launchers[0], launchers[0]) if launchers else []
        if run["round"] <= most + min(len(contended), plan[3] if plan else 0):
            return None
        return (f"round {run['round']} of {run['variant']['id']} skipped: {most} rounds run, "
                f"{len(contended)} contended round(s) replaced ({', '.join(map(str, contended)) or 'none'})")
    reasons = []
    for launcher, reference in launcher_pairs(launchers):
        # the pair's first ``repeats`` quiet rounds plan; a contended round is replaced, from its own budget
        total, reason, _ = rounds_to_run(ended_rows, launcher, reference, plan)
        if run["round"] <= total:
            return None
        reasons.append(f"{launcher}/{reference} {reason}")
    return f"round {run['round']} of {run['variant']['id']} skipped: " + "; ".join(reasons)


def _fetched(fetch_unit, key: str, scratch: Optional[DagRunFolder]) -> bool:
    """Whether a later round's run folder is here to read (fetched from the artifact store when
    ``fetch_unit``): one not published yet has not ended, and counts as not contended."""
    if fetch_unit is None:
        return True
    try:
        fetch_unit(key, scratch.path)
    except (OSError, ValueError, MxbenchError) as exc:
        print(f"mxbench: {key} is not in the artifact store yet ({type(exc).__name__}): counted as not contended")
        return False
    return True


def machine_of(rows: pd.DataFrame) -> Optional[str]:
    """The store's fingerprint of the machine the first measured of ``rows`` (``measured``'s) ran on."""
    from mxbench.results.machines import fingerprint

    measured_on = [e for e in rows.get("environment", pd.Series(dtype=object)) if e]
    return fingerprint(measured_on[0])[0] if measured_on else None


def confirmation_skip_reason(run: dict, first: pd.DataFrame, machine: Optional[str], baseline_for,
                             min_drop: float, setup: Optional[str] = None) -> Optional[str]:
    """Why confirmation round ``run`` need not run: its launcher's first rounds (``first``, as
    ``measured`` gives them) do not look like a regression (``regression.regression_rule.suspected``) against the
    baseline on ``machine`` of ``setup`` (what the run measures), or there is nothing to confirm
    against; None: run it."""
    from mxbench.regression.regression_rule import (
        MIN_BASELINE_RUNS,
        SUSPECT_SHARE,
        dag_run_keys,
        left_out,
        quiet_repeats,
        suspected,
        usable_speeds,
    )
    from mxbench.stats.verdict import MIN_REPEATS

    what = f"confirmation round {run['round']} of {run['variant']['id']} ({leg(run)}) skipped"
    if first.empty or not first["status"].isin(["ok", "failed"]).all():
        return None  # the first rounds have not all ended: not knowing means running
    # contended first rounds can neither suspect nor clear a regression: quiet rounds confirm it
    quiet, busy = quiet_repeats(first)
    current = usable_speeds(quiet["samples_per_sec"])
    if busy and len(current) < MIN_REPEATS:
        return None
    if not current or machine is None:
        return f"{what}: its first rounds measured nothing to confirm"
    stored = baseline_for(run["variant"]["id"], leg(run), machine, setup) if baseline_for else None
    baseline = [] if stored is None else usable_speeds(stored["samples_per_sec"])
    earlier = 0 if stored is None else len(stored.drop_duplicates(dag_run_keys(stored)))
    if earlier < MIN_BASELINE_RUNS or not baseline:
        return (f"{what}: no baseline on this hardware to confirm against ({earlier} earlier DAG run(s), "
                f"{MIN_BASELINE_RUNS} needed)")
    looks, ratio = suspected(current, baseline, min_drop)
    if looks:
        return None
    return (f"{what}: the first rounds' median is {ratio - 1:+.1%} against the baseline's, not a suspected "
            f"regression (at most {-SUSPECT_SHARE * min_drop:+.1%})" + (f"; {left_out(busy)}" if busy else ""))
