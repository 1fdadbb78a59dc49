"""The report's tables, shaped for people: the seed-style results table, notes on variants,
launcher ratios, the Kubernetes/ssh gap, MXNet notices and the step finder; and Markdown tables."""
import math
import re
from typing import List

import pandas as pd

from mxbench.matrix.variants import SEED_REFERENCE
from mxbench.results.parse import worth_reporting
from mxbench.run_folder import DagRunFolder, read_json
from mxbench.stats.floors import ALPHA


def fmt(value, digits=1, pct=False):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if pct:
        return f"{100 * value:.{digits}f}%"
    return f"{value:,.{digits}f}"


def display_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The seed-style table, formatted for people."""
    rows = []
    for r in summary.to_dict("records"):
        seed = SEED_REFERENCE.get(r["variant"])
        rows.append({
            "setup": r["setup"], "variant": r["variant"], "launcher": r["launcher"],
            "batch size": r["batch_size"], "devices (GPUs or CPU workers)": r["devices"],
            "s/epoch": f"{fmt(r['sec_per_epoch'], 2)} [{fmt(r['sec_per_epoch_min'], 2)}–"
                       f"{fmt(r['sec_per_epoch_max'], 2)}]",
            "samples/s (Speedometer)": f"{fmt(r['samples_per_sec'])} [{fmt(r['samples_per_sec_min'])}–"
                                       f"{fmt(r['samples_per_sec_max'])}]",
            "CV (Speedometer)": fmt(r["samples_per_sec_cv"], 1, pct=True),
            "samples/s (images/epoch ÷ s/epoch)": fmt(r["epoch_samples_per_sec"]),
            "GPU util": "n/a" if pd.isna(r["gpu_util_pct"]) else f"{r['gpu_util_pct']:.0f}%",
            "GPU mem (MiB)": fmt(r["gpu_mem_mib"], 0),
            "speedup": fmt(r["speedup"], 2), "scaling eff.": fmt(r["scaling_efficiency"], 1, pct=True),
            "val. acc. (last epoch)": fmt(r["validation_accuracy"], 3),
            "runs ok/failed": f"{r['runs_ok']}/{r['runs_failed']}"
                              + (f" ({r['runs_reused']} reused)" if r.get("runs_reused") else ""),
            "seed s/epoch": f"{seed['sec_per_epoch']}" if seed else "",
        })
    table = pd.DataFrame(rows)
    if not table.empty and not table["seed s/epoch"].any():
        table = table.drop(columns="seed s/epoch")
    return table


def variant_notes(summary: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """What a reader must know about single variants: throughput disagreement, warm-up included,
    warnings of runs that kept their results."""
    rows = []
    for r in summary.to_dict("records"):
        warmup_included = r.get("warmup_excluded") is False
        if r.get("throughput_check") and not pd.isna(r["throughput_check"]):
            because = " (expected here: s/epoch includes the warm-up epoch)" if warmup_included else ""
            rows.append({"variant": r["variant"], "launcher": r["launcher"], "note": r["throughput_check"] + because})
        if warmup_included:
            rows.append({"variant": r["variant"], "launcher": r["launcher"],
                         "note": "1 epoch: its figures include warm-up (start-up, first batches; the Speedometer "
                                 "figure leaves out only each worker's first reading); no later epoch to measure "
                                 "the steady state from"})
    if not runs.empty and "warnings" in runs:
        for r in runs.dropna(subset=["warnings"]).to_dict("records"):
            rows.append({"variant": r["variant"], "launcher": r["launcher"],
                         "note": f"{r['key']} kept its results: {r['warnings']}"})
    return pd.DataFrame(rows, columns=["variant", "launcher", "note"])


def verdict_lines(ratios: pd.DataFrame) -> List[str]:
    """The report's answer, one line per variant and launcher pair (``metrics.launcher_ratios``'s
    rows): the ratio and its interval, the analysis that gave the verdict (paired over n rounds,
    or unpaired and why) and the verdict's words; then why the rounds stopped, where the table says.
    Tables from before the analysis and stopping columns read as the unpaired rule they came from.
    Last, how the family of lines was controlled (``metrics.controlled``), where the table says."""
    lines = [verdict_line(row) for row in ratios.to_dict("records")]
    families = [text(f) for f in ratios.get("family", pd.Series(dtype=object)) if text(f)]
    if families:
        lines.append(f"Family: {families[0]}: each line's p is adjusted over them all and a difference is "
                     f"called only when the adjusted p < α, so identical launchers give a false line in at most "
                     f"α of reports; each line's detectable gap is the one the family can call (at α over the "
                     f"number of lines).")
    return lines


def verdict_line(row: dict) -> str:
    line = f"{row['variant']}: {row['launcher']} at {fmt(row['ratio'], 1, pct=True)} of {row['reference']}"
    if not (pd.isna(row.get("ci_low")) or pd.isna(row.get("ci_high"))):
        level = "" if pd.isna(row.get("level")) else f"{row['level']:.0%} "
        line += f", {level}CI [{fmt(row['ci_low'], 1, pct=True)}, {fmt(row['ci_high'], 1, pct=True)}]"
    analysis = text(row.get("analysis"))
    if analysis.startswith("paired"):
        line += f", {whole(row['n'])} rounds paired"
    else:
        why = analysis.split(":", 1)[1].strip() if ":" in analysis else ""
        line += f", {whole(row['n'])} vs {whole(row['n_reference'])} repeats unpaired" + (f" ({why})" if why else "")
    said = text(row.get("verdict")) or text(row.get("outcome")) or "no verdict"
    # the verdict repeats the ratio and interval before its first ": "; the words after it are its own
    line += ": " + said.split(": ", 1)[-1]
    stopping = text(row.get("stopping"))
    noise = text(row.get("noise_floor"))  # measured: said here; not measured yet: the table says so
    return line + (f"; {stopping}" if stopping else "") + (f". {noise}." if noise.startswith("A/A noise") else "")


def whole(value) -> str:
    return "?" if pd.isna(value) else str(int(value))


def text(value) -> str:
    """A table's text cell: '' for an empty one (NaN, or a column the table lacks)."""
    return value.strip() if isinstance(value, str) else ""


