"""The report of one DAG run: Markdown, a self-contained HTML page, CSV tables and PNG plots.

Reads only ``tables/*.csv``, ``request.json``, ``data.json`` and the runs'
``metrics.json``, so ``mxbench report`` can rebuild it from the files alone.

``build_report`` is here; the parts it puts together live in ``tables`` (tables for people),
``notes`` (what a reader must know besides the numbers), ``plots`` (the PNGs) and ``pages`` (the
HTML pages, the UI's history page too). Their public names are exported here too. Every file is
written whole (``run_folder.write_atomically``): the UI serves them while a report task may be
rebuilding them.
"""
from pathlib import Path
from typing import Dict

import pandas as pd

from mxbench.report.notes import data_line, environment, provenance, retried_notes
from mxbench.report.pages import history_page, render_page
from mxbench.report.plots import plot_accuracy, plot_epoch_time, plot_history, plot_ratios, plot_scaling
from mxbench.report.tables import (
    STEP_FINDER,
    aa_lines,
    aa_table,
    convergence_lines,
    convergence_table,
    display_table,
    gap_table,
    markdown_body,
    markdown_table,
    mxnet_notices,
    ratio_table,
    step_table,
    variant_notes,
    verdict_lines,
    with_build,
)
from mxbench.run_folder import DagRunFolder, load_table, read_json, write_atomically
from mxbench.stats.floors import rounds_needed

REFERENCE = "Reference: the seed study's setups and figures are in docs/seed-study.md in the mxbench repository."
PLOTS = {"scaling.png": "Throughput vs devices", "epoch_time.png": "Seconds per epoch",
         "accuracy.png": "Validation accuracy per epoch", "ratios.png": "Launcher speed ratio"}
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
          "mean per-round log ratio and p from an exact sign-flip test, so a drift of the machine drops out. "
          "With a budget of rounds (two-stage): the first rounds' spread chose how many to run, and the interval "
          "and a t test use that spread and its degrees of freedom (Stein), so choosing calls no more false "
          "differences. "
          "Either way a difference is called only when p < α and the interval excludes 100%; the detectable gap "
          "is what this rule calls with 80% power at this n and spread (simulated; two-stage: from the t quantiles). "
          "A/A calibration: each launcher also runs as a second arm (local-b, ...) in the same rounds; the arms are "
          "identical, so a difference called between them is a false call, and a line through both arms' log "
          "speeds in time order gives the drift per run and, around it, the spread of one run (CV). Later reports "
          "on the same hardware show the latest such noise beside each launcher ratio.")


