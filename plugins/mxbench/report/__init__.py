"""The report of one DAG run: Markdown, a self-contained HTML page, CSV tables and PNG plots.

Reads only ``tables/*.csv``, ``request.json``, ``data.json`` and the runs'
``metrics.json``, so ``mxbench report`` can rebuild it from the files alone.

``build_report`` is here; the parts it puts together live in ``tables`` (tables for people),
``notes`` (what a reader must know besides the numbers), ``plots`` (the PNGs) and ``pages`` (the
HTML pages, the UI's history page too). Their public names are exported here too. Every file is
written whole (``run_folder.write_atomically``): the UI serves them while a report task may be
rebuilding them.
"""
import html
from pathlib import Path
from typing import Dict, Optional

import pandas as pd

from mxbench.report.answer import answer_rows, answer_table, forest_svg
from mxbench.report.builds_view import BUILDS_VIEW, builds_table, builds_view, manifest_or_none
from mxbench.report.links import Links, backfill_history_href, run_evidence
from mxbench.report.notes import (
    conditions,
    data_line,
    environment,
    measured_build,
    measured_night,
    pair_tags,
    provenance,
    report_title,
    retried_notes,
)
from mxbench.report.pages import answer_block, history_page, named_steps, render_page, since_last_block, table_html
from mxbench.report.plots import (
    has_curve,
    plot_accuracy,
    plot_epoch_time,
    plot_history,
    plot_ratios,
    plot_run_order,
    plot_scaling,
    plot_scaling_fit,
)
from mxbench.report.scaling_tables import scaling_sections
from mxbench.report.tables import (
    SINCE_LAST,
    STEP_FINDER,
    aa_lines,
    aa_table,
    convergence_lines,
    convergence_table,
    display_table,
    fmt,
    gap_table,
    markdown_body,
    markdown_table,
    markdown_text,
    mxnet_notices,
    ratio_table,
    since_last_table,
    step_table,
    variant_notes,
    verdict_lines,
    with_build,
)
from mxbench.results.contention import flags
from mxbench.run_folder import DagRunFolder, load_table, read_json, write_atomically
from mxbench.stats.floors import rounds_needed

REFERENCE = "Reference: the seed study's setups and figures are in docs/seed-study.md in the mxbench repository."
# each plot's text equivalent is a table of the report: Results, or "Every run in the order it ran"
PLOTS = {"scaling.png": "Throughput vs devices (numbers: the Results table)",
         "epoch_time.png": "Seconds per epoch (numbers: the Results table)",
         "accuracy.png": "Validation accuracy per epoch",
         "run_order.png": "Every run's speed in the order it ran (numbers: the table of that name)",
         "scaling_fit.png": "Scaling model: efficiency measured, fitted and PROJECTED (numbers: the scaling model's "
                            "tables)"}
FOREST = "forest.svg"  # the answer's picture; its text equivalent is the answer's table
NO_RATIO = "Only one launcher ran: there is no launcher ratio to show."
METHOD = ("Steady state: samples/s (Speedometer) sums the workers' own Speedometer readings after the first "
          "epoch; s/epoch is the slowest worker's, first epoch excluded (a 1-epoch run cannot leave out its "
          "warm-up, and says so). The second throughput, images/epoch ÷ s/epoch, includes epoch boundaries; the two "
          "are flagged under Notes on variants when more than 10% apart. Speedup and scaling efficiency use the "
          "Speedometer figure. "
          "Brackets: min–max over repeats. Launcher ratio, unpaired: ratio of medians with a bootstrap confidence "
          "interval over repeats; p from a two-sided permutation test on the log speeds. Paired, when the two "
          "launchers ran in rounds (one run of each, back to back, order counterbalanced; at least "
          f"{rounds_needed()} rounds, none failed): the geometric mean of the per-round ratios, a t interval on the "
          "mean per-round log ratio and p from a paired t test, so a drift of the machine drops out; when the "
          "per-round log ratios fail a normality check (Shapiro–Wilk p < 0.05, e.g. one slow run), p from an exact "
          "sign-flip test instead, and the analysis says so. "
          "With a budget of rounds (two-stage): each pair's first rounds' spread chose how many rounds it needs, and "
          "the interval and the t test use that spread and its degrees of freedom (Stein), so choosing calls no "
          "more false differences; a round run only because another pair of the variant needed it is reported "
          "with the pair, not judged in it. "
          "Either way a difference is called only when p < α and the interval excludes 100%; the detectable gap "
          "is what this rule calls with 80% power at this n and spread (simulated; two-stage: from the t quantiles). "
          "The report's verdict lines are one family: each p is adjusted over all of them (Holm), and a line is "
          "called only when its adjusted p < α, so identical launchers give a false line in at most α of reports. "
          "A/A calibration: each launcher also runs as a second arm (local-b, ...) in the same rounds; the arms are "
          "identical, so a difference called between them is a false call, and a line through both arms' log "
          "speeds in time order gives the drift per run and, around it, the spread of one run (CV). Later reports "
          "on the same hardware show the latest such noise beside each launcher ratio.")