def ratio_table(ratios: pd.DataFrame) -> pd.DataFrame:
    """Every launcher pair: ratio, CI, p, n, α, detectable gap, order, analysis, verdict."""
    if ratios.empty:
        return ratios
    analysis = ratios["analysis"] if "analysis" in ratios else pd.Series("unpaired", index=ratios.index)
    return pd.DataFrame({
        "variant": ratios["variant"], "launcher / reference": ratios["launcher"] + " / " + ratios["reference"],
        "ratio": ratios["ratio"].map(lambda v: fmt(v, 1, pct=True)),
        "CI": [f"{lvl:.0%}: [{fmt(lo, 1, pct=True)}, {fmt(hi, 1, pct=True)}]"
               for lvl, lo, hi in zip(ratios["level"], ratios["ci_low"], ratios["ci_high"])],
        "p": ratios["p_value"].map(lambda v: "n/a" if pd.isna(v) else ("< 0.001" if v < 0.001 else f"{v:.3f}")),
        "α": ratios["alpha"].map(lambda v: f"{v:g}"),
        "n": [f"{a} vs {b}" for a, b in zip(ratios["n"], ratios["n_reference"])],
        "detectable gap": ratios["min_detectable"].map(lambda v: "none at this n" if pd.isna(v) else f"≥ {v:.1%}"),
        "order": ratios["order"], "analysis": analysis.fillna("unpaired"), "verdict": ratios["verdict"],
        **({"noise floor (A/A)": ratios["noise_floor"].map(text)} if "noise_floor" in ratios else {}),
    })


