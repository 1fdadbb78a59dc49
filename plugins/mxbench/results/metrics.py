"""From parsed logs to the numbers of the seed study's table.

Per run: steady-state samples/s (warm-up excluded; the workers' own readings
summed, as each worker's Speedometer measures only its share), seconds/epoch
(the first epoch excluded when later ones exist), validation accuracy.
Per variant: median and spread over repeats, speedup and scaling efficiency
against the 1-device baseline. Across launchers: the speed ratio with the
verdict statistics of ``verdict``, paired by round when the runs came in rounds, each pair on
the rounds its own plan asked for, and the lines of one report controlled as a family.
"""
import math
from typing import List, Optional, Sequence, Tuple

import pandas as pd

from mxbench.matrix.variants import ARM_B, HOST_NETWORK_SUFFIX, launcher_of
from mxbench.results import contention
from mxbench.results.parse import ParsedLog
from mxbench.stats import family, verdict
from mxbench.stats.floors import ALPHA, MIN_REPEATS, rounds_needed
from mxbench.stats.outcomes import BORDERLINE, CALLED


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


def images_per_epoch(parsed: ParsedLog) -> Optional[float]:
    """Images the whole job read per epoch, from the workers' ``run_end`` events (each worker
    reads its own part of the data)."""
    ends = [e for e in parsed.events if e.get("event") == "run_end" and e.get("epochs_completed")]
    if not ends:
        return None
    return float(sum(e["images_seen"] / e["epochs_completed"] for e in ends))


def run_metrics(parsed: ParsedLog, name: str = "log", images_per_epoch_hint: Optional[float] = None) -> dict:
    """One run's numbers. Throughput two ways: the Speedometer's (batches only) and images per
    epoch / s/epoch (what the seed's s/epoch table implies)."""
    if parsed.speed.empty:
        raise NoSpeedLines(f"{name} has no Speedometer lines ('Epoch[..] Batch [..] Speed: .. samples/sec'): "
                           "did training start, and is --disp-batches smaller than the batches per epoch?")
    per_worker = steady_state(parsed.speed).groupby("worker")["samples_per_sec"].median()
    epochs = epoch_table(parsed)
    timed = epochs.dropna(subset=["time_cost_s"])
    warmup_excluded = len(timed) > 1
    steady_epochs = timed[timed["epoch"] > timed["epoch"].min()] if warmup_excluded else timed
    validated = epochs.dropna(subset=["validation_accuracy"])
    sec_per_epoch = float(steady_epochs["time_cost_s"].median()) if not steady_epochs.empty else None
    images = images_per_epoch(parsed) or images_per_epoch_hint
    return {
        "workers": int(parsed.workers),
        "samples_per_sec": float(per_worker.sum()),
        "sec_per_epoch": sec_per_epoch,
        "epoch_samples_per_sec": images / sec_per_epoch if images and sec_per_epoch else None,
        "images_per_epoch": images,
        "warmup_excluded": warmup_excluded,
        "first_epoch_s": float(timed["time_cost_s"].iloc[0]) if not timed.empty else None,
        "validation_accuracy": float(validated["validation_accuracy"].iloc[-1]) if not validated.empty else None,
        "epochs": [{k: nan_to_none(v) for k, v in row.items()} for row in epochs.to_dict("records")],
        "p2p": parsed.p2p,
    }


def link_bytes_per_step(events) -> Optional[float]:
    """Bytes the busiest host sent per step over training: each worker's ``run_end`` reading of its
    host (``net_sent_bytes``, ``mxbench_train.host_watch``) over its batches (``images_seen`` over
    its ``run_start``'s ``batch_size``); None where no worker read it. A host's word: a value that is
    no count is passed over."""
    def count(value) -> Optional[float]:
        number = contention.reported_number(value)
        return number if number is not None and number >= 0 else None

    batch = {e.get("rank"): count(e.get("batch_size")) for e in events if e.get("event") == "run_start"}
    per_step = []
    for e in events:
        if e.get("event") != "run_end" or not isinstance(e.get("host"), dict):
            continue
        sent, images = count(e["host"].get("net_sent_bytes")), count(e.get("images_seen"))
        size = batch.get(e.get("rank"))
        if sent is not None and images and size:
            per_step.append(sent / (images / size))
    return max(per_step) if per_step else None


