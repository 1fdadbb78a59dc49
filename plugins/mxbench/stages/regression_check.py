"""The regression DAG's ``check_regression`` stage over a DAG run's folder: each variant and
launcher against its baseline in the results database (the rule itself: ``mxbench.regression.regression_rule``).
No Airflow here."""
from typing import Dict, List

import pandas as pd

from mxbench.run_folder import DagRunFolder, load_table


def check_regressions(folder: DagRunFolder, url: str, dag_id: str, run_id: str, fingerprints: Dict[str, str],
                      baseline_runs: int, min_drop: float) -> List[dict]:
    """Each variant and launcher of this DAG run against its baseline in the results database (on
    the same hardware: ``fingerprints``, launcher -> the machine its runs measured on):
    ``tables/regression.csv`` (with the drop detectable at the latest A/A noise floor on that
    hardware, where one was measured), and ``tables/history.csv`` (every stored repeat of these variants
    on this hardware, with each DAG run judged against the ones before it) for the report.

    The alerts people triaged on the history page apply (``mxbench.regression.triage``): a distribution
    change starts the series' baseline at its DAG run, and a regression at the level of an
    acknowledged or expected alert keeps that state in its ``triage`` column and its message, which
    ``stages.dag_run_failures`` does not fail the DAG run for."""
    from mxbench import store
    from mxbench.regression import regression_rule, triage
    from mxbench.results import calibration
    from mxbench.store.store_errors import first_line

    runs = load_table(folder.table("runs"))
    setups = measured_setups(folder)
    pairs = list(dict.fromkeys(zip(runs["variant"], runs["launcher"]))) if not runs.empty else []
    # a launcher that measured nothing has no hardware
    pairs = [(variant, launcher) for variant, launcher in pairs if fingerprints.get(launcher)]
    # a DAG run not stored (its store task failed) is the newest
    at = store.dag_run_time(url, dag_id, run_id) or pd.Timestamp.now(tz="UTC").to_pydatetime()
    # this DAG's own alerts: who may edit another DAG's runs must not silence or reset its checks
    triaged = {(variant, launcher): store.series_alerts(url, variant, launcher, fingerprints[launcher], dag_id)
               for variant, launcher in pairs}
    # only runs that measured what this one did, of the DAGs the deployer lets feed a baseline
    baselines = {(variant, launcher): store.baseline(url, variant, launcher, fingerprints[launcher],
                                                     before=(dag_id, run_id), runs=baseline_runs,
                                                     since=triage.baseline_start(triaged[(variant, launcher)], at),
                                                     setup=setups.get((variant, launcher)))
                 for variant, launcher in pairs}
    # the noise estimate: the latest A/A calibration of the variant and launcher on that hardware
    try:
        noise = calibration.latest(calibration.stored_noise(store.aa_calibrations(
            url, {fingerprints[launcher] for _, launcher in pairs}), fingerprints))
    except Exception as exc:  # optional: the findings stand without it
        print(f"mxbench: no A/A noise estimate: {type(exc).__name__}: {store.without_password(first_line(exc), url)}")
        noise = calibration.stored_noise(pd.DataFrame(columns=["dag_id", "dag_run"]))
    noise = {(row["variant"], row["launcher"]): row for row in noise.to_dict("records")}
    findings = regression_rule.dag_run_findings(runs, baselines, min_drop, noise) if pairs else []
    slower_to_target = convergence_flags(folder, runs, baselines)
    rows = []
    for finding in findings:
        row = {**finding.to_dict(), "triage": "", "convergence": slower_to_target.get((finding.variant,
                                                                                        finding.launcher), "")}
        if row["convergence"]:
            row["message"] += f"; {row['convergence']}"
        covering = (triage.covering_alert(triaged[(finding.variant, finding.launcher)], at, finding.current, min_drop)
                    if finding.status == "regression" else None)
        if covering:
            row["triage"] = covering.state
            row["message"] += f"; {covering.note()}: does not fail this DAG run"
        rows.append(row)
    pd.DataFrame(rows).to_csv(folder.table("regression"), index=False)
    histories = []
    for variant, launcher in pairs:
        history = store.history(url, variant, launcher=launcher, fingerprint=fingerprints[launcher])
        history = history[~history["dag_id"].isin(store.PROBE_DAG_IDS)]  # a bisect's old builds: not a step
        if history.empty:
            continue
        history = history.assign(when=pd.to_datetime(history["measured_at"], utc=True))
        histories.append(regression_rule.judge_history(history, baseline_runs, min_drop))
    if histories:
        pd.concat(histories, ignore_index=True).to_csv(folder.table("history"), index=False)
    return rows


def measured_setups(folder: DagRunFolder) -> Dict[tuple, str]:
    """(variant, launcher) -> what its runs of this DAG run measured (``variants.measured_setup``),
    from request.json; a pair it lacks has no setup, and so no baseline."""
    from mxbench.matrix.variants import leg, measured_setup
    from mxbench.run_folder import read_json

    request = read_json(folder.request) or {}
    params = request.get("params") or {}
    return {(run["variant"]["id"], leg(run)): measured_setup(run["variant"], params)
            for run in request.get("runs") or [] if run.get("variant")}


def convergence_flags(folder: DagRunFolder, runs: pd.DataFrame, baselines: dict) -> Dict[tuple, str]:
    """(variant, launcher) -> why this build is flagged: faster than its baseline's build, yet
    later to the preset's target accuracy (``convergence.build_flag``, MLPerf's reference
    convergence), against the baseline's runs timed to the same target; none where the preset
    has no target."""
    from mxbench.results import convergence
    from mxbench.run_folder import read_json

    target = convergence.target_for((read_json(folder.request) or {}).get("params") or {})
    times = convergence.run_times(runs, load_table(folder.table("epochs")), target)
    flags = {}
    for (variant, launcher), current in times.groupby(["variant", "launcher"]):
        base = baselines.get((variant, launcher))
        if base is None or "time_to_target_s" not in base.columns:
            continue
        base = base[base["target_accuracy"] == target]
        if not base.empty:
            flags[(variant, launcher)] = convergence.build_flag(f"{variant} ({launcher})", current, base, target)
    return flags