def aa_lines(noise: pd.DataFrame) -> List[str]:
    """An A/A calibration's answer (``calibration.noise_floor``'s rows): how often identical arms
    were called different, against what α allows, and the noise floor per run."""
    from mxbench.results.calibration import false_call_p, false_calls

    called, judged = false_calls(noise)
    names = [f"{r['variant']} {r['launcher']}" for r in noise.to_dict("records")
             if not pd.isna(r["false_call"]) and bool(r["false_call"])]
    return [f"False calls: {called} of {judged} A/A comparisons called the two arms of one launcher different"
            + (f" ({', '.join(names)})" if names else "")
            + f"; the rule allows α = {ALPHA:g} each: {judged * ALPHA:.2g} expected"
            + (f", and {called} or more happen with probability {false_call_p(called, judged):.2g} if it holds."
               if called else "."),
            "Noise floor per run: " + "; ".join(
                f"{r['variant']} {r['launcher']}: CV {r['cv']:.1%}, drift {r['drift_per_run']:+.2%}/run over "
                f"{whole(r['runs'])} runs" for r in noise.to_dict("records")) + "."]


def aa_table(noise: pd.DataFrame) -> pd.DataFrame:
    """Each launcher against itself: the arms' ratio and verdict, the spread and drift per run."""
    return pd.DataFrame({
        "variant": noise["variant"], "launcher": noise["launcher"], "rounds": noise["rounds"].map(whole),
        "arm b / arm a": noise["ratio"].map(lambda v: fmt(v, 1, pct=True)),
        "CI": [f"[{fmt(lo, 1, pct=True)}, {fmt(hi, 1, pct=True)}]"
               for lo, hi in zip(noise["ci_low"], noise["ci_high"])],
        "outcome": noise["outcome"].map(text),
        "CV per run": noise["cv"].map(lambda v: "?" if pd.isna(v) else f"{v:.2%}"),
        "drift per run": noise["drift_per_run"].map(lambda v: "?" if pd.isna(v) else f"{v:+.2%}"),
        "analysis": noise["analysis"].map(text) if "analysis" in noise else "",
    })


def gap_table(gap: pd.DataFrame) -> pd.DataFrame:
    """The k8s/ssh gap by part: ratio, CI, p, n, verdict."""
    return pd.DataFrame({
        "variant": gap["variant"], "part": gap["part"], "compared": gap["launcher"] + " / " + gap["reference"],
        "ratio": gap["ratio"].map(lambda v: fmt(v, 1, pct=True)),
        "CI": [f"{lvl:.0%}: [{fmt(lo, 1, pct=True)}, {fmt(hi, 1, pct=True)}]"
               for lvl, lo, hi in zip(gap["level"], gap["ci_low"], gap["ci_high"])],
        "n": [f"{a} vs {b}" for a, b in zip(gap["n"], gap["n_reference"])],
        "verdict": gap["verdict"],
    })


# what Markdown would read as markup of the text's own, wherever it stands: a backslash (it would
# escape what follows), raw HTML or an autolink (< then a letter, /, ! or ?), an entity, and the ]
# that closes a link's, an image's or a reference definition's label
_INLINE_MARKUP = re.compile(r"\\|<(?=[A-Za-z/!?])|&(?=#?[A-Za-z0-9]+;)|\](?=[(\[:])")
# what starts a block at the start of a line: a heading, a quote, a list item, a rule, a code fence
_BLOCK_START = re.compile(r"^(?:[#>+*=_~`-]|\d{1,9}(?=[.)]))")


def markdown_text(text, cell: bool = False) -> str:
    """``text`` (host-, trigger- or our own) as report.md shows it: its own characters, never
    Markdown or HTML of its making, on one line (line breaks become spaces). ``cell``: inside a
    table row, where a | would end the cell; elsewhere the text may start a line, where # or - would
    start a heading or a list. The HTML report escapes the same strings with ``html.escape``."""
    shown = _INLINE_MARKUP.sub(lambda found: "\\" + found.group(), " ".join(str(text).splitlines()))
    if cell:
        return shown.replace("|", "\\|")
    # an ordered list's number stays as it is; its . or ) is escaped
    return _BLOCK_START.sub(lambda found: found.group() + "\\" if found.group().isdigit() else "\\" + found.group(),
                            shown.lstrip())


def markdown_table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "_none_\n"
    cells = [[markdown_text(c, cell=True) for c in frame.columns]] + [
        [markdown_text(v, cell=True) for v in row] for row in frame.itertuples(index=False)]
    lines = ["| " + " | ".join(row) + " |" for row in cells]
    lines.insert(1, "|" + "---|" * len(frame.columns))
    return "\n".join(lines) + "\n"


