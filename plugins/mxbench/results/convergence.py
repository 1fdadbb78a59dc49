"""Time to accuracy: how long a run trained before its validation top-1 first reached a target.

The seed study found batch 256 faster per image than 128 but slower to converge ("about 200 suits
CIFAR-10"). Throughput alone would call 256 better; MLPerf's answer is to time training to a
reference accuracy. Here, per run: the summed epoch time costs (``Epoch[N] Time cost=``, from the
first epoch logged) up to and including the first epoch whose validation accuracy reached the
preset's target. Per variant: the median over its repeats. A variant faster in samples/s than its
reference but later to the target is flagged: its throughput gain is not a training gain.

Pure: tables in, tables out; ``pipeline.join`` writes ``tables/convergence.csv`` from them, and
``store.recording`` stores each run's seconds to target.
"""
import math
from typing import Optional

import pandas as pd

from mxbench.matrix.variants import SYNTHETIC

# Validation top-1 each preset's runs are timed to, by data: synthetic (the generated CIFAR-format
# data) or real (a CIFAR-10 the user gave). A preset missing here is timed to no target.
# convergence, synthetic (3000 images): every batch size reaches it within the preset's 8 epochs, in
# the seed's order (measured, MXNet 1.9.1 on the CPU: batch 128 in epoch 3, 200 in 6, 256 in 7).
# convergence, real CIFAR-10: ResNet-8 passes 60% within a few epochs (an estimate, not measured).
# seed: ResNet-110 on CIFAR-10 reaches about 93.5% top-1 (He et al. 2016, 6.43% error); the seed
# study itself gives no accuracy figure.
TARGETS = {
    ("convergence", "synthetic"): 0.90,
    ("convergence", "real"): 0.60,
    ("seed", "real"): 0.93,
    ("seed-k8s", "real"): 0.93,
}

RUN_COLUMNS = {"key": "string", "variant": "string", "launcher": "string", "repeat": "Int64",
               "batch_size": "Int64", "samples_per_sec": "float64", "target_accuracy": "float64",
               "time_to_target_s": "float64", "epochs_to_target": "Int64", "best_validation_accuracy": "float64",
               "epochs": "Int64"}
VARIANT_COLUMNS = {"variant": "string", "launcher": "string", "batch_size": "Int64", "runs": "Int64",
                   "reached": "Int64", "target_accuracy": "float64", "time_to_target_s": "float64",
                   "time_to_target_min": "float64", "time_to_target_max": "float64",
                   "samples_per_sec": "float64", "reference": "string", "reference_samples_per_sec": "float64",
                   "reference_time_to_target_s": "float64", "flag": "string"}


def target_for(params: dict) -> Optional[float]:
    """The validation top-1 a DAG run's runs are timed to: ``params["target_accuracy"]`` where
    given, else the preset's for its data (synthetic or real); None: no target for this preset."""
    given = params.get("target_accuracy")
    if given is not None:
        return float(given)
    data = "synthetic" if params.get("dataset", SYNTHETIC) == SYNTHETIC else "real"
    return TARGETS.get((params.get("preset", "cpu-demo"), data))


def per_epoch(epochs: pd.DataFrame) -> pd.DataFrame:
    """One job's epochs (rows of ``tables/epochs.csv``, any number of workers) as one row per
    epoch in order: the slowest worker's time, the workers' mean validation accuracy."""
    return (epochs.groupby("epoch", as_index=False)
            .agg(time_cost_s=("time_cost_s", "max"), validation_accuracy=("validation_accuracy", "mean"))
            .sort_values("epoch", ignore_index=True))


def time_to_target(epochs: pd.DataFrame, target: float) -> dict:
    """Of one run's epochs: ``time_to_target_s`` (the epoch time costs summed from the first epoch
    up to the first whose validation accuracy reached ``target``; None: never reached, or an epoch
    before it has no time cost), ``epochs_to_target`` (how many epochs that took), and the best
    validation accuracy seen."""
    table = per_epoch(epochs) if not epochs.empty else pd.DataFrame(columns=["time_cost_s", "validation_accuracy"])
    validated = table["validation_accuracy"].dropna()
    best = float(validated.max()) if not validated.empty else None
    reached = table.index[table["validation_accuracy"] >= target]
    if reached.empty:
        return {"time_to_target_s": None, "epochs_to_target": None, "best_validation_accuracy": best}
    upto = table.loc[:reached[0], "time_cost_s"]
    # the log prints time costs to the millisecond: rounding drops only float noise from the sum
    seconds = round(float(upto.sum()), 3) if upto.notna().all() else None
    return {"time_to_target_s": seconds, "epochs_to_target": len(upto), "best_validation_accuracy": best}