def build_report(folder: DagRunFolder) -> Dict[str, str]:
    """The report, answer first: the forest plot of the launcher ratios with a short verdict per
    line (or, with one launcher, the throughput), then one box of the conditions that bear on the
    numbers, then the long verdicts, the tables and the plots; the run's ids close it."""
    out = folder.report
    out.mkdir(exist_ok=True)
    runs, summary = load_table(folder.table("runs")), load_table(folder.table("summary"))
    ratios, epochs = load_table(folder.table("ratios")), load_table(folder.table("epochs"))
    gap = load_table(folder.table("k8s_gap"))
    if summary.empty:
        summary = pd.DataFrame(columns=["variant", "launcher", "devices", "samples_per_sec", "sec_per_epoch"])
    data, request = read_json(folder.data, {}) or {}, read_json(folder.request, {}) or {}
    plots = draw_plots(out, summary, epochs, runs, synthetic=bool(data.get("synthetic")))

    table = display_table(summary) if "setup" in summary else pd.DataFrame()
    # a round skipped as settled is no failure (stop_rule)
    failed = (runs.loc[~runs["status"].isin(["ok", "skipped"]), ["key", "status", "cause"]] if not runs.empty
              else pd.DataFrame())
    if not failed.empty:  # each failed run's evidence, a click away
        failed = failed.assign(evidence=[run_evidence(request, key, tried) for key, tried in zip(
            failed["key"], runs.loc[failed.index, "try_number"] if "try_number" in runs else [None] * len(failed))])
    env = environment(folder, runs)
    rows = answer_rows(ratios, lambda pair: pair_tags(request, data, pair)) if not ratios.empty else []
    target_gap = float((request.get("params") or {}).get("target_gap") or 0)
    forest = forest_svg(rows, target_gap) if rows else ""
    if forest:
        write_atomically(out / FOREST, lambda tmp: tmp.write_text(forest, encoding="utf-8"))
    else:
        (out / FOREST).unlink(missing_ok=True)
    answer = answer_table(rows) if rows else headline_table(table)
    sections = [("Verdicts", verdict_lines(ratios))] if rows else []
    sections.append(("Results", table))
    conv = load_table(folder.table("convergence"))
    if not conv.empty:  # the preset has a target accuracy: throughput is judged by time to it too
        sections += [("Time to accuracy", convergence_lines(conv)),
                     ("Time to accuracy: seconds of training to the target", convergence_table(conv))]
    sections += scaling_sections(runs, request, data, out / "scaling_fit.png", plot_scaling_fit)
    if (out / "scaling_fit.png").exists():
        plots["scaling_fit.png"] = PLOTS["scaling_fit.png"]
    notes_on_variants = variant_notes(summary, runs) if not summary.empty else pd.DataFrame()
    if not notes_on_variants.empty:
        sections.append(("Notes on variants", notes_on_variants))
    sections.append(("Failed runs", failed))
    if rows:  # else the answer said there is none
        sections.append(("Launcher speed ratio", ratio_table(ratios)))
    noise = load_table(folder.table("aa_noise"))
    if not noise.empty:
        sections.insert(1 if rows else 0, ("A/A calibration: each launcher against itself", aa_lines(noise)))
        sections.append(("A/A calibration: the noise floor", aa_table(noise)))
    if not gap.empty:
        sections.append(("Where the Kubernetes/ssh gap comes from (container: k8s on the host network vs ssh; "
                         "network: pod network vs host network)", gap_table(gap)))
    if "p2p_pairs" in runs and runs["p2p_pairs"].notna().any():
        p2p = runs.dropna(subset=["p2p_pairs"]).drop_duplicates("variant")[["variant", "launcher", "p2p_pairs"]]
        sections.append(("GPU peer-to-peer (MXNet's notice: enabled pairs / all pairs)", p2p))
    sections += history_sections(folder, out, plots)
    order = run_order_table(runs, request)
    if not order.empty:
        sections.append(("Every run in the order it ran", order))
    notices = mxnet_notices(folder, runs)
    if not notices.empty:
        sections.append(("MXNet notices (C++ warnings from the role logs)", notices))
    if env:
        sections.append(("Environment", pd.DataFrame([env])))
    conds = conditions(folder)
    title = report_title(folder, runs)
    details = [f"DAG: {request.get('dag_id') or '?'}", f"DAG run: {request.get('run_id') or '?'}",
               f"Folder: {folder.path}", data_line(data)]

    measured = measured_line(folder, request, runs)
    backfill = backfill_builds(folder, runs)
    # every string in report.md that is not ours alone goes through markdown_text (markdown_body escapes its own)
    md = [f"# {markdown_text(title)}\n", f"{markdown_text(measured)}\n"]
    if backfill is not None:
        md.append(f"## {BACKFILL_BUILDS}\n\n{markdown_body(backfill)}")
    md.append("## Answer\n")
    if forest:
        md.append(f"![Launcher speed ratios with their 95% intervals]({FOREST})\n")
    md.append(markdown_body(answer) if not answer.empty or rows else "")
    if not rows:
        md.append(NO_RATIO + "\n")
    since = since_last(folder, request)
    if since is not None:
        md.append(f"## {SINCE_LAST}\n\n{markdown_body(since)}")
    if conds:
        md.append("## Conditions\n\n" + markdown_body([c.short for c in conds]))
    md.append(markdown_body(data_line(data)))
    for name, frame in sections:
        md.append(f"## {markdown_text(name)}\n\n{markdown_body(frame)}")
    md.append("## Plots\n\n" + "\n".join(f"![{t}]({f})" for f, t in plots.items()) + "\n")
    if conds:
        md.append("## Conditions in full\n\n" + markdown_body([c.detail for c in conds]))
    md.append(METHOD + "\n")
    md.append(REFERENCE + "\n")
    md.append("## Run details\n\n" + markdown_body(details))
    write_atomically(folder.report_markdown, lambda tmp: tmp.write_text("\n".join(md), encoding="utf-8"))
    images = [(caption, (out / file).read_bytes()) for file, caption in plots.items()]
    lead = f"<p class='measured'>{html.escape(measured)}</p>"
    if backfill is not None:  # a backfill's report answers which build changed the speed, first
        lead += (f"<section id='backfill-builds'><h2>{html.escape(BACKFILL_BUILDS)}</h2>{table_html(backfill)}"
                 f"{backfill_history_link(request)}</section>")
    lead += answer_block(answer, forest, "" if rows else NO_RATIO)
    if since is not None:
        lead += since_last_block(since, SINCE_LAST)
    page = render_page(title, [], sections, images, intro=[data_line(data)], footer=[METHOD, REFERENCE],
                       lead=lead, conditions=conds, details=details)
    write_atomically(folder.report_html, lambda tmp: tmp.write_text(page, encoding="utf-8"))
    write_atomically(out / "summary.csv", lambda tmp: table.to_csv(tmp, index=False))
    return {"markdown": str(folder.report_markdown), "html": str(folder.report_html), "text": markdown_table(table)}


