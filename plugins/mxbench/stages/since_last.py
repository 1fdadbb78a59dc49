"""What changed since last time, for the report: each series this DAG run measured (variant x
launcher x kind of machine) beside the previous DAG run of the same DAG that measured the same
setup, read from the results store at report time, and beside the regression baseline where the
regression check left ``tables/regression.csv``. Written to ``tables/since_last.csv``, so that
``mxbench report`` rebuilds the section without the store. No Airflow here.

"The same setup" is the store's rule for a baseline (``store.baseline``): the same variant,
launcher, hardware fingerprint and ``setup_key`` (``variants.measured_setup``); an override of
depth or epochs is another setup and is never compared. The change and its 95% interval are the
launcher verdict's own statistics (``stats.verdict.compare``: ratio of medians, bootstrap
interval, permutation test) over the two DAG runs' repeats. Contended runs (other work on their
hosts, ``results.contention``) on either side are left out, and the note says how many: a busy
neighbour must neither raise nor hide an alarm; a series whose runs here were all contended says
"contended: not compared".
"""
from datetime import datetime, timezone
from typing import Dict, List, Optional, Tuple

import pandas as pd

from mxbench.regression.regression_rule import CONTENDED_NOT_COMPARED, MIN_DROP, left_out, quiet_repeats
from mxbench.run_folder import DagRunFolder, load_table, read_json

COLUMNS = ["variant", "launcher", "machine", "machine_class", "n", "samples_per_sec", "build",
           "previous_dag_id", "previous_run_id", "previous_n", "previous_samples_per_sec", "previous_build",
           "change", "ci_low", "ci_high", "outcome", "note",
           "baseline_status", "baseline_change", "baseline_ci_low", "baseline_ci_high", "baseline_runs",
           "baseline_dag_id", "baseline_run_id"]
NO_PREVIOUS = "no earlier DAG run of this setup"


def series_machines(folder: DagRunFolder) -> Dict[str, Tuple[str, str]]:
    """Launcher (or arm) -> (fingerprint, host class) of the machine its measured runs ran on."""
    from mxbench.store import fingerprint

    runs = load_table(folder.table("runs"))
    found: Dict[str, Tuple[str, str]] = {}
    for key, launcher in zip(runs.get("key", []), runs.get("launcher", [])):
        environment = (read_json(folder.run(key).metrics) or {}).get("environment")
        if isinstance(environment, dict) and launcher not in found:
            digest, facts = fingerprint(environment)
            found[launcher] = (digest, facts["host_class"])
    return found


def since_last(folder: DagRunFolder, url: str, dag_id: str, run_id: str,
               unreadable: Optional[str] = None) -> pd.DataFrame:
    """``tables/since_last.csv``: one row per series (``COLUMNS``). Never fails the caller: a
    store that cannot be read (or ``unreadable``: why the caller could not even name it) leaves
    each row's ``note`` saying so, without the URL's password."""
    from mxbench.stages.regression_check import measured_setups

    runs = load_table(folder.table("runs"))
    machines = series_machines(folder)
    setups = measured_setups(folder)
    rows: List[dict] = []
    if not runs.empty:
        for variant, launcher in dict.fromkeys(zip(runs["variant"], runs["launcher"])):
            if launcher not in machines:
                continue  # a launcher that measured nothing has no machine to compare on
            # contended runs (other work on their hosts) neither raise nor hide an alarm: left out, counted
            quiet, busy = quiet_repeats(runs[(runs["variant"] == variant) & (runs["launcher"] == launcher)])
            mine = quiet["samples_per_sec"]
            # what ran: the version its trainers reported (``store.what_ran``'s first source)
            built = quiet["mxnet_reported"].dropna() if "mxnet_reported" in quiet else pd.Series()
            rows.append({"variant": variant, "launcher": launcher, "machine": machines[launcher][0],
                         "build": ", ".join(dict.fromkeys(map(str, built))) or None,
                         "machine_class": machines[launcher][1], "n": len(mine),
                         "samples_per_sec": mine.median() if len(mine) else None,
                         "setup": setups.get((variant, launcher)), "speeds": list(mine), "busy": busy})
    if rows:
        from mxbench import store
        from mxbench.store.store_errors import first_line

        why = f"not shown: {unreadable}" if unreadable else None
        try:
            if why is None:
                with store.errors_without_password(url):  # a driver's message may quote the URL
                    _previous(rows, url, dag_id, run_id, runs)
                    _baseline(rows, folder, url)
        except Exception as exc:  # a database down, a driver missing: the report stands without it
            why = (f"not shown: the results store could not be read ({type(exc).__name__}: "
                   f"{store.without_password(first_line(exc), url)})")
        if why:
            print(f"mxbench: since last time: {why}")
            for row in rows:
                row.update(note=why, **dict.fromkeys(c for c in COLUMNS if c.startswith(("previous_", "baseline_"))))
    table = pd.DataFrame(rows).reindex(columns=COLUMNS)
    folder.tables.mkdir(exist_ok=True)
    table.to_csv(folder.table("since_last"), index=False)
    return table


