"""A/A calibration: the machines' noise floor, measured by running each launcher against itself.

With ``aa_calibration`` (or the ``aa-calibration`` preset) each launcher runs as two arms,
``local`` and ``local-b``, in the same rounds, spaced like real launcher pairs, ABBA over the
rounds (``variants.aa_spaced``).
The arms are identical, so whatever tells them apart is noise. From one such DAG run, per
variant and launcher:

- the noise floor: a linear fit of the log speeds of both arms' runs against each run's place
  among all the DAG run's runs in time gives the drift per run of the machines (warming up, a
  neighbour's load fading) and, around it, the spread of one run (CV);
- the arms' verdict (the launcher table's own): a difference called there is a false call;
  counted over many A/A comparisons, against α, it checks that the rule holds its α on these
  machines (``false_call_p``).

Later DAG runs on the same hardware show the latest A/A noise and the false calls counted over
the stored A/A comparisons beside their launcher ratios (``beside``), and the regression check
says what drop its repeats detect at that spread. Pure: pandas and numpy, no Airflow, no database.
"""
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from mxbench.matrix.variants import ARM_B, launcher_of, stop_budget
from mxbench.results.metrics import launcher_ratios
from mxbench.stats.outcomes import CALLED
from mxbench.stats.verdict import ALPHA

NOISE_COLUMNS = {"variant": "string", "launcher": "string", "runs": "Int64", "rounds": "Int64",
                 "cv": "float64", "drift_per_run": "float64", "ratio": "float64", "ci_low": "float64",
                 "ci_high": "float64", "outcome": "string", "analysis": "string", "false_call": "boolean",
                 "dag_run": "string", "measured_at": "string"}


@dataclass(frozen=True)
class Stored:
    """A/A noise rows (``NOISE_COLUMNS``) and where they came from, for ``beside``; ``unavailable``:
    why none could be read."""
    noise: Optional[pd.DataFrame]
    source: str
    unavailable: Optional[str] = None


def _fit(y: np.ndarray, t: np.ndarray, arm: np.ndarray) -> tuple:
    """(CV, drift per run) of log speeds ``y`` of runs at places ``t`` in time: a line through
    them, each arm's level fitted apart (a real difference between the arms, a false call, is no
    spread)."""
    design = np.column_stack([np.ones_like(t), t, arm])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ coef
    dof = len(y) - np.linalg.matrix_rank(design)
    return float(math.sqrt((residual ** 2).sum() / dof)) if dof > 0 else None, float(coef[1])


def noise_floor(runs: pd.DataFrame, ratios: pd.DataFrame) -> pd.DataFrame:
    """One row per variant and launcher that ran as two arms (``NOISE_COLUMNS``); ``ratios``: the
    launcher table (``metrics.launcher_ratios``) of the same runs, which holds the arms' verdict."""
    rows = []
    # a run's place among all the DAG run's runs in time: the drift is the machines', per run
    place = pd.to_datetime(runs["started_at"], utc=True).rank(method="first") - 1
    measured = runs.assign(place=place)
    measured = measured[(measured["status"] == "ok") & measured["samples_per_sec"].notna() & place.notna()]
    for (variant, arm_leg), _ in measured.groupby(["variant", "launcher"], sort=False):
        if not str(arm_leg).endswith(ARM_B):
            continue
        launcher = launcher_of(arm_leg)
        legs = measured[(measured["variant"] == variant) & measured["launcher"].isin([launcher, arm_leg])]
        legs = legs.sort_values("place")
        if (legs["launcher"] == launcher).sum() < 2 or len(legs) < 4:
            continue
        cv, drift = _fit(np.log(legs["samples_per_sec"].astype(float).to_numpy()), legs["place"].to_numpy(float),
                         (legs["launcher"] == arm_leg).to_numpy(float))
        judged = ratios[(ratios["variant"] == variant) & (ratios["launcher"] == arm_leg)
                        & (ratios["reference"] == launcher)]
        verdict = judged.iloc[0] if not judged.empty else None
        rounds = int(verdict["n"]) if verdict is not None else len(legs) // 2
        rows.append({"variant": variant, "launcher": launcher, "runs": len(legs), "rounds": rounds,
                     "cv": cv, "drift_per_run": drift,
                     **({k: verdict[k] for k in ("ratio", "ci_low", "ci_high", "outcome", "analysis")}
                        if verdict is not None else {}),
                     "false_call": None if verdict is None else verdict["outcome"] in CALLED})
    return pd.DataFrame(rows, columns=list(NOISE_COLUMNS)).astype(NOISE_COLUMNS)