def since_last(folder: DagRunFolder, request: dict):
    """The "Since last time" section (``tables/since_last.csv``, which the report task wrote from the
    results store: ``stages.since_last``): a table, a sentence, or None for a folder without one."""
    if not folder.table("since_last").is_file():
        return None
    table = load_table(folder.table("since_last"))
    if table.empty:
        return "No series measured: nothing to compare with an earlier DAG run."
    return since_last_table(table, request.get("dag_id"))


def draw_plots(out: Path, summary: pd.DataFrame, epochs: pd.DataFrame, runs: pd.DataFrame,
               synthetic: bool) -> Dict[str, str]:
    """The plots that carry information, {file: caption}; a plot that would say nothing (one point,
    one bar, accuracy of synthetic data) is not drawn, and its file from an earlier build goes."""
    drawn = {}
    ok_runs = runs[runs["status"] == "ok"] if "status" in runs else runs
    wanted = {
        "scaling.png": (has_curve(summary), lambda path: plot_scaling(summary, path)),
        "epoch_time.png": (summary["sec_per_epoch"].notna().sum() > 1, lambda path: plot_epoch_time(summary, path)),
        "accuracy.png": (not synthetic and "validation_accuracy" in epochs and epochs["validation_accuracy"].notna()
                         .any() and epochs["epoch"].nunique() > 1, lambda path: plot_accuracy(epochs, path)),
        "run_order.png": ("samples_per_sec" in ok_runs and ok_runs["samples_per_sec"].notna().sum() > 1,
                          lambda path: plot_run_order(runs, path)),
    }
    for file, (informative, draw) in wanted.items():
        if informative:
            draw(out / file)
            drawn[file] = PLOTS[file]
        else:
            (out / file).unlink(missing_ok=True)
    (out / "ratios.png").unlink(missing_ok=True)  # from builds before the forest plot
    return drawn