def markdown_body(frame) -> str:
    """A section as ``render_page`` shows it: a sentence, a list of lines, or a table, its text
    escaped (``markdown_text``)."""
    if isinstance(frame, str):
        return markdown_text(frame) + "\n"
    if isinstance(frame, list):
        return "".join(f"- {markdown_text(line)}\n" for line in frame)
    return markdown_table(frame)


def mxnet_notices(folder: DagRunFolder, runs: pd.DataFrame) -> pd.DataFrame:
    """MXNet's C++ warnings worth a reader's time, once per variant and text, from every run's
    notices.json (failed runs too)."""
    rows, seen = [], set()
    for r in runs.to_dict("records") if not runs.empty else []:
        for notice in read_json(folder.run(r["key"]).notices, []) or []:
            text = notice.split(": ", 1)[-1]
            if worth_reporting(text) and (r["variant"], text) not in seen:
                seen.add((r["variant"], text))
                rows.append({"variant": r["variant"], "run": r["key"], "notice": notice})
    return pd.DataFrame(rows, columns=["variant", "run", "notice"])


def with_build(history: pd.DataFrame) -> pd.DataFrame:
    """History rows named by the MXNet build that ran (``store.what_ran``), the version the trainer
    reported rather than the package asked for; a history.csv older than that column included."""
    from mxbench.store import what_ran

    return history.assign(build=what_ran(history))


def distinct(values: pd.Series) -> str:
    """The values a group holds, once each, in order: a table cell."""
    return ", ".join(dict.fromkeys(str(v) for v in values.dropna()))


STEP_FINDER = "Step finder: where the level changed over the whole history, and the first build after it"
STEP_COLUMNS = ["variant", "launcher", "machine", "first build after", "last build before", "DAG run", "level change",
                "p", "alert"]


def step_table(history: pd.DataFrame) -> pd.DataFrame:
    """The step finder: per variant, launcher and kind of machine (the store's environment
    fingerprint), each change point over the whole history (``change_points``) with the first build
    after it and the last before; "none" where the level never changed. ``alert``: what the
    regression rule made of that DAG run (``verdict``, where ``judge_history`` gave one)."""
    from mxbench.regression.regression_rule import dag_run_keys, dag_run_names
    from mxbench.stats.change_points import mark_change_points

    steps = []
    for (variant, launcher, machine), group in history.groupby(["variant", "launcher", "environment"], dropna=False):
        keys = dag_run_keys(group)
        marked = mark_change_points(group, keys)
        changes = marked[marked["change_point"].notna()]
        where = {"variant": variant, "launcher": launcher, "machine": machine}
        if changes.empty:
            steps.append({**where, "first build after": "none", "last build before": "",
                          "DAG run": f"no level change over {len(marked)} DAG run(s)"})
            continue
        verdicts = group.drop_duplicates(keys).set_index(keys)["verdict"] if "verdict" in group.columns else None
        for row, name in zip(changes.to_dict("records"), dag_run_names(changes)):
            key = tuple(row[k] for k in keys)
            steps.append({**where, "first build after": row["build"], "last build before": row["previous_build"],
                          "DAG run": name, "level change": f"{row['change_point']:+.1%}",
                          "p": f"{row['change_p']:.2g}",
                          "alert": "" if verdicts is None else text(verdicts.get(key if len(keys) > 1 else key[0]))})
    return pd.DataFrame(steps, columns=STEP_COLUMNS).astype(object).fillna("")


def convergence_lines(conv: pd.DataFrame) -> List[str]:
    """The time-to-accuracy flags (``convergence.summarise``): variants faster than their reference
    but later to the target; else one line saying none was."""
    flags = [text(flag) for flag in conv["flag"]] if "flag" in conv else []
    flags = [flag for flag in flags if flag]
    if flags:
        return flags
    target = fmt(conv["target_accuracy"].iloc[0], 0, pct=True) if not conv.empty else "the target"
    return [f"No variant is faster than its reference yet later to {target} validation top-1."]


