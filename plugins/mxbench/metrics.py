"""From parsed logs to the numbers of the seed study's table.

Per run: steady-state samples/s (warm-up excluded; the workers' own readings
summed, as each worker's Speedometer measures only its share), seconds/epoch
(the first epoch excluded when later ones exist), validation accuracy.
Per variant: median and spread over repeats, speedup and scaling efficiency
against the 1-device baseline. Across launchers: the speed ratio, and whether
it is beyond run-to-run noise.
"""
import math
from typing import List, Optional

import pandas as pd

from .parse import ParsedLog


class NoSpeedLines(ValueError):
    """A log that holds no Speedometer reading: nothing to measure."""


def steady_state(speed: pd.DataFrame) -> pd.DataFrame:
    """Readings after warm-up: epochs after the first when there are any, else all but each worker's first."""
    later = speed[speed["epoch"] > speed["epoch"].min()]
    if not later.empty:
        return later
    rest = speed[speed.groupby("worker").cumcount() > 0]
    return rest if not rest.empty else speed


def epoch_table(parsed: ParsedLog) -> pd.DataFrame:
    """One row per epoch of the job: the slowest worker's time, the workers' mean accuracies."""
    return (parsed.epochs.groupby("epoch", as_index=False)
            .agg(time_cost_s=("time_cost_s", "max"), train_accuracy=("train_accuracy", "mean"),
                 validation_accuracy=("validation_accuracy", "mean")))


def run_metrics(parsed: ParsedLog, name: str = "log") -> dict:
    if parsed.speed.empty:
        raise NoSpeedLines(f"{name} has no Speedometer lines ('Epoch[..] Batch [..] Speed: .. samples/sec'): "
                           "did training start, and is --disp-batches smaller than the batches per epoch?")
    per_worker = steady_state(parsed.speed).groupby("worker")["samples_per_sec"].median()
    epochs = epoch_table(parsed)
    timed = epochs.dropna(subset=["time_cost_s"])
    steady_epochs = timed[timed["epoch"] > timed["epoch"].min()] if len(timed) > 1 else timed
    validated = epochs.dropna(subset=["validation_accuracy"])
    return {
        "workers": int(parsed.workers),
        "samples_per_sec": float(per_worker.sum()),
        "sec_per_epoch": float(steady_epochs["time_cost_s"].median()) if not steady_epochs.empty else None,
        "first_epoch_s": float(timed["time_cost_s"].iloc[0]) if not timed.empty else None,
        "validation_accuracy": float(validated["validation_accuracy"].iloc[-1]) if not validated.empty else None,
        "epochs": [{k: _clean(v) for k, v in row.items()} for row in epochs.to_dict("records")],
        "p2p": parsed.p2p,
    }


def _clean(value):
    return None if isinstance(value, float) and math.isnan(value) else value


def spread(values: pd.Series) -> dict:
    values = values.dropna()
    if values.empty:
        return {"median": None, "min": None, "max": None, "cv": None, "n": 0}
    mean = values.mean()
    cv = float(values.std(ddof=1) / mean) if len(values) > 1 and mean else None
    return {"median": float(values.median()), "min": float(values.min()), "max": float(values.max()),
            "cv": cv, "n": int(len(values))}