def headline_table(table: pd.DataFrame) -> pd.DataFrame:
    """With one launcher, the answer is the throughput: each variant's speed and scaling."""
    wanted = ["variant", "launcher", "devices (GPUs or CPU workers)", "samples/s (Speedometer)", "s/epoch",
              "scaling eff."]
    return table[[c for c in wanted if c in table]] if not table.empty else table


def run_order_table(runs: pd.DataFrame, request: Optional[dict] = None) -> pd.DataFrame:
    """The run-order plot's text equivalent: each run, when it started and its speed; a failed or
    contended run's evidence (``links.run_evidence``: its try's task log, record and logs)."""
    if runs.empty or "started_at" not in runs:
        return pd.DataFrame()
    ordered = runs.assign(started=pd.to_numeric(runs["started_at"], errors="coerce")).sort_values("started")
    contended = flags(ordered["contended"]) if "contended" in ordered else pd.Series(False, index=ordered.index)
    suspect = contended | ~ordered["status"].isin(["ok", "skipped"])
    tries = ordered["try_number"] if "try_number" in ordered else pd.Series(None, index=ordered.index)
    return pd.DataFrame({
        "run": ordered["key"], "launcher": ordered["launcher"], "status": ordered["status"],
        "started (UTC)": pd.to_datetime(ordered["started"], unit="s", utc=True).dt.strftime("%H:%M:%S"),
        "samples/s": ordered["samples_per_sec"].map(fmt),
        **({"contended": ordered["contention"].astype(object).fillna("").where(contended, "")}
           if "contended" in ordered else {}),
        **({"evidence": [run_evidence(request or {}, key, tried) if flagged else ""
                         for key, tried, flagged in zip(ordered["key"], tries, suspect)]} if suspect.any() else {})})


def history_sections(folder: DagRunFolder, out: Path, plots: Dict[str, str]) -> list:
    """The regression check and the history, where the regression DAG left them; a bisect's probe path."""
    sections = []
    findings = load_table(folder.table("regression"))
    if not findings.empty:
        sections.append(("Regression check (against the last DAG runs on this hardware)",
                         findings[["variant", "launcher", "status", "message"]]))
        sections.append(("False alerts to expect", false_alert_line(folder, findings)))
    bisected = read_json(folder.bisect)
    if bisected:  # mxbench_bisect's DAG runs: the probe path so far
        sections.append((f"Probe path: {bisected['title']}", bisected["path"]))
    history = load_table(folder.table("history"))
    if not history.empty:
        history = with_build(history)
        names = folder_machine_names(folder)
        plot_history(history, out / "history.png", names=names)
        plots["history.png"] = "Throughput history by MXNet build"
        sections.append((BUILDS_VIEW, builds_table(builds_view(history, manifest_or_none(), names))))
        sections.append((STEP_FINDER, named_steps(step_table(history), names)))
    return sections


BACKFILL_BUILDS = f"{BUILDS_VIEW}, over this backfill's DAG runs so far"