def nan_to_none(value):
    """A table cell as JSON takes it: NaN (a missing number) -> None."""
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
    "runs_reused": "Int64", "samples_per_sec": "float64", "samples_per_sec_min": "float64",
    "samples_per_sec_max": "float64", "samples_per_sec_cv": "float64", "epoch_samples_per_sec": "float64",
    "throughput_check": "string", "warmup_excluded": "boolean", "sec_per_epoch": "float64",
    "sec_per_epoch_min": "float64", "sec_per_epoch_max": "float64", "gpu_util_pct": "float64",
    "gpu_mem_mib": "float64", "validation_accuracy": "float64", "speedup": "float64",
    "scaling_efficiency": "float64",
}
THROUGHPUT_TOLERANCE = 0.10  # Speedometer vs images/epoch ÷ s/epoch: more apart than this is flagged


def throughput_check(speedometer, per_epoch) -> str:
    """Empty when the two throughputs agree; else which one is higher, and by how much."""
    if speedometer is None or per_epoch is None or pd.isna(speedometer) or pd.isna(per_epoch):
        return ""
    gap = speedometer / per_epoch - 1
    if abs(gap) <= THROUGHPUT_TOLERANCE:
        return ""
    return (f"Speedometer samples/s is {abs(gap):.0%} {'above' if gap > 0 else 'below'} images/epoch ÷ s/epoch "
            f"(more than {THROUGHPUT_TOLERANCE:.0%} apart)")


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per variant x launcher, over its repeats; with speedup and scaling efficiency
    (both from the Speedometer's samples/s)."""
    rows = []
    for (variant, launcher), group in runs.groupby(["variant", "launcher"], sort=False):
        ok = group[group["status"] == "ok"]
        speed, epoch = spread(ok["samples_per_sec"]), spread(ok["sec_per_epoch"])
        per_epoch = spread(ok["epoch_samples_per_sec"])["median"] if "epoch_samples_per_sec" in ok else None
        first = group.iloc[0]
        rows.append({
            "variant": variant, "setup": first["setup"], "launcher": launcher,
            "num_layers": first["num_layers"], "devices": first["devices"], "batch_size": first["batch_size"],
            "batch_per_device": first["batch_per_device"], "runs_ok": len(ok),
            "runs_failed": int((~group["status"].isin(["ok", "skipped"])).sum()),
            "runs_reused": int(group["reused"].fillna(False).astype(bool).sum()) if "reused" in group else 0,
            "samples_per_sec": speed["median"], "samples_per_sec_min": speed["min"],
            "samples_per_sec_max": speed["max"], "samples_per_sec_cv": speed["cv"],
            "epoch_samples_per_sec": per_epoch, "throughput_check": throughput_check(speed["median"], per_epoch),
            "warmup_excluded": bool(ok["warmup_excluded"].fillna(True).astype(bool).all())
            if "warmup_excluded" in ok and not ok.empty else None,
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
                 "ci_low": "float64", "ci_high": "float64", "level": "float64", "p_value": "float64",
                 "alpha": "float64", "n": "Int64", "n_reference": "Int64", "min_detectable": "float64",
                 "outcome": "string", "order": "string", "analysis": "string", "verdict": "string",
                 "stopping": "string", "noise_floor": "string", "p_adjusted": "float64", "family": "string",
                 "target_gap": "float64", "tost_low": "float64", "tost_high": "float64", "detect_alpha": "float64",
                 "rounds_to_resolve": "Int64", "contended_rounds": "string"}


# simplest first: each launcher is compared with every simpler one that ran (ssh / local is what
# ssh costs; kubernetes / ssh is the seed study's headline)
LAUNCHER_ORDER = ("local", "ssh", "kubernetes")


def launcher_pairs(launchers: List[str]) -> List[tuple]:
    """(launcher, reference) for every pair, the reference the simpler of the two. In an A/A
    calibration (legs ``local-b``, ...: ``variants.leg``) each arm b against its own launcher only:
    different launchers' runs were not back to back there."""
    arms = [(name, launcher_of(name)) for name in launchers if name.endswith(ARM_B)]
    if arms:
        return [(arm, base) for arm, base in arms if base in launchers]
    rank = {name: LAUNCHER_ORDER.index(name) if name in LAUNCHER_ORDER else len(LAUNCHER_ORDER) + i
            for i, name in enumerate(launchers)}
    ordered = sorted(launchers, key=lambda name: rank[name])
    return [(a, b) for i, a in enumerate(ordered) for b in ordered[:i]]


def launcher_ratios(runs: pd.DataFrame, reference: Optional[str] = None,
                    budget: Optional[tuple] = None,
                    target_gap: Optional[float] = None) -> pd.DataFrame:
    """For every variant run under two or more launchers: the speed of each against each simpler
    one (or only against ``reference``), with the verdict statistics, how the two legs were
    ordered in time, and which analysis gave the verdict: paired by round when the two
    launchers' runs came in enough rounds (``paired_rounds``, ``floors.rounds_needed``), else the
    unpaired rule, saying why. ``budget``: (first-stage rounds, most rounds, target gap[, contended
    rounds that may be replaced beyond them]: ``variants.stop_budget``) when
    the rounds' number was chosen from the first stage (``verdict.rounds_planned``): then the
    paired verdict is the two-stage one over the rounds the pair's own first stage planned
    (``planned``: a round run for another pair is in ``stopping``, not in the verdict) and
    ``stopping`` says why the rounds stopped. A round skipped as not needed is no run here; so is
    the rest of a round one of whose runs was skipped. ``target_gap`` (else the budget's): the
    band a line must be shown inside to read "within the band" (``verdict``). The lines are a
    family (``controlled``), and each line's detectable gap is the one the family rule gives
    (``family.detection_alpha``). ``contended_rounds``: which rounds were contended, and whether
    they were replaced or judged as measured."""
    skipped = runs[runs["status"] == "skipped"]
    if not skipped.empty:
        part_skipped = set(zip(skipped["variant"], skipped["repeat"]))
        runs = runs[[(v, r) not in part_skipped for v, r in zip(runs["variant"], runs["repeat"])]]
    ok = runs[(runs["status"] == "ok") & runs["samples_per_sec"].notna()]
    launchers = list(dict.fromkeys(ok["launcher"]))
    pairs = [(a, reference) for a in launchers if a != reference] if reference else launcher_pairs(launchers)
    gap = budget[2] if budget else target_gap
    # the family calls a line at a stricter level than α alone, and its detectable gap is printed at that
    # level: from the lines that will be tested (both sides measured MIN_REPEATS times), checked after
    expected = _family_size(ok, pairs)
    rows = _ratio_rows(runs, ok, pairs, budget, gap, family.detection_alpha(ALPHA, expected, FAMILY_METHOD))
    tested = sum(row.get("p_value") is not None and not str(row["launcher"]).endswith(ARM_B) for row in rows)
    if tested != expected:  # a line left untested after its contended rounds were left out
        rows = _ratio_rows(runs, ok, pairs, budget, gap, family.detection_alpha(ALPHA, tested, FAMILY_METHOD))
    return controlled(pd.DataFrame(rows, columns=list(RATIO_COLUMNS)).astype(RATIO_COLUMNS))


def _family_size(ok: pd.DataFrame, pairs: List[tuple]) -> int:
    """The lines ``controlled`` will adjust together, as far as the measured runs tell: an A/A arm's
    line is none, nor a pair one of whose sides has fewer than MIN_REPEATS measured runs."""
    counts = ok.groupby(["variant", "launcher"]).size()
    return sum(1 for variant in ok["variant"].unique() for a, b in pairs if not str(a).endswith(ARM_B)
               and min(counts.get((variant, a), 0), counts.get((variant, b), 0)) >= MIN_REPEATS)


def _ratio_rows(runs: pd.DataFrame, ok: pd.DataFrame, pairs: List[tuple], budget: Optional[tuple],
                target_gap: Optional[float], detect_alpha: Optional[float]) -> List[dict]:
    """``launcher_ratios``'s lines, each judged alone, the detectable gap at ``detect_alpha``."""
    judge = {"target_gap": target_gap, "detect_alpha": detect_alpha}
    rows = []
    for variant, group in ok.groupby("variant", sort=False):
        every_run = runs[runs["variant"] == variant]
        for launcher, ref_name in pairs:
            contended = contended_rounds(every_run, launcher, ref_name)
            # contended rounds are replaced by later ones (``stop_rule``) and left out, while enough quiet ones ran
            handling = contended_handling(every_run, launcher, ref_name, contended, budget)
            leaving_out = handling in (REPLACED, LEFT_OUT)
            judged = without_rounds(every_run, contended) if leaving_out else every_run
            measured_runs = without_rounds(group, contended) if leaving_out else group
            other = measured_runs.loc[measured_runs["launcher"] == launcher, "samples_per_sec"]
            ref = measured_runs.loc[measured_runs["launcher"] == ref_name, "samples_per_sec"]
            if other.empty or ref.empty:
                continue
            rounds, why_not = paired_rounds(judged, launcher, ref_name, len(contended) if leaving_out else 0)
            if rounds is not None and len(rounds) < rounds_needed():
                # the sign-flip test cannot reach α yet; on counterbalanced order the unpaired rule can
                why_not = f"{len(rounds)} rounds, fewer than the {rounds_needed()} a paired test needs"
                rounds = None
            # the first stage: the first ``repeats`` rounds judged (quiet ones, where contended ones were replaced)
            first_stage = budget[0] if budget else 0
            first_n = first_stage if budget and rounds is not None and len(rounds) >= first_stage >= 3 else None
            if first_n and budget and rounds is not None:
                # the rounds this pair's own plan asked for; a round run for another pair is reported, not judged
                own = rounds[:planned(rounds, budget)]
                result = verdict.compare_two_stage(own, first_n, launcher, ref_name, **judge).to_dict()
            elif rounds is not None:
                result = verdict.compare_paired(rounds, launcher, ref_name, **judge).to_dict()
            else:
                result = {**verdict.compare(other, ref, launcher, ref_name, **judge).to_dict(),
                          "analysis": f"unpaired: {why_not}"}
            if contended:
                rounds_named = ", ".join(map(str, contended))
                named = f"{len(contended)} contended round(s) (other work on their hosts: {rounds_named})"
                note = {REPLACED: f"{named} left out of the verdict and replaced by later rounds, within the budget",
                        LEFT_OUT: f"{named} left out of the verdict; the replacement budget ran out before later "
                                  f"rounds replaced them all, so it rests on the {len(rounds or [])} quiet rounds"
                        }.get(handling or AS_MEASURED)
                note = note or contended_note(every_run, launcher, ref_name, rounds, contended, target_gap)
                result = {**result, "verdict": f"{result['verdict']}. {note}"}
            rows.append({"variant": variant, "launcher": launcher, "reference": ref_name, **result,
                         "contended_rounds": contended_text(contended, handling) if contended else None,
                         "order": leg_order(group, launcher, ref_name),
                         "stopping": stopping(rounds, budget, contended, handling) if budget else None})
    return rows


FAMILY_METHOD = "holm"  # the report's lines: any false call among them at most α (``family.holm``)


def controlled(ratios: pd.DataFrame, method: str = FAMILY_METHOD) -> pd.DataFrame:
    """``ratios`` with the family of their verdict lines controlled: each tested line's p adjusted
    over all of them (``p_adjusted``, ``family`` says how), and a difference called only when the
    adjusted p is below α; a line called alone but not across the family becomes "borderline" and
    says so. An A/A calibration's lines (arms ``local-b``, ...) are no family: each counts once
    against α, which is what the calibration checks."""
    tested = ratios["p_value"].notna() & ~ratios["launcher"].str.endswith(ARM_B).fillna(False)
    if not tested.any():
        return ratios
    count = int(tested.sum())
    adjusted = family.METHODS[method](ratios.loc[tested, "p_value"].tolist())
    name = f"{family.NAMES[method]} over the report's {count} verdict line{'s' if count > 1 else ''}"
    ratios = ratios.copy()
    ratios.loc[tested, "p_adjusted"] = adjusted
    ratios.loc[tested, "family"] = name
    demoted = tested & ratios["outcome"].isin(list(CALLED)) & (ratios["p_adjusted"] >= ratios["alpha"])
    for i in ratios.index[demoted]:
        ratios.loc[i, "verdict"] = _not_across(ratios.loc[i], name)
        ratios.loc[i, "outcome"] = BORDERLINE
    return ratios


def _not_across(row: pd.Series, name: str) -> str:
    """The verdict sentence of a line that p < α calls alone but the family's adjusted p does not."""
    head = str(row["verdict"]).split(": ", 1)[0]
    p = row["p_value"]
    p_text = "p < 0.001" if p < 0.001 else f"p = {p:.3f}"
    return (f"{head}: borderline ({p_text} < α = {row['alpha']:g} alone, but not across the family: "
            f"{name}, adjusted p = {row['p_adjusted']:.3f}): not called a difference; more rounds would settle it")


def planned(rounds: List[Tuple[float, float]], budget: tuple) -> int:
    """How many rounds this pair's own first stage planned (``verdict.rounds_planned``)."""
    first_n, most, target_gap, _ = stop_plan(budget)
    return verdict.rounds_planned(rounds[:first_n], target_gap, most)[0]


def stopping(rounds: Optional[List[Tuple[float, float]]], budget: tuple, contended: Sequence[int] = (),
             handling: Optional[str] = None) -> str:
    """Why a pair's rounds stopped where they did, under a budget of (first-stage rounds, most
    rounds, target gap, replacement rounds): the rounds the first stage planned
    (``verdict.rounds_planned``), and how many of them ran; the ``contended`` rounds and their
    ``handling`` (``contended_handling``), and why; rounds beyond the plan (run for another pair of
    the variant) with their ratios, reported but not judged."""
    first_n, most, target_gap, spare = stop_plan(budget)
    named = ", ".join(map(str, contended))
    if handling == REPLACED:
        aside = (f"; {len(contended)} contended round(s) replaced ({named}), of the {spare} the replacement "
                 "budget allows")
    elif handling == LEFT_OUT:
        why = (f"more than the {spare} the replacement budget (contended_replacements) allows"
               if len(contended) > spare else "the rounds that replaced them fell short of the plan")
        aside = f"; {len(contended)} contended round(s) ({named}) left out, not all replaced: {why}"
    elif contended:
        why = (f"more than the {spare} the replacement budget (contended_replacements) allows"
               if len(contended) > spare else "the quiet rounds fell short of the plan")
        aside = f"; {len(contended)} contended round(s) ({named}) judged as measured: {why}"
    else:
        aside = ""
    if rounds is None or len(rounds) < first_n:
        return "budget spent: the runs could not be paired, so the first rounds could not plan fewer" + aside
    total, reason = verdict.rounds_planned(rounds[:first_n], target_gap, most)
    reason += aside
    if len(rounds) < total:
        return f"{reason} ({len(rounds)} of them ran)"
    if len(rounds) > total:
        extra = ", ".join(f"round {total + i} at {a / b:.1%}" for i, (a, b) in enumerate(rounds[total:], start=1))
        return (f"{reason}; {len(rounds) - total} more ran, as another pair of the variant needed ({extra}): "
                f"reported, not in this pair's verdict")
    return reason


def paired_rounds(runs: pd.DataFrame, a: str, b: str, replaced: int = 0) -> Tuple[Optional[List[Tuple[float, float]]],
                                                                                str]:
    """The (a, b) samples/s of each round, in time order, when launchers ``a`` and ``b`` ran in
    rounds: one measured run of each per round (``repeat``), the two back to back, rounds not
    overlapping. Else (None, why not): then only the unpaired rule applies.

    ``runs``: one variant's runs, failed ones included (a failed run leaves its round without a
    partner, and a drift could then pass for a launcher effect in the others).
    """
    legs = runs[runs["launcher"].isin([a, b])]
    if legs.empty:
        return None, f"no runs of {a} or {b}"
    if "started_at" not in legs or "ended_at" not in legs or "repeat" not in legs \
            or legs[["started_at", "ended_at", "repeat"]].isna().any().any():
        return None, "no start times to pair the runs by"
    measured = (legs["status"] == "ok") & legs["samples_per_sec"].notna()
    if not measured.all():
        failed = legs[~measured].iloc[0]
        return None, f"a run failed ({failed['launcher']} r{failed['repeat']}), so its round has no pair"
    per_round = legs.groupby("repeat")["launcher"].agg(list)
    if any(sorted(members) != sorted([a, b]) for members in per_round):
        return None, f"a round without exactly one run of each of {a} and {b}"
    timed = legs.sort_values("started_at")
    rounds_in_time = list(timed["repeat"])
    if rounds_in_time[0::2] != rounds_in_time[1::2]:
        return None, "the two runs of a round were not back to back"
    # a first-run launcher must alternate (ABBA), or a drift adds to its side in every round
    a_first = sum(launcher == a for launcher in list(timed["launcher"])[0::2])
    # ``replaced``: contended rounds left out (``quiet_rounds``), each of which may tip the balance by one
    if not len(per_round) // 2 - replaced <= a_first <= (len(per_round) + 1) // 2 + replaced:
        return None, f"not counterbalanced: {a} ran first in {a_first} of {len(per_round)} rounds"
    starts, ends = list(timed["started_at"]), list(timed["ended_at"])
    if any(start < max(ends[:i]) for i, start in enumerate(starts) if i):
        return None, "runs overlapped in time"
    speed = {(row.launcher, row.repeat): float(row.samples_per_sec) for row in timed.itertuples()}
    return [(speed[a, r], speed[b, r]) for r in rounds_in_time[0::2]], ""


def contended_rounds(runs: pd.DataFrame, a: str, b: str) -> List[int]:
    """The rounds (``repeat``) in which a run of ``a`` or ``b`` was contended: other work on its
    hosts (``results.contention``). None when a measured run of either could not tell."""
    if "contended" not in runs:
        return []
    legs = runs[runs["launcher"].isin([a, b]) & (runs["status"] == "ok")]
    if legs["contended"].isna().any():  # a leg that could not tell (a pod): excluding only the other's rounds
        return []  # would bias the pair, so neither leg's are
    return sorted(set(legs.loc[contention.flags(legs["contended"]), "repeat"].astype(int)))


def stop_plan(budget: tuple) -> Tuple[int, int, float, int]:
    """(first-stage rounds, most rounds, target gap, contended rounds that may be replaced beyond
    them): ``variants.stop_budget``'s, or a budget of three without replacements."""
    first_n, most, target_gap = budget[:3]
    return int(first_n), int(most), float(target_gap), int(budget[3]) if len(budget) > 3 else 0


def rounds_to_run(runs: pd.DataFrame, a: str, b: str, budget: tuple) -> Tuple[int, str, List[int]]:
    """(how many rounds the pair ``a``, ``b`` needs in all, why, its contended rounds) from the
    rounds of ``runs`` that ended: the stop rule (``stop_rule``) and the verdict
    (``contended_handling``) both read it, so that they never disagree on which rounds count.

    The first stage is the first ``repeats`` quiet rounds (a contended round of it is replaced
    too); their spread plans how many quiet rounds to run (``verdict.rounds_planned``, at most
    ``max_repeats``), and each contended round is replaced by one more, from the replacement budget
    (the 4th of ``budget``), not the plan's. Past that budget no more rounds run in their place; the
    verdict still leaves them out where the quiet rounds that ran are the first stage's at least
    (``contended_handling``)."""
    first_n, most, target_gap, spare = stop_plan(budget)
    runs = runs[runs["launcher"].isin([a, b]) & runs["status"].isin(["ok", "failed"])]  # the runs that ended
    contended = contended_rounds(runs, a, b)
    named = ", ".join(map(str, contended))
    replaced = min(len(contended), spare)
    over = (f"{len(contended)} contended round(s) ({named}), more than the {spare} the replacement budget "
            "(contended_replacements) allows: no more rounds in their place" if len(contended) > spare else "")
    quiet, _ = paired_rounds(_first_rounds(runs, contended, first_n), a, b, len(contended))
    if quiet is None or len(quiet) < first_n or first_n < MIN_REPEATS:
        why = over or ((f"{len(contended)} contended round(s) ({named}) to replace, " if contended else "") +
                       "the first stage's quiet rounds not all ended or paired")
        return most + replaced, f"budget spent: {why}", contended
    total, reason = verdict.rounds_planned(quiet[:first_n], target_gap, most)
    if over:
        reason += f"; {over}"
    elif contended:
        reason += f"; {len(contended)} contended round(s) replaced ({named}): {total + replaced} rounds in all"
    return total + replaced, reason, contended


def _first_rounds(runs: pd.DataFrame, contended: List[int], first_n: int) -> pd.DataFrame:
    """The runs of the first ``first_n`` rounds but ``contended`` ones: the first stage, whatever
    later rounds did (a failed one leaves only its own round unpaired)."""
    quiet = sorted(set(runs["repeat"].astype(int)) - set(contended))[:first_n]
    return runs[runs["repeat"].isin(quiet)]


REPLACED, LEFT_OUT, AS_MEASURED = "replaced", "left out", "judged as measured"


def contended_handling(runs: pd.DataFrame, a: str, b: str, contended: List[int],
                       budget: Optional[tuple]) -> Optional[str]:
    """What the verdict of ``a`` and ``b`` does with their ``contended`` rounds: ``REPLACED``, left
    out and the quiet rounds that ran reach what the first ``repeats`` quiet ones planned
    (``rounds_to_run``); ``LEFT_OUT``, the replacement budget ran out first, but the quiet rounds are
    the first stage's at least, so the verdict rests on them (fewer, and wider for it, never a busy
    round); ``AS_MEASURED``, too few quiet rounds for that, or no budget: the rounds as measured,
    and what the verdict would be without them (``contended_note``). None without contended rounds."""
    if not contended:
        return None
    if budget is None:
        return AS_MEASURED
    first_n, _, _, spare = stop_plan(budget)
    quiet, _ = paired_rounds(without_rounds(runs, contended), a, b, len(contended))
    if quiet is None or first_n < MIN_REPEATS or len(quiet) < max(first_n, rounds_needed()):
        return AS_MEASURED
    total, _, _ = rounds_to_run(runs, a, b, budget)
    return REPLACED if len(quiet) >= total - min(len(contended), spare) else LEFT_OUT


def without_rounds(runs: pd.DataFrame, rounds: List[int]) -> pd.DataFrame:
    return runs[~runs["repeat"].isin(rounds)] if rounds else runs


def contended_text(contended: List[int], handling: Optional[str]) -> str:
    """The answer row's tag text: 'rounds 2-4, replaced', 'rounds 1-4, 8, left out' or 'round 3,
    judged as measured' (``contended_handling``)."""
    spans: List[str] = []
    start = contended[0]
    for i, previous in enumerate(contended):
        if i + 1 == len(contended) or contended[i + 1] != previous + 1:
            spans.append(str(start) if start == previous else f"{start}-{previous}")
            start = contended[i + 1] if i + 1 < len(contended) else previous
    rounds = f"round{'s' if len(contended) > 1 else ''} {', '.join(spans)}"
    return f"{rounds}, {handling or AS_MEASURED}"


def contended_note(runs: pd.DataFrame, a: str, b: str, rounds: Optional[List[Tuple[float, float]]],
                   contended: List[int], target_gap: Optional[float] = None) -> str:
    """What contended rounds did to a pair judged with them in (no budget left to re-measure them):
    the verdict without them, so that they never decide silently."""
    quiet, _ = paired_rounds(without_rounds(runs, contended), a, b, len(contended))
    head = (f"{len(contended)} of {len(rounds) if rounds else '?'} rounds contended (other work on their hosts: "
            f"round{'s' if len(contended) > 1 else ''} {', '.join(map(str, contended))}), judged as measured")
    if quiet is None or len(quiet) < rounds_needed():
        return f"{head}; without them too few rounds to judge"
    alone = verdict.compare_paired(quiet, a, b, target_gap=target_gap)
    if alone.ci_low is None or alone.ci_high is None:
        return f"{head}; without them {alone.ratio:.1%}"
    return f"{head}; without them {alone.ratio:.1%}, CI [{alone.ci_low:.1%}, {alone.ci_high:.1%}], {alone.outcome}"


def leg_order(runs: pd.DataFrame, a: str, b: str) -> str:
    """How the repeats of launchers ``a`` and ``b`` followed each other in time. Interleaved legs
    (a r1, b r1, a r2, ...) spread a drift over both, and counterbalanced ones (a r1, b r1, b r2,
    a r2, ...) cancel a linear drift; all of one, then all of the other, does not."""
    if "started_at" not in runs or "ended_at" not in runs:
        return "unknown (no start times)"
    legs = runs[runs["launcher"].isin([a, b])].dropna(subset=["started_at", "ended_at"]).sort_values("started_at")
    if legs.empty:
        return "unknown (no start times)"
    latest_end = {}
    for launcher, start, end in zip(legs["launcher"], legs["started_at"], legs["ended_at"]):
        if any(start < other_end for other, other_end in latest_end.items() if other != launcher):
            return "overlapping: the two launchers ran at the same time and may have slowed each other"
        latest_end[launcher] = max(end, latest_end.get(launcher, end))
    order = list(legs["launcher"])
    sequence = (", ".join(f"{launcher} r{r}" for launcher, r in zip(order[:6], legs["repeat"][:6]))
                + (", …" if len(order) > 6 else ""))
    switches = sum(x != y for x, y in zip(order, order[1:]))
    if switches == len(order) - 1 and switches:
        return f"interleaved ({sequence})"
    rounds_in_time = list(legs["repeat"])
    in_rounds = (len(order) % 2 == 0 and rounds_in_time[0::2] == rounds_in_time[1::2]
                 and all(x != y for x, y in zip(order[0::2], order[1::2])))
    if in_rounds:
        a_first = order[0::2].count(a)
        balanced = abs(2 * a_first - len(order) // 2) <= 1
        return f"interleaved{', counterbalanced' if balanced else ''} ({sequence})"
    if switches == 1 and min(order.count(a), order.count(b)) > 1:
        return f"blocked: all {order[0]} first, then all {order[-1]}; a drift could pass for a launcher effect"
    return f"mixed ({sequence})"


GAP_COLUMNS = {"variant": "string", "part": "string", "launcher": "string", "reference": "string",
               "ratio": "float64", "ci_low": "float64", "ci_high": "float64", "level": "float64",
               "p_value": "float64", "alpha": "float64", "n": "Int64", "n_reference": "Int64",
               "min_detectable": "float64", "outcome": "string", "verdict": "string"}


def kubernetes_gap(runs: pd.DataFrame) -> pd.DataFrame:
    """The seed's open question, answered per variant that also ran with ``hostNetwork: true``: how
    much of the k8s/ssh gap is the container (k8s on the host network vs ssh) and how much the pod
    network (k8s on the pod network vs k8s on the host network), each with its verdict."""
    if runs.empty:
        return pd.DataFrame(columns=list(GAP_COLUMNS)).astype(GAP_COLUMNS)
    ok = runs[(runs["status"] == "ok") & runs["samples_per_sec"].notna()]

    def speeds(variant, launcher):
        return ok.loc[(ok["variant"] == variant) & (ok["launcher"] == launcher), "samples_per_sec"]

    rows = []
    for twin in dict.fromkeys(ok.loc[ok["variant"].str.endswith(HOST_NETWORK_SUFFIX), "variant"]):
        base = twin[:-len(HOST_NETWORK_SUFFIX)]
        ssh, pod_net, host_net = speeds(base, "ssh"), speeds(base, "kubernetes"), speeds(twin, "kubernetes")
        parts = [("whole gap", pod_net, ssh, "kubernetes", "ssh"),
                 ("container", host_net, ssh, "kubernetes (hostNetwork)", "ssh"),
                 ("network", pod_net, host_net, "kubernetes (pod network)", "kubernetes (hostNetwork)")]
        for part, a, b, name, reference in parts:
            if a.empty or b.empty:
                continue
            rows.append({"variant": base, "part": part, "launcher": name, "reference": reference,
                         **verdict.compare(a, b, name, reference).to_dict()})
    return pd.DataFrame(rows, columns=list(GAP_COLUMNS)).astype(GAP_COLUMNS)


def compare_speeds(a: pd.Series, b: pd.Series, name="a", reference="b", target_gap: Optional[float] = None) -> dict:
    """``a`` against ``b`` (lists of per-repeat samples/s): ratio, interval, p, verdict; equivalence
    judged against the band 100% ± ``target_gap`` (none: a line not called reads "can't tell")."""
    return verdict.compare(a, b, name, reference, target_gap=target_gap).to_dict()