def build_report(dag_dir: Path) -> Dict[str, str]:
    dag_dir = Path(dag_dir)
    folder = DagRunFolder(dag_dir)
    out = folder.report
    out.mkdir(exist_ok=True)
    runs, summary = load_table(folder.table("runs")), load_table(folder.table("summary"))
    ratios, epochs = load_table(folder.table("ratios")), load_table(folder.table("epochs"))
    gap = load_table(folder.table("k8s_gap"))
    if summary.empty:
        summary = pd.DataFrame(columns=["variant", "launcher", "devices", "samples_per_sec", "sec_per_epoch"])
    plots = dict(PLOTS)
    plot_scaling(summary, out / "scaling.png")
    plot_epoch_time(summary, out / "epoch_time.png")
    plot_accuracy(epochs, out / "accuracy.png")
    if ratios.empty:
        plots.pop("ratios.png")
        (out / "ratios.png").unlink(missing_ok=True)  # from an earlier build with two launchers
    else:
        plot_ratios(ratios, out / "ratios.png")

    table = display_table(summary) if "setup" in summary else pd.DataFrame()
    # a round skipped as settled is no failure (stop_rule)
    failed = (runs.loc[~runs["status"].isin(["ok", "skipped"]), ["key", "status", "cause"]] if not runs.empty
              else pd.DataFrame())
    data = read_json(folder.data, {})
    env = environment(dag_dir, runs)
    # the answer first: one verdict per launcher pair, then the tables it comes from
    sections = [("Verdicts", verdict_lines(ratios) if not ratios.empty else NO_RATIO), ("Results", table)]
    conv = load_table(folder.table("convergence"))
    if not conv.empty:  # the preset has a target accuracy: throughput is judged by time to it too
        sections += [("Time to accuracy", convergence_lines(conv)),
                     ("Time to accuracy: seconds of training to the target", convergence_table(conv))]
    notes_on_variants = variant_notes(summary, runs) if not summary.empty else pd.DataFrame()
    if not notes_on_variants.empty:
        sections.append(("Notes on variants", notes_on_variants))
    sections.append(("Failed runs", failed))
    if not ratios.empty:  # else the verdicts said there is none
        sections.append(("Launcher speed ratio", ratio_table(ratios)))
    noise = load_table(folder.table("aa_noise"))
    if not noise.empty:
        sections.insert(1, ("A/A calibration: each launcher against itself", aa_lines(noise)))
        sections.append(("A/A calibration: the noise floor", aa_table(noise)))
    if not gap.empty:
        sections.append(("Where the Kubernetes/ssh gap comes from (container: k8s on the host network vs ssh; "
                         "network: pod network vs host network)", gap_table(gap)))
    if "p2p_pairs" in runs and runs["p2p_pairs"].notna().any():
        p2p = runs.dropna(subset=["p2p_pairs"]).drop_duplicates("variant")[["variant", "launcher", "p2p_pairs"]]
        sections.append(("GPU peer-to-peer (MXNet's notice: enabled pairs / all pairs)", p2p))
    sections += history_sections(dag_dir, out, plots)
    notices = mxnet_notices(dag_dir, runs)
    if not notices.empty:
        sections.append(("MXNet notices (C++ warnings from the role logs)", notices))
    if env:
        sections.append(("Environment", pd.DataFrame([env])))
    notes = provenance(dag_dir)
    title = f"mxbench report: {dag_dir.name}"
    md = [f"# {title}\n"]
    md += [f"> **{n}**\n" for n in notes]
    md.append(data_line(data) + "\n")
    for name, frame in sections:
        body = markdown_body(frame)
        md.append(f"## {name}\n\n{body}")
    md.append("## Plots\n\n" + "\n".join(f"![{t}]({f})" for f, t in plots.items()) + "\n")
    md.append(METHOD + "\n")
    md.append(REFERENCE + "\n")
    write_atomically(folder.report_markdown, lambda tmp: tmp.write_text("\n".join(md), encoding="utf-8"))
    images = [(caption, (out / file).read_bytes()) for file, caption in plots.items()]
    page = render_page(title, notes, sections, images, intro=[data_line(data)], footer=[METHOD, REFERENCE])
    write_atomically(folder.report_html, lambda tmp: tmp.write_text(page, encoding="utf-8"))
    write_atomically(out / "summary.csv", lambda tmp: table.to_csv(tmp, index=False))
    return {"markdown": str(folder.report_markdown), "html": str(folder.report_html), "text": markdown_table(table)}


def history_sections(dag_dir: Path, out: Path, plots: Dict[str, str]) -> list:
    """The regression check and the history, where the regression DAG left them; a bisect's probe path."""
    sections = []
    folder = DagRunFolder(dag_dir)
    findings = load_table(folder.table("regression"))
    if not findings.empty:
        sections.append(("Regression check (against the last DAG runs on this hardware)",
                         findings[["variant", "launcher", "status", "message"]]))
        sections.append(("False alerts to expect", false_alert_line(dag_dir, findings)))
    bisected = read_json(folder.bisect)
    if bisected:  # mxbench_bisect's DAG runs: the probe path so far
        sections.append((f"Probe path: {bisected['title']}", bisected["path"]))
    history = load_table(folder.table("history"))
    if not history.empty:
        history = with_build(history)
        plot_history(history, out / "history.png")
        plots["history.png"] = "Throughput history by MXNet build"
        sections.append((STEP_FINDER, step_table(history)))
    return sections


def false_alert_line(dag_dir: Path, findings) -> str:
    """How many false alerts a month of nightly checks like this one should give, from the A/A
    noise floor of each series (``regression.rule.false_alerts_per_month``), or why that is not known."""
    from mxbench.regression.rule import false_alerts_per_month

    params = (read_json(DagRunFolder(dag_dir).request) or {}).get("params") or {}
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
           "verdict_lines", "gap_table", "markdown_table", "markdown_body", "mxnet_notices", "step_table",
           "STEP_FINDER", "with_build", "plot_scaling", "plot_epoch_time", "plot_accuracy", "plot_history",
           "plot_ratios", "REFERENCE", "METHOD", "PLOTS", "NO_RATIO"]