def backfill_history_link(request: dict) -> str:
    """A backfill report's link to the history page filtered to its backfill; "" where the request
    does not name its DAG run."""
    dag_id, run_id = request.get("dag_id"), request.get("run_id")
    if not dag_id or not run_id:
        return ""
    href = html.escape(backfill_history_href(str(dag_id), str(run_id)), quote=True)
    return f"<p><a href='{href}'>This backfill's DAG runs on the history page</a></p>"


def measured_line(folder: DagRunFolder, request: dict, runs: pd.DataFrame) -> str:
    """What this DAG run measured, in one line above its answer: the night, the build, the variants."""
    variants = ", ".join(dict.fromkeys(run["variant"]["id"] for run in request.get("runs", []) if "variant" in run))
    launchers = ", ".join(dict.fromkeys(str(run.get("launcher")) for run in request.get("runs", [])))
    parts = [measured_night(folder), measured_build(request, runs),
             f"variants {variants}" + (f" on {launchers}" if launchers else "") if variants else ""]
    return "Measured: " + ("; ".join(p for p in parts if p) or "no runs")


def folder_machine_names(folder: DagRunFolder) -> Dict[str, str]:
    """Fingerprint -> machine name of the machines this DAG run's runs measured on."""
    from mxbench.store import fingerprint

    names = {}
    for key in load_table(folder.table("runs")).get("key", []):
        env = (read_json(folder.run(key).metrics) or {}).get("environment")
        if isinstance(env, dict):
            digest, facts = fingerprint(env)
            names[digest] = facts["host_class"]
    return names


def backfill_builds(folder: DagRunFolder, runs: pd.DataFrame) -> Optional[pd.DataFrame]:
    """For a backfill's DAG run: the builds view over the backfill DAG runs of its history
    (``tables/history.csv``, the regression check's), so the last one's report answers for the
    range; None for any other DAG run."""
    if (read_json(folder.stored, {}) or {}).get("trigger") != "backfill":
        return None
    history = load_table(folder.table("history"))
    if history.empty or "trigger" not in history:
        return None
    backfilled = with_build(history[history["trigger"] == "backfill"])
    return builds_table(builds_view(backfilled, manifest_or_none(), folder_machine_names(folder)))


def false_alert_line(folder: DagRunFolder, findings) -> str:
    """How many false alerts a month of nightly checks like this one should give, from the A/A
    noise floor of each series (``regression.regression_rule.false_alerts_per_month``), or why that is not known."""
    from mxbench.regression.regression_rule import false_alerts_per_month

    params = (read_json(folder.request) or {}).get("params") or {}
    confirm = int(params.get("confirm_rounds") or 0)
    first = int(params["repeats"]) if confirm and params.get("repeats") else None
    expected = false_alerts_per_month(findings, first=first, min_drop=float(params.get("min_drop", 0.05)),
                                      rounds=first + confirm if first else None)
    if expected is None:
        return ("Not known: no series checked here has an A/A calibration on its hardware (run the benchmark "
                "DAG with the aa-calibration preset to measure its noise).")
    noisy = findings.dropna(subset=["noise_cv"])
    return (f"At most about {expected:.2g} a month, were these {len(noisy)} series checked every day at their "
            f"A/A noise (within-run CV {noisy['noise_cv'].min():.1%}–{noisy['noise_cv'].max():.1%}), "
            + (f"with {confirm} confirmation rounds after the first {first}" if first else "without confirmation")
            + ", before the false-discovery control across series lowers it. Within-run noise: DAG runs "
              "that differ from day to day alert more often.")


__all__ = ["build_report", "history_sections", "write_atomically", "render_page", "history_page", "provenance",
           "retried_notes", "data_line", "environment", "display_table", "variant_notes", "ratio_table",
           "verdict_lines", "gap_table", "markdown_table", "markdown_body", "markdown_text", "mxnet_notices",
           "step_table",
           "STEP_FINDER", "with_build", "plot_scaling", "plot_epoch_time", "plot_accuracy", "plot_history",
           "plot_ratios", "plot_run_order", "plot_scaling_fit", "REFERENCE", "METHOD", "PLOTS", "NO_RATIO", "FOREST",
           "conditions", "Links", "run_evidence", "since_last_table", "SINCE_LAST"]