def run_times(runs: pd.DataFrame, epochs: pd.DataFrame, target: Optional[float]) -> pd.DataFrame:
    """One row per measured run (``tables/runs.csv`` rows with status ok): its seconds to
    ``target`` from its rows of ``tables/epochs.csv``. Empty when there is no target."""
    if target is None or runs.empty or "status" not in runs:
        return pd.DataFrame(columns=list(RUN_COLUMNS)).astype(RUN_COLUMNS)
    rows = []
    for run in runs[runs["status"] == "ok"].to_dict("records"):
        own = epochs[epochs["key"] == run["key"]] if "key" in epochs else epochs.iloc[0:0]
        rows.append({"key": run["key"], "variant": run["variant"], "launcher": run["launcher"],
                     "repeat": run["repeat"], "batch_size": run.get("batch_size"),
                     "samples_per_sec": run.get("samples_per_sec"), "target_accuracy": target,
                     **time_to_target(own, target), "epochs": own["epoch"].nunique() if not own.empty else 0})
    return pd.DataFrame(rows, columns=list(RUN_COLUMNS)).astype(RUN_COLUMNS)


def median_time(times: pd.Series) -> Optional[float]:
    """Median seconds to target over repeats, a run that never reached it counted as slower than
    any that did: None when half or more of them never reached it."""
    if times.empty:
        return None
    median = times.fillna(math.inf).median()
    return None if math.isinf(median) else float(median)


def later(time_s, reference_s) -> bool:
    """Whether ``time_s`` is later to the target than ``reference_s`` (None: never reached)."""
    if reference_s is None or pd.isna(reference_s):
        return False  # the reference never reached it: nothing reaches it later than that
    return time_s is None or pd.isna(time_s) or time_s > reference_s


def flag_line(name: str, speed: float, time_s, reference: str, reference_speed: float, reference_s,
              target: float) -> str:
    """Why a variant (or build) is flagged: faster, but later to the target than ``reference``."""
    reached = f"{time_s:.1f} s" if time_s is not None and not pd.isna(time_s) else "never"
    return (f"{name} is faster than {reference} ({speed:.1f} against {reference_speed:.1f} samples/s, "
            f"{speed / reference_speed - 1:+.0%}) but reaches {target:.0%} validation top-1 later "
            f"({reached} against {reference_s:.1f} s): its throughput gain is not a training gain")


def summarise(times: pd.DataFrame) -> pd.DataFrame:
    """One row per variant x launcher: runs, how many reached the target, the median (and min-max
    over those that reached) seconds to it, median samples/s, and against the reference variant
    (the smallest batch of the same launcher) a ``flag`` where it is faster but later."""
    rows = []
    for (variant, launcher), group in times.groupby(["variant", "launcher"], sort=False):
        reached = group["time_to_target_s"].dropna()
        speed = group["samples_per_sec"].dropna()
        rows.append({"variant": variant, "launcher": launcher, "batch_size": group["batch_size"].iloc[0],
                     "runs": len(group), "reached": len(reached), "target_accuracy": group["target_accuracy"].iloc[0],
                     "time_to_target_s": median_time(group["time_to_target_s"]),
                     "time_to_target_min": reached.min() if not reached.empty else None,
                     "time_to_target_max": reached.max() if not reached.empty else None,
                     "samples_per_sec": float(speed.median()) if not speed.empty else None})
    summary = pd.DataFrame(rows, columns=[c for c in VARIANT_COLUMNS if not c.startswith("reference")
                                          and c != "flag"])
    flagged = []
    for _, group in summary.groupby("launcher", sort=False):
        reference = group.sort_values(["batch_size", "variant"]).iloc[0]
        for row in group.to_dict("records"):
            flag = ""
            if row["variant"] != reference["variant"] and is_flagged(
                    row["samples_per_sec"], row["time_to_target_s"],
                    reference["samples_per_sec"], reference["time_to_target_s"]):
                flag = flag_line(f"{row['variant']} ({row['launcher']})", row["samples_per_sec"],
                                 row["time_to_target_s"], reference["variant"], reference["samples_per_sec"],
                                 reference["time_to_target_s"], row["target_accuracy"])
            flagged.append({**row, "reference": reference["variant"],
                            "reference_samples_per_sec": reference["samples_per_sec"],
                            "reference_time_to_target_s": reference["time_to_target_s"], "flag": flag})
    return pd.DataFrame(flagged, columns=list(VARIANT_COLUMNS)).astype(VARIANT_COLUMNS)


def is_flagged(speed, time_s, reference_speed, reference_s) -> bool:
    """Faster in samples/s than the reference, and later to the target (or never reaching it)."""
    if any(v is None or pd.isna(v) for v in (speed, reference_speed)):
        return False
    return speed > reference_speed and later(time_s, reference_s)


def build_flag(name: str, current: pd.DataFrame, baseline: pd.DataFrame, target: float) -> str:
    """Across builds: '' unless ``current`` (one variant/launcher/machine's runs of this build:
    ``samples_per_sec``, ``time_to_target_s``) is faster than ``baseline`` (the stored baseline's
    runs of the same variant, launcher and machine) but later to ``target`` by their medians."""
    def medians(runs):
        speed = runs["samples_per_sec"].dropna()
        return (float(speed.median()) if not speed.empty else None), median_time(runs["time_to_target_s"])

    (speed, time_s), (reference_speed, reference_s) = medians(current), medians(baseline)
    if not is_flagged(speed, time_s, reference_speed, reference_s):
        return ""
    return flag_line(name, speed, time_s, "the baseline build", reference_speed, reference_s, target)
