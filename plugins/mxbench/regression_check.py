"""The regression DAG's ``check_regression`` stage over a DAG run's folder: each variant and
launcher against its baseline in the results database (the rule itself: ``mxbench.regression``).
No Airflow here."""
from pathlib import Path
from typing import Dict, List

import pandas as pd

from .run_folder import load_table


def check_regressions(dag_dir: Path, url: str, dag_id: str, run_id: str, fingerprints: Dict[str, str],
                      baseline_runs: int, min_drop: float) -> List[dict]:
    """Each variant and launcher of this DAG run against its baseline in the results database (on
    the same hardware: ``fingerprints``, launcher -> the machine its runs measured on):
    ``tables/regression.csv`` (with the drop detectable at the latest A/A noise floor on that
    hardware, where one was measured), and ``tables/history.csv`` (every stored repeat of these variants
    on this hardware, with each DAG run judged against the ones before it) for the report."""
    from . import calibration, regression, store
    from .store.errors import first_line

    runs = load_table(dag_dir / "tables" / "runs.csv")
    pairs = list(dict.fromkeys(zip(runs["variant"], runs["launcher"]))) if not runs.empty else []
    # a launcher that measured nothing has no hardware
    pairs = [(variant, launcher) for variant, launcher in pairs if fingerprints.get(launcher)]
    baselines = {(variant, launcher): store.baseline(url, variant, launcher, fingerprints[launcher],
                                                     before=(dag_id, run_id), runs=baseline_runs)
                 for variant, launcher in pairs}
    # the noise estimate: the latest A/A calibration of the variant and launcher on that hardware
    try:
        noise = calibration.latest(calibration.stored_noise(store.aa_calibrations(
            url, {fingerprints[launcher] for _, launcher in pairs}), fingerprints))
    except Exception as exc:  # optional: the findings stand without it
        print(f"mxbench: no A/A noise estimate: {type(exc).__name__}: {store.without_password(first_line(exc), url)}")
        noise = calibration.stored_noise(pd.DataFrame(columns=["dag_id", "dag_run"]))
    noise = {(row["variant"], row["launcher"]): row for row in noise.to_dict("records")}
    findings = regression.dag_run_findings(runs, baselines, min_drop, noise) if pairs else []
    tables = dag_dir / "tables"
    pd.DataFrame([f.to_dict() for f in findings]).to_csv(tables / "regression.csv", index=False)
    histories = []
    for variant, launcher in pairs:
        history = store.history(url, variant, launcher=launcher, fingerprint=fingerprints[launcher])
        if history.empty:
            continue
        history = history.assign(when=pd.to_datetime(history["measured_at"], utc=True))
        histories.append(regression.judge_history(history, baseline_runs, min_drop))
    if histories:
        pd.concat(histories, ignore_index=True).to_csv(tables / "history.csv", index=False)
    return [f.to_dict() for f in findings]