def convergence_table(conv: pd.DataFrame) -> pd.DataFrame:
    """Per variant: samples/s beside the seconds to the target (median over repeats, min–max over
    the repeats that reached it) and how many of its runs reached it."""
    rows = []
    for r in conv.to_dict("records"):
        never = pd.isna(r["time_to_target_s"])
        rows.append({
            "variant": r["variant"], "launcher": r["launcher"], "batch size": r["batch_size"],
            "samples/s": fmt(r["samples_per_sec"]),
            "target (val. top-1)": fmt(r["target_accuracy"], 0, pct=True),
            "s to target": ("not reached" if never else
                            f"{fmt(r['time_to_target_s'])} [{fmt(r['time_to_target_min'])}–"
                            f"{fmt(r['time_to_target_max'])}]"),
            "runs reaching it": f"{whole(r['reached'])}/{whole(r['runs'])}",
            "reference": r["reference"],
        })
    return pd.DataFrame(rows)


SINCE_LAST = "Since last time"


def change_text(change, low, high, outcome=None) -> str:
    """A change of speed with its 95% interval: "-3.2% [-5.0%, -1.1%], slower"."""
    if pd.isna(change):
        return "n/a"
    said = f"{change:+.1%}"
    said += f" [{low:+.1%}, {high:+.1%}]" if pd.notna(low) and pd.notna(high) else " (too few repeats for an interval)"
    return said + (f", {outcome}" if text(outcome) else "")


def builds_said(build, previous) -> str:
    """"; build changed: 1.8.0 → 1.9.0" or "; same build 1.9.0" (nothing where either is not known)."""
    build, previous = text(build), text(previous)
    if not build or not previous:
        return ""
    return f"; same build {build}" if build == previous else f"; build changed: {previous} → {build}"


def since_last_table(since: pd.DataFrame, dag_id=None) -> pd.DataFrame:
    """``tables/since_last.csv`` for people: per series this DAG run's speed, the previous DAG run of
    the same setup and the change since (its interval, the launcher verdict's outcome), and, where
    the regression check ran, the change against its baseline; each DAG run a link to its report."""
    from mxbench.report.links import Links, report_href

    def run_link(dag, run, label=None) -> Links:
        plain = f"{dag}: {run}" if dag and dag != dag_id else str(run)
        return Links(label or plain, [(label or plain, report_href(dag, run))])

    rows = []
    for row in since.to_dict("records"):
        shown = {"series": f"{row['variant']} ({row['launcher']}) on {row['machine_class']}",
                 "samples/s (median)": f"{fmt(row['samples_per_sec'])} ({whole(row['n'])} repeats)"}
        if isinstance(row.get("previous_run_id"), str):
            shown["previous DAG run"] = run_link(row["previous_dag_id"], row["previous_run_id"])
            shown["change since [95% CI]"] = (change_text(row["change"], row["ci_low"], row["ci_high"], row["outcome"])
                                              + builds_said(row.get("build"), row.get("previous_build"))
                                              + (f"; {row['note']}" if text(row.get("note")) else ""))
        else:
            shown["previous DAG run"] = text(row.get("note")) or "n/a"
            shown["change since [95% CI]"] = "n/a"
        if "baseline_status" in since and since["baseline_status"].notna().any():
            if text(row.get("baseline_status")):
                said = change_text(row["baseline_change"], row["baseline_ci_low"], row["baseline_ci_high"],
                                   row["baseline_status"])
                runs = f"{whole(row['baseline_runs'])} DAG runs"
                if isinstance(row.get("baseline_run_id"), str):
                    link = run_link(row["baseline_dag_id"], row["baseline_run_id"])
                    shown["against the regression baseline"] = Links(
                        f"{said} ({runs}; newest {link.plain})",
                        [(f"{said} ({runs}; newest: report)", link.anchors[0][1])])
                else:
                    shown["against the regression baseline"] = f"{said} ({runs})"
            else:
                shown["against the regression baseline"] = "not checked"
        rows.append(shown)
    return pd.DataFrame(rows)