SUMMARY_COLUMNS = {
    "variant": "string", "setup": "string", "launcher": "string", "num_layers": "Int64", "devices": "Int64",
    "batch_size": "Int64", "batch_per_device": "Int64", "runs_ok": "Int64", "runs_failed": "Int64",
    "samples_per_sec": "float64", "samples_per_sec_min": "float64", "samples_per_sec_max": "float64",
    "samples_per_sec_cv": "float64", "sec_per_epoch": "float64", "sec_per_epoch_min": "float64",
    "sec_per_epoch_max": "float64", "gpu_util_pct": "float64", "gpu_mem_mib": "float64",
    "validation_accuracy": "float64", "speedup": "float64", "scaling_efficiency": "float64",
}


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per variant x launcher, over its repeats; with speedup and scaling efficiency."""
    rows = []
    for (variant, launcher), group in runs.groupby(["variant", "launcher"], sort=False):
        ok = group[group["status"] == "ok"]
        speed, epoch = spread(ok["samples_per_sec"]), spread(ok["sec_per_epoch"])
        first = group.iloc[0]
        rows.append({
            "variant": variant, "setup": first["setup"], "launcher": launcher,
            "num_layers": first["num_layers"], "devices": first["devices"], "batch_size": first["batch_size"],
            "batch_per_device": first["batch_per_device"], "runs_ok": len(ok), "runs_failed": len(group) - len(ok),
            "samples_per_sec": speed["median"], "samples_per_sec_min": speed["min"],
            "samples_per_sec_max": speed["max"], "samples_per_sec_cv": speed["cv"],
            "sec_per_epoch": epoch["median"], "sec_per_epoch_min": epoch["min"], "sec_per_epoch_max": epoch["max"],
            "gpu_util_pct": ok["gpu_util_pct"].median() if ok["gpu_util_pct"].notna().any() else None,
            "gpu_mem_mib": ok["gpu_mem_mib"].median() if ok["gpu_mem_mib"].notna().any() else None,
            "validation_accuracy": ok["validation_accuracy"].median() if not ok.empty else None,
        })
    summary = pd.DataFrame(rows, columns=[c for c in SUMMARY_COLUMNS if c not in ("speedup", "scaling_efficiency")])
    return summary.pipe(add_scaling).astype(SUMMARY_COLUMNS)


def add_scaling(summary: pd.DataFrame) -> pd.DataFrame:
    """Speedup and efficiency against the 1-device variant with the same launcher, depth and
    per-device batch (the seed: 1 GPU at 128 is the baseline of 2, 4, 8 GPUs at 128 each)."""
    keys = ["launcher", "num_layers", "batch_per_device"]
    baseline = (summary[summary["devices"] == 1].groupby(keys)["samples_per_sec"].first()
                .rename("baseline_samples_per_sec"))
    joined = summary.join(baseline, on=keys)
    speedup = joined["samples_per_sec"] / joined["baseline_samples_per_sec"]
    return summary.assign(speedup=speedup, scaling_efficiency=speedup / summary["devices"])


RATIO_COLUMNS = {"variant": "string", "launcher": "string", "reference": "string", "ratio": "float64",
                 "ratio_low": "float64", "ratio_high": "float64", "runs": "string", "verdict": "string"}


def reference_launcher(launchers: List[str]) -> Optional[str]:
    for preferred in ("ssh", "local"):
        if preferred in launchers:
            return preferred
    return launchers[0] if launchers else None


def launcher_ratios(runs: pd.DataFrame, reference: Optional[str] = None) -> pd.DataFrame:
    """For every variant run under two launchers: speed of each against the reference (k8s/ssh)."""
    ok = runs[(runs["status"] == "ok") & runs["samples_per_sec"].notna()]
    reference = reference or reference_launcher(list(dict.fromkeys(ok["launcher"])))
    rows = []
    for variant, group in ok.groupby("variant", sort=False):
        ref = group.loc[group["launcher"] == reference, "samples_per_sec"]
        if ref.empty:
            continue
        for launcher, other in group[group["launcher"] != reference].groupby("launcher", sort=False):
            rows.append({"variant": variant, "launcher": launcher, "reference": reference,
                         **compare_speeds(other["samples_per_sec"], ref)})
    return pd.DataFrame(rows, columns=list(RATIO_COLUMNS)).astype(RATIO_COLUMNS)


def compare_speeds(a: pd.Series, b: pd.Series) -> dict:
    """a against b: ratio of medians, the range the repeats allow, and a plain verdict."""
    ratio = a.median() / b.median()
    low, high = a.min() / b.max(), a.max() / b.min()
    if len(a) < 2 or len(b) < 2:
        verdict = "one run on a side: cannot tell a difference from run-to-run noise"
    elif a.min() > b.max() or a.max() < b.min():
        verdict = f"{'faster' if ratio > 1 else 'slower'} by {abs(ratio - 1):.1%}, beyond run-to-run noise " \
                  "(the repeats' ranges do not overlap)"
    else:
        verdict = f"within run-to-run noise (the repeats' ranges overlap; {abs(ratio - 1):.1%} apart at the median)"
    return {"ratio": ratio, "ratio_low": low, "ratio_high": high, "runs": f"{len(a)} vs {len(b)}",
            "verdict": verdict}