def _before(url: str, dag_id: str, run_id: str, runs: pd.DataFrame):
    """What "earlier" means for this DAG run: its stored time, else (the report may run before the
    store task) its first run's start, else the DAG run itself."""
    from mxbench import store

    stored = store.dag_run_time(url, dag_id, run_id)
    if stored is not None:
        return (dag_id, run_id)
    starts = pd.to_numeric(runs.get("started_at", pd.Series(dtype=float)), errors="coerce").dropna()
    return datetime.fromtimestamp(float(starts.min()), tz=timezone.utc) if len(starts) else (dag_id, run_id)


def _previous(rows: List[dict], url: str, dag_id: str, run_id: str, runs: pd.DataFrame) -> None:
    from mxbench import store
    from mxbench.stats.verdict import compare

    if dag_id in store.PROBE_DAG_IDS:  # store.baseline never takes them: say why, not "none"
        for row in rows:
            row["note"] = "not compared: a bisect's DAG runs measure builds chosen on purpose, not the last one"
        return
    before = _before(url, dag_id, run_id, runs)
    for row in rows:
        if row["setup"] is None:
            row["note"] = "not compared: this DAG run's request does not say what its runs measured"
            continue
        if row["busy"] and not row["speeds"]:
            row["note"] = f"{CONTENDED_NOT_COMPARED}: {left_out(row['busy'], ' of this DAG run')}"
            continue
        # the newest earlier DAG run of this DAG that measured this setup on this kind of machine
        earlier = store.baseline(url, row["variant"], row["launcher"], row["machine"], before=before, runs=1,
                                 setup=row["setup"], dag_ids=[dag_id])
        busy_before = earlier.attrs.get("contended_left_out", 0)
        earlier = earlier[~((earlier["dag_id"] == dag_id) & (earlier["run_id"] == run_id))]
        earlier.attrs["contended_left_out"] = busy_before
        if earlier.empty:
            row["note"] = NO_PREVIOUS
            continue
        theirs = [float(v) for v in earlier["samples_per_sec"]]
        row.update(previous_dag_id=earlier["dag_id"].iloc[-1], previous_run_id=earlier["run_id"].iloc[-1],
                   previous_n=len(theirs), previous_samples_per_sec=float(pd.Series(theirs).median()),
                   previous_build=", ".join(dict.fromkeys(map(str, earlier["build"]))))
        if not row["speeds"]:
            row["note"] = "no measured repeat in this DAG run"
            continue
        # the band: the smallest change the regression rule calls worth an alert (``regression_rule.MIN_DROP``)
        compared = compare(row["speeds"], theirs, name="this DAG run", reference="the previous", target_gap=MIN_DROP)
        left = [left_out(count, whose) for count, whose in ((row["busy"], " of this DAG run"),
                                                            (earlier.attrs.get("contended_left_out", 0),
                                                             " of the previous")) if count]
        row.update(change=compared.ratio - 1,
                   ci_low=None if compared.ci_low is None else compared.ci_low - 1,
                   ci_high=None if compared.ci_high is None else compared.ci_high - 1,
                   outcome=compared.outcome, note="; ".join(left))


def _baseline(rows: List[dict], folder: DagRunFolder, url: str) -> None:
    """The regression check's change against its baseline (``tables/regression.csv``), and the
    newest DAG run of that baseline, to link its report."""
    from mxbench import config, store

    findings = load_table(folder.table("regression"))
    if findings.empty:
        return
    for row in rows:
        found = findings[(findings["variant"] == row["variant"]) & (findings["launcher"] == row["launcher"])]
        if found.empty:
            continue
        finding = found.iloc[0]
        run_ids = str(finding.get("baseline_runs") or "").split() if pd.notna(finding.get("baseline_runs")) else []
        row.update(baseline_status=finding.get("status"), baseline_change=finding.get("change"),
                   baseline_ci_low=finding.get("ci_low"), baseline_ci_high=finding.get("ci_high"),
                   baseline_runs=len(run_ids))
        if run_ids:
            newest = _newest(store.history(url, row["variant"], row["launcher"], row["machine"],
                                           dag_ids=config.baseline_dags()), run_ids)
            if newest:
                row.update(baseline_dag_id=newest[0], baseline_run_id=newest[1])


def _newest(history: pd.DataFrame, run_ids: List[str]) -> Optional[Tuple[str, str]]:
    """(dag id, run id) of the newest stored DAG run among ``run_ids``."""
    chosen = history[history["run_id"].isin(run_ids)]
    if chosen.empty:
        return None
    last = chosen.sort_values("measured_at").iloc[-1]
    return str(last["dag_id"]), str(last["run_id"])
