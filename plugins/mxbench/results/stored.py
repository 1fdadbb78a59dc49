"""The results store's repeats shaped for the scaling views: the fit's input over every stored DAG
run of a setup (``fit_inputs``), and the measured efficiency and speed per MXNet build
(``efficiency_by_build``). Pure: the store's rows come in (``store.history`` or ``read_history``,
and ``store.read_sizes``), tables go out.

Why the store and not one DAG run: one DAG run has a few repeats of each size; every stored DAG
run of the same setup on the same kind of machine gives the fit more of them, and a build's
efficiency can be followed from build to build. Why one kind of machine only: a step time is the
hardware's, and a fit over two kinds would be a curve through two machines that neither has
(``one_machine`` refuses, naming them).
"""
from typing import Dict, Optional, Tuple

import pandas as pd

from mxbench.results.metrics import add_scaling

SIZE_FACTS = ["devices", "workers", "hosts", "gpus_per_worker", "batch_size", "batch_per_device", "kvstore"]
MODEL = ["num_layers", "batch_per_device"]  # a model, as add_scaling groups: depth and images per device
DAG_RUN = ["dag_id", "run_id"]
LINK_COLUMNS = ["link_bits", "link_bytes_per_step"]  # the runs table's, as the store keeps them


class MixedMachines(ValueError):
    """The rows measured more than one kind of machine (``environments.fingerprint``)."""


def sized(history: pd.DataFrame, sizes: pd.DataFrame) -> pd.DataFrame:
    """The measured repeats (status ok, with a speed) with their variant's size (``read_sizes``) and
    ``num_layers`` the depth their DAG run measured (its override, else the variant's); a repeat
    whose variant has no size recorded is left out."""
    ok = history[(history["status"] == "ok") & history["samples_per_sec"].notna()]
    facts = sizes[DAG_RUN + ["variant"] + SIZE_FACTS + ["num_layers", "depth_override"]]
    merged = ok.drop(columns=[c for c in SIZE_FACTS + ["num_layers"] if c in ok], errors="ignore").merge(
        facts, on=DAG_RUN + ["variant"], how="inner")
    depth = merged["depth_override"].astype(object).where(merged["depth_override"].notna(), merged["num_layers"])
    merged = merged.assign(num_layers=depth).dropna(subset=["devices", "num_layers", "batch_per_device"])
    return merged.assign(**{c: merged[c].astype(int) for c in ("devices", "num_layers", "batch_per_device")},
                         hosts=merged["hosts"].fillna(1).astype(int),
                         workers=merged["workers"].fillna(1).astype(int))


def machines(rows: pd.DataFrame) -> pd.DataFrame:
    """Each kind of machine among ``rows``: its DAG runs and repeats, most first."""
    named = rows.assign(environment=rows["environment"].fillna("unknown"),
                        dag_run=rows["dag_id"].astype(str) + "/" + rows["run_id"].astype(str))
    counts = named.groupby("environment").agg(dag_runs=("dag_run", "nunique"), repeats=("dag_run", "size"))
    return counts.sort_values(["dag_runs", "repeats"], ascending=False).reset_index()


def one_machine(rows: pd.DataFrame) -> Optional[str]:
    """The one kind of machine the rows measured (None: no rows); ``MixedMachines`` names them all
    when there are several."""
    found = machines(rows)
    if len(found) > 1:
        listed = "; ".join(f"{m.environment} ({m.dag_runs} DAG run{'s' if m.dag_runs != 1 else ''}, "
                           f"{m.repeats} repeat{'s' if m.repeats != 1 else ''})" for m in found.itertuples())
        raise MixedMachines(f"the stored runs measured {len(found)} kinds of machine: {listed}. A step time is one "
                            "machine's: the fit takes one kind only; pick it with --fingerprint")
    return None if found.empty else str(found["environment"].iloc[0])


def fit_inputs(rows: pd.DataFrame) -> Tuple[pd.DataFrame, Dict[str, dict]]:
    """``sized`` rows of one kind of machine as the runs table and the variants ``scaling_model.setups``
    reads (what ``report.scaling_tables`` fits a DAG run folder from): every repeat of every DAG run a
    point's speeds, with its link's rate and bytes a step where stored (revision 0011), from which the
    network term is learned. The store keeps no P2P matrix: a GPU size of more than one device per
    host is fitted with its P2P layout unknown."""
    one_machine(rows)
    runs = pd.DataFrame({"variant": rows["variant"], "launcher": rows["launcher"], "status": "ok",
                         "samples_per_sec": rows["samples_per_sec"].astype(float), "num_layers": rows["num_layers"],
                         "batch_per_device": rows["batch_per_device"], "devices": rows["devices"],
                         "p2p_pairs": None, "dag_id": rows["dag_id"], "run_id": rows["run_id"],
                         **{c: rows[c] if c in rows else None for c in LINK_COLUMNS}})
    variants = {r["variant"]: {"id": r["variant"], **{c: _plain(r[c]) for c in SIZE_FACTS}}
                for r in rows.drop_duplicates("variant", keep="last").to_dict("records")}
    return runs.reset_index(drop=True), variants


def _plain(value):
    if value is None or value != value:
        return None
    return value.item() if hasattr(value, "item") else value


def efficiency_by_build(rows: pd.DataFrame) -> pd.DataFrame:
    """Per model (depth, images per device), launcher, kind of machine, MXNet build and size: the
    DAG runs, the median of their median speeds, and ``metrics.add_scaling``'s speedup and
    efficiency against the 1-device variant of the same build, launcher and machine (NaN where that
    build has none there). Only the models measured at more than one device count; none: empty."""
    if rows.empty:
        return pd.DataFrame()
    spread = rows.groupby(MODEL)["devices"].nunique()
    rows = rows.join(spread.rename("device_counts"), on=MODEL)
    rows = rows[rows["device_counts"] > 1]
    if rows.empty:
        return pd.DataFrame()
    size = MODEL + ["launcher", "environment", "build", "devices", "hosts", "variant"]
    per_run = rows.groupby(size + DAG_RUN, as_index=False, dropna=False).agg(
        samples_per_sec=("samples_per_sec", "median"), measured_at=("measured_at", "min"))
    summary = per_run.groupby(size, as_index=False, dropna=False).agg(
        dag_runs=("run_id", "size"), samples_per_sec=("samples_per_sec", "median"))
    scaled = pd.concat([add_scaling(group) for _, group in summary.groupby(["environment", "build"], dropna=False,
                                                                            sort=False)])
    # builds in the order they were first measured
    first = per_run.groupby("build", dropna=False)["measured_at"].min().rank(method="first").rename("build_order")
    return (scaled.join(first, on="build")
            .sort_values(MODEL + ["launcher", "environment", "build_order", "devices", "hosts"], kind="stable")
            .drop(columns="build_order").reset_index(drop=True))