def stored_noise(repeats: pd.DataFrame, fingerprints: Optional[dict] = None) -> pd.DataFrame:
    """``noise_floor`` of each stored A/A calibration (``store.aa_calibrations``' rows), each DAG
    run judged as its own report judged it (its params' stopping budget). ``fingerprints``:
    launcher -> the kind of machine wanted; a launcher's calibrations on other machines are left out."""
    found = []
    for (dag_id, dag_run), runs in repeats.groupby(["dag_id", "dag_run"], sort=False):
        runs = runs.assign(started_at=pd.to_datetime(runs["started_at"], utc=True),
                           ended_at=pd.to_datetime(runs["ended_at"], utc=True))
        params = runs["params"].iloc[0] or {}
        try:
            budget = stop_budget(params)
        except (ValueError, KeyError, TypeError):  # params of an older mxbench: judged as fixed rounds
            budget = None
        noise = noise_floor(runs, launcher_ratios(runs, budget=budget))
        machine = runs.dropna(subset=["environment"]).groupby("launcher")["environment"].first()
        if fingerprints is not None:
            noise = noise[[machine.get(launcher) == fingerprints.get(launcher) for launcher in noise["launcher"]]]
        measured_at = pd.Timestamp(runs["measured_at"].iloc[0])
        found.append(noise.assign(dag_run=f"{dag_id}/{dag_run}", measured_at=measured_at.isoformat()))
    found = [f for f in found if not f.empty]
    return (pd.concat(found, ignore_index=True) if found
            else pd.DataFrame(columns=list(NOISE_COLUMNS))).astype(NOISE_COLUMNS)


def false_calls(noise: pd.DataFrame) -> tuple:
    """(A/A comparisons called different, A/A comparisons judged)."""
    judged = noise["false_call"].dropna().astype(bool)
    return int(judged.sum()), len(judged)


def false_call_p(called: int, judged: int, alpha: float = ALPHA) -> float:
    """How likely ``called`` or more false calls in ``judged`` A/A comparisons are if the rule
    holds its α on these machines (binomial tail): small means it does not."""
    return float(sum(math.comb(judged, k) * alpha ** k * (1 - alpha) ** (judged - k)
                     for k in range(called, judged + 1)))


def latest(noise: pd.DataFrame) -> pd.DataFrame:
    """Each variant and launcher's most recent A/A noise (rows of several DAG runs)."""
    if noise.empty:
        return noise
    return (noise.sort_values("measured_at", kind="stable")
            .drop_duplicates(["variant", "launcher"], keep="last").reset_index(drop=True))


def describe(name: str, row) -> str:
    """"local CV 1.2%, drift +0.10%/run": one launcher's row of ``noise_floor``."""
    measured = f" ({row['dag_run']}, {str(row['measured_at'])[:10]})" if not pd.isna(row.get("dag_run")) else ""
    return f"{name} CV {row['cv']:.1%}, drift {row['drift_per_run']:+.2%}/run{measured}"


def beside(ratios: pd.DataFrame, stored: Optional[Stored]) -> pd.DataFrame:
    """``ratios`` with ``noise_floor`` filled in for each launcher pair: both launchers' latest A/A
    noise for its variant (``stored``), and the false calls over the A/A comparisons it holds."""
    ratios = ratios.copy()
    if ratios.empty:
        return ratios
    if stored is None or stored.noise is None or stored.noise.empty:
        ratios["noise_floor"] = (stored.unavailable if stored is not None and stored.unavailable else
                                 "no A/A calibration on this hardware yet (the aa-calibration preset measures one)")
        return ratios
    called, judged = false_calls(stored.noise)
    newest = latest(stored.noise).set_index(["variant", "launcher"])
    texts = []
    for row in ratios.itertuples():
        names = dict.fromkeys([row.reference, launcher_of(row.launcher)])
        found = [describe(name, newest.loc[(row.variant, name)]) for name in names
                 if (row.variant, name) in newest.index]
        texts.append(f"A/A noise ({stored.source}): {'; '.join(found)}; false calls: {called} of {judged} A/A "
                     "comparisons" if found else
                     f"no A/A calibration of {row.variant} under {' or '.join(names)} on these machines yet")
    ratios["noise_floor"] = texts
    return ratios
