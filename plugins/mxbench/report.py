"""The report of one DAG run: Markdown, a self-contained HTML page, CSV tables and PNG plots.

Reads only ``tables/*.csv``, ``request.json``, ``data.json`` and the runs'
``metrics.json``, so ``mxbench report`` can rebuild it from the files alone.
"""
import base64
import html
import io
import math
import os
from pathlib import Path
from typing import Dict, List, Tuple

import pandas as pd

from .parse import worth_reporting
from .regression import dag_run_keys
from .pipeline import load_table, read_json
from .variants import SEED_REFERENCE

REFERENCE = "Reference: the seed study's setups and figures are in docs/seed-study.md in the mxbench repository."


def _fmt(value, digits=1, pct=False):
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
            "s/epoch": f"{_fmt(r['sec_per_epoch'], 2)} [{_fmt(r['sec_per_epoch_min'], 2)}–{_fmt(r['sec_per_epoch_max'], 2)}]",
            "samples/s (Speedometer)": f"{_fmt(r['samples_per_sec'])} [{_fmt(r['samples_per_sec_min'])}–"
                                       f"{_fmt(r['samples_per_sec_max'])}]",
            "CV (Speedometer)": _fmt(r["samples_per_sec_cv"], 1, pct=True),
            "samples/s (images/epoch ÷ s/epoch)": _fmt(r["epoch_samples_per_sec"]),
            "GPU util": "n/a" if pd.isna(r["gpu_util_pct"]) else f"{r['gpu_util_pct']:.0f}%",
            "GPU mem (MiB)": _fmt(r["gpu_mem_mib"], 0),
            "speedup": _fmt(r["speedup"], 2), "scaling eff.": _fmt(r["scaling_efficiency"], 1, pct=True),
            "val. acc. (last epoch)": _fmt(r["validation_accuracy"], 3),
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


def ratio_table(ratios: pd.DataFrame) -> pd.DataFrame:
    """Every launcher pair: ratio, CI, p, n, α, detectable gap, order, verdict."""
    if ratios.empty:
        return ratios
    return pd.DataFrame({
        "variant": ratios["variant"], "launcher / reference": ratios["launcher"] + " / " + ratios["reference"],
        "ratio": ratios["ratio"].map(lambda v: _fmt(v, 1, pct=True)),
        "CI": [f"{lvl:.0%}: [{_fmt(lo, 1, pct=True)}, {_fmt(hi, 1, pct=True)}]"
               for lvl, lo, hi in zip(ratios["level"], ratios["ci_low"], ratios["ci_high"])],
        "p": ratios["p_value"].map(lambda v: "n/a" if pd.isna(v) else ("< 0.001" if v < 0.001 else f"{v:.3f}")),
        "α": ratios["alpha"].map(lambda v: f"{v:g}"),
        "n": [f"{a} vs {b}" for a, b in zip(ratios["n"], ratios["n_reference"])],
        "detectable gap": ratios["min_detectable"].map(lambda v: "none at this n" if pd.isna(v) else f"≥ {v:.1%}"),
        "order": ratios["order"], "verdict": ratios["verdict"],
    })


def gap_table(gap: pd.DataFrame) -> pd.DataFrame:
    """The k8s/ssh gap by part: ratio, CI, p, n, verdict."""
    return pd.DataFrame({
        "variant": gap["variant"], "part": gap["part"], "compared": gap["launcher"] + " / " + gap["reference"],
        "ratio": gap["ratio"].map(lambda v: _fmt(v, 1, pct=True)),
        "CI": [f"{lvl:.0%}: [{_fmt(lo, 1, pct=True)}, {_fmt(hi, 1, pct=True)}]"
               for lvl, lo, hi in zip(gap["level"], gap["ci_low"], gap["ci_high"])],
        "n": [f"{a} vs {b}" for a, b in zip(gap["n"], gap["n_reference"])],
        "verdict": gap["verdict"],
    })


def markdown_table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "_none_\n"
    cells = [[str(c) for c in frame.columns]] + [[str(v).replace("|", "\\|") for v in row]
                                                  for row in frame.itertuples(index=False)]
    lines = ["| " + " | ".join(row) + " |" for row in cells]
    lines.insert(1, "|" + "---|" * len(frame.columns))
    return "\n".join(lines) + "\n"


def provenance(dag_dir: Path) -> List[str]:
    """What a reader must know before trusting the numbers: synthetic data, stand-ins, CPU only."""
    notes = []
    data = read_json(dag_dir / "data.json", {})
    if data.get("synthetic"):
        notes.append("SYNTHETIC DATA: generated CIFAR-format images, not CIFAR-10. Accuracy numbers say "
                     "nothing about CIFAR-10; speed numbers are representative of the pipeline only.")
    elif data and not data.get("verified"):
        notes.append(f"Unverified data: {data.get('source')} is not the official CIFAR-10 archive (MD5 differs).")
    request = read_json(dag_dir / "request.json", {})
    runs = load_table(dag_dir / "tables" / "runs.csv")
    if "reused" in runs and runs["reused"].fillna(False).astype(bool).any():
        keys = ", ".join(runs.loc[runs["reused"].fillna(False).astype(bool), "key"])
        notes.append(f"REUSED: {keys} were measured by an earlier attempt of this DAG run and reused as they were.")
    notes += retried_notes(runs)
    notes += [f"NOTE: {note}" for note in request.get("params", {}).get("notes") or []]
    for reason in (request.get("unavailable") or {}).values():
        notes.append(f"UNAVAILABLE: {reason}; its runs failed with that cause.")
    for machines, members in (request.get("machine_sets") or {}).items():
        if len(members) > 1:
            notes.append(f"SHARED MACHINES: {' and '.join(members)} ran on the same machines (pool mxbench_{machines}, "
                         "one run at a time), so neither slowed the other down; the launcher table says in which "
                         "order their repeats ran.")
    for name, target in request.get("targets", {}).items():
        if target.get("one_machine") and any(r["variant"].get("hosts", 1) > 1 and r["launcher"] == name
                                             for r in request.get("runs", [])):
            notes.append(f"ONE MACHINE: the {name} launcher ran multi-host variants on this one machine, each host a "
                         "loopback address (127.0.0.1, 127.0.0.2, ...): the hosts shared its cores and no network "
                         "was crossed.")
        notes += [f"{name.upper()} TARGET: {note}" for note in target.get("notes") or []]
        if not target.get("gpus_per_host"):
            notes.append(f"No GPU on the {name} target: training ran on the CPU; GPU columns are n/a, and "
                         "workers on one host share its cores, so scaling shows the host, not MXNet.")
    return notes


def environment(dag_dir: Path, runs: pd.DataFrame) -> Dict[str, str]:
    for key in runs.loc[runs["status"] == "ok", "key"] if not runs.empty else []:
        env = (read_json(dag_dir / key / "metrics.json", {}) or {}).get("environment")
        if env:
            gpu = env.get("gpu", {})
            gpus = ", ".join(g["name"] for g in gpu.get("gpus", [])) if gpu.get("available") else \
                f"none ({gpu.get('reason')})"
            return {"MXNet": env.get("mxnet_version", "?"), "Python": env.get("python", "?"),
                    "CPU": f"{env.get('cpu_model')} ({env.get('cpu_count')} cores)", "GPUs": gpus,
                    "driver / CUDA": f"{gpu.get('driver') or 'n/a'} / {gpu.get('cuda') or 'n/a'}",
                    "host": env.get("host", "?")}
    return {}


# --- plots ----------------------------------------------------------------------------------

def _figure():
    # a Figure of its own, not pyplot's global state: the api-server draws in several threads
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2), dpi=100)
    return fig, fig.subplots()


def plot_scaling(summary: pd.DataFrame, path: Path):
    fig, ax = _figure()
    ok = summary.dropna(subset=["samples_per_sec"])
    for (launcher, depth, per_device), group in ok.groupby(["launcher", "num_layers", "batch_per_device"]):
        group = group.sort_values("devices")
        err = [group["samples_per_sec"] - group["samples_per_sec_min"],
               group["samples_per_sec_max"] - group["samples_per_sec"]]
        line = ax.errorbar(group["devices"], group["samples_per_sec"], yerr=err, marker="o", capsize=3,
                           label=f"{launcher}, ResNet-{depth}, {per_device}/device")
        base = group[group["devices"] == 1]["samples_per_sec"]
        if not base.empty:
            xs = sorted(group["devices"].unique())
            ax.plot(xs, [base.iloc[0] * x for x in xs], linestyle="--", color=line[0].get_color(), alpha=0.5)
    devices = sorted(int(d) for d in ok["devices"].unique()) or [1]
    ax.set_xscale("log", base=2)
    ax.set_xticks(devices, [str(d) for d in devices])  # 1, 2, 4, 8: whole devices, not 2^0.5
    ax.minorticks_off()
    ax.set(xlabel="devices (GPUs, or worker processes on CPU; log2 scale)", ylabel="samples/s (Speedometer; median, min–max)",
           title="Throughput vs devices (dashed: ideal linear scaling)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    _save(fig, path)


def plot_epoch_time(summary: pd.DataFrame, path: Path):
    fig, ax = _figure()
    ok = summary.dropna(subset=["sec_per_epoch"])
    labels = [f"{r.variant}\n{r.launcher}" for r in ok.itertuples()]
    err = [ok["sec_per_epoch"] - ok["sec_per_epoch_min"], ok["sec_per_epoch_max"] - ok["sec_per_epoch"]]
    ax.bar(range(len(ok)), ok["sec_per_epoch"], yerr=err, capsize=3)
    ax.set_xticks(range(len(ok)), labels, fontsize=7, rotation=45, ha="right")
    ax.set(ylabel="seconds/epoch (median; first epoch excluded\nwhere a run had more than one)",
           title="Seconds per epoch by variant")
    _save(fig, path)


def plot_accuracy(epochs: pd.DataFrame, path: Path):
    fig, ax = _figure()
    if not epochs.empty and epochs["validation_accuracy"].notna().any():
        per_run = epochs.groupby(["variant", "launcher", "repeat", "epoch"], as_index=False)["validation_accuracy"].mean()
        curves = per_run.groupby(["variant", "launcher", "epoch"], as_index=False)["validation_accuracy"].median()
        for (variant, launcher), group in curves.groupby(["variant", "launcher"]):
            ax.plot(group["epoch"], group["validation_accuracy"], marker=".", label=f"{variant} ({launcher})")
        ax.legend(fontsize=7, loc="best")
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers
    else:
        ax.text(0.5, 0.5, "no validation accuracy in the logs", ha="center", transform=ax.transAxes)
    ax.set(xlabel="epoch", ylabel="validation accuracy (median over repeats)", title="Validation accuracy")
    _save(fig, path)


def plot_history(history: pd.DataFrame, path: Path):
    """Throughput per variant over the DAG runs' dates, one colour per MXNet build; DAG runs the
    regression rule flagged are ringed red."""
    fig, ax = _figure()
    history = history.dropna(subset=["samples_per_sec"]).assign(when=lambda h: pd.to_datetime(h["when"], utc=True))
    builds = list(dict.fromkeys(history.sort_values("when")["build"]))
    colours = {b: f"C{i % 10}" for i, b in enumerate(builds)}
    machines = history["environment"].nunique()
    for (variant, launcher, machine), group in history.groupby(["variant", "launcher", "environment"], dropna=False):
        per_run = group.groupby([*dag_run_keys(group), "build"], as_index=False).agg(
            when=("when", "min"), samples_per_sec=("samples_per_sec", "median"), verdict=("verdict", "first"))
        per_run = per_run.sort_values("when")
        ax.plot(per_run["when"], per_run["samples_per_sec"], color="grey", alpha=0.4, linewidth=1)
        ax.scatter(per_run["when"], per_run["samples_per_sec"], c=[colours[b] for b in per_run["build"]], s=18,
                   zorder=3)
        flagged = per_run[per_run["verdict"] == "regression"]
        ax.scatter(flagged["when"], flagged["samples_per_sec"], s=120, facecolors="none", edgecolors="red",
                   linewidths=1.5, zorder=4, label="regression" if not flagged.empty else None)
        if not per_run.empty:
            label = f"{variant} ({launcher}" + (f", machine {machine})" if machines > 1 else ")")
            ax.annotate(label, (per_run["when"].iloc[-1], per_run["samples_per_sec"].iloc[-1]),
                        fontsize=7, xytext=(4, 0), textcoords="offset points")
    for build, colour in colours.items():
        ax.scatter([], [], color=colour, label=build)
    ax.set(xlabel="data interval (DAG run)", ylabel="samples/s (median over repeats)",
           title="Throughput history by MXNet build")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.autofmt_xdate()
    _save(fig, path)


def with_build(history: pd.DataFrame) -> pd.DataFrame:
    """History rows named by the MXNet build that ran (``store.what_ran``), the version the trainer
    reported rather than the package asked for; a history.csv older than that column included."""
    from .store import what_ran

    return history.assign(build=what_ran(history))


def _distinct(values: pd.Series) -> str:
    """The values a group holds, once each, in order: a table cell."""
    return ", ".join(dict.fromkeys(str(v) for v in values.dropna()))


def step_table(history: pd.DataFrame) -> pd.DataFrame:
    """Per variant, launcher and kind of machine (the store's environment fingerprint), the first
    build that got slower than the one before it."""
    from .regression import find_step

    steps = []
    ok = history[history["status"] == "ok"]
    for (variant, launcher, machine), group in ok.groupby(["variant", "launcher", "environment"], dropna=False):
        step = find_step(group)
        steps.append({"variant": variant, "launcher": launcher, "machine": machine,
                      "first slower build": step["build"] if step else "none", "vs": step["previous"] if step else "",
                      "change": f"{step['change']:+.1%} [{step['ci_low']:+.1%}, {step['ci_high']:+.1%}]" if step else ""})
    return pd.DataFrame(steps, columns=["variant", "launcher", "machine", "first slower build", "vs", "change"])


def history_sections(dag_dir: Path, out: Path, plots: Dict[str, str]) -> list:
    """The regression check and the history, where the regression DAG left them."""
    sections = []
    findings = load_table(dag_dir / "tables" / "regression.csv")
    if not findings.empty:
        sections.append(("Regression check (against the last DAG runs on this hardware)",
                         findings[["variant", "launcher", "status", "message"]]))
    history = load_table(dag_dir / "tables" / "history.csv")
    if not history.empty:
        history = with_build(history)
        plot_history(history, out / "history.png")
        plots["history.png"] = "Throughput history by MXNet build"
        sections.append(("Step finder: which build first got slower", step_table(history)))
    return sections


def plot_ratios(ratios: pd.DataFrame, path: Path):
    """Launcher ratios with their confidence intervals; only called when two launchers ran."""
    fig, ax = _figure()
    labels = [f"{r.variant}\n{r.launcher}/{r.reference}" for r in ratios.itertuples()]
    ratio = ratios["ratio"]
    err = [(ratio - ratios["ci_low"]).fillna(0), (ratios["ci_high"] - ratio).fillna(0)]
    ax.errorbar(range(len(ratios)), ratio, yerr=err, fmt="o", capsize=4)
    ax.axhline(1.0, color="grey", linestyle="--")
    ax.set_xticks(range(len(ratios)), labels, fontsize=7)
    level = ratios["level"].dropna()
    ax.set(ylabel=f"speed ratio (median; bars: {level.iloc[0]:.0%} CI)" if not level.empty else "speed ratio",
           title="Launcher speed ratio per variant")
    _save(fig, path)


def _save(fig, path):
    fig.tight_layout()
    if isinstance(path, io.IOBase):  # the history page's in-memory image
        fig.savefig(path, format="png")
    else:
        write_atomically(Path(path), lambda tmp: fig.savefig(tmp, format="png"))


def write_atomically(path: Path, write) -> None:
    """``write(tmp)`` to a temporary file in ``path``'s folder, then rename it to ``path``: the UI
    serves these files while a report task may be rebuilding them, and a reader must see the old
    file or the new one, never a half-written one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# --- the report -----------------------------------------------------------------------------

PLOTS = {"scaling.png": "Throughput vs devices", "epoch_time.png": "Seconds per epoch",
         "accuracy.png": "Validation accuracy per epoch", "ratios.png": "Launcher speed ratio"}
NO_RATIO = "Only one launcher ran: there is no launcher ratio to show."
METHOD = ("Steady state: samples/s (Speedometer) sums the workers' own Speedometer readings after the first "
          "epoch; s/epoch is the slowest worker's, first epoch excluded (a 1-epoch run cannot leave out its "
          "warm-up, and says so). The second throughput, images/epoch ÷ s/epoch, includes epoch boundaries; the two "
          "are flagged under Notes on variants when more than 10% apart. Speedup and scaling efficiency use the Speedometer figure. "
          "Brackets: min–max over repeats. Launcher ratio: ratio of medians with a bootstrap confidence "
          "interval over repeats; p from a two-sided permutation test on the log speeds; a difference is "
          "called only when p < α and the interval excludes 100%; the detectable gap is what this rule "
          "calls with 80% power at this n and spread (simulated).")


def build_report(dag_dir: Path) -> Dict[str, str]:
    dag_dir = Path(dag_dir)
    out = dag_dir / "report"
    out.mkdir(exist_ok=True)
    tables = dag_dir / "tables"
    runs, summary = load_table(tables / "runs.csv"), load_table(tables / "summary.csv")
    ratios, epochs = load_table(tables / "ratios.csv"), load_table(tables / "epochs.csv")
    gap = load_table(tables / "k8s_gap.csv")
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
    failed = runs.loc[runs["status"] != "ok", ["key", "status", "cause"]] if not runs.empty else pd.DataFrame()
    data = read_json(dag_dir / "data.json", {})
    env = environment(dag_dir, runs)
    sections = [("Results", table)]
    notes_on_variants = variant_notes(summary, runs) if not summary.empty else pd.DataFrame()
    if not notes_on_variants.empty:
        sections.append(("Notes on variants", notes_on_variants))
    sections += [("Failed runs", failed),
                 ("Launcher speed ratio", ratio_table(ratios) if not ratios.empty else NO_RATIO)]
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
        body = frame + "\n" if isinstance(frame, str) else markdown_table(frame)
        md.append(f"## {name}\n\n{body}")
    md.append("## Plots\n\n" + "\n".join(f"![{t}]({f})" for f, t in plots.items()) + "\n")
    md.append(METHOD + "\n")
    md.append(REFERENCE + "\n")
    write_atomically(out / "report.md", lambda tmp: tmp.write_text("\n".join(md), encoding="utf-8"))
    images = [(caption, (out / file).read_bytes()) for file, caption in plots.items()]
    page = render_page(title, notes, sections, images, intro=[data_line(data)], footer=[METHOD, REFERENCE])
    write_atomically(out / "report.html", lambda tmp: tmp.write_text(page, encoding="utf-8"))
    write_atomically(out / "summary.csv", lambda tmp: table.to_csv(tmp, index=False))
    return {"markdown": str(out / "report.md"), "html": str(out / "report.html"), "text": markdown_table(table)}


def retried_notes(runs: pd.DataFrame) -> List[str]:
    """One line per run that took more than one try (its task failed or its worker was lost, and
    Airflow ran it again): which try measured it, and on which worker."""
    if runs.empty or "try_number" not in runs:
        return []
    tries = pd.to_numeric(runs["try_number"], errors="coerce").fillna(1)
    earlier = pd.to_numeric(runs.get("earlier_attempts", 0), errors="coerce").fillna(0)
    notes = []
    for row, try_number, attempts in zip(runs.to_dict("records"), tries, earlier):
        if try_number > 1 or attempts > 0:
            worker = row.get("worker") if isinstance(row.get("worker"), str) else "?"
            kept = f"; {int(attempts)} earlier attempt(s) kept under attempts/" if attempts else \
                "; the earlier try published nothing (see its task log)"
            notes.append(f"RETRIED: run {row['key']} was retried: try {int(try_number)} on worker {worker} "
                         f"{'measured it' if row.get('status') == 'ok' else 'failed too'}{kept}.")
    return notes


def data_line(data: dict) -> str:
    """What the runs trained on, in one line for people."""
    kind = "synthetic CIFAR-format data" if data.get("synthetic") else (
        "CIFAR-10, verified (official MD5)" if data.get("verified") else "CIFAR-10 format, unverified (MD5 differs)")
    records = ", ".join(f"{count:,} {split}" for split, count in data.get("records", {}).items())
    return f"Data: {data.get('source', '?')} ({kind}; records: {records or 'n/a'})"


def mxnet_notices(dag_dir: Path, runs: pd.DataFrame) -> pd.DataFrame:
    """MXNet's C++ warnings worth a reader's time, once per variant and text, from every run's
    notices.json (failed runs too)."""
    rows, seen = [], set()
    for r in runs.to_dict("records") if not runs.empty else []:
        for notice in read_json(dag_dir / r["key"] / "notices.json", []) or []:
            text = notice.split(": ", 1)[-1]
            if worth_reporting(text) and (r["variant"], text) not in seen:
                seen.add((r["variant"], text))
                rows.append({"variant": r["variant"], "run": r["key"], "notice": notice})
    return pd.DataFrame(rows, columns=["variant", "run", "notice"])


def render_page(title: str, notes: List[str], sections, images: List[Tuple[str, bytes]], intro=(),
                footer=()) -> str:
    """A self-contained HTML page (plots inline as PNG data): the report of a DAG run (written to
    report.html, served by the Airflow UI's "Benchmark report" view) and the "Benchmark history"
    page. ``sections``: (heading, DataFrame or a sentence); ``notes`` are shown as warnings first."""
    style = ("body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;"
             "font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px}.note{background:#fff3cd;"
             "border:1px solid #e0b000;padding:8px;margin:6px 0;font-weight:bold}img{max-width:48%}")
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>"]
    parts += [f"<div class='note'>{html.escape(n)}</div>" for n in notes]
    parts += [f"<p>{html.escape(line)}</p>" for line in intro]
    for name, frame in sections:
        if isinstance(frame, str):
            body = f"<p>{html.escape(frame)}</p>"
        else:
            body = frame.to_html(index=False, escape=True, na_rep="n/a") if not frame.empty else "<p><i>none</i></p>"
        parts.append(f"<h2>{html.escape(name)}</h2>{body}")
    if images:
        parts.append("<h2>Plots</h2>")
    for caption, png in images:
        encoded = base64.b64encode(png).decode()
        parts.append(f"<img alt='{html.escape(caption)}' src='data:image/png;base64,{encoded}'>")
    parts += [f"<p>{html.escape(line)}</p>" for line in footer]
    parts.append("</body></html>")
    return "".join(parts)


# --- the history page -----------------------------------------------------------------------

def history_page(history: pd.DataFrame, source: str) -> str:
    """The "Benchmark history" page: throughput per variant over DAG runs and MXNet builds, from
    the results store's rows (``regression.judge_history``'s, with ``verdict``); regressions ringed
    in the plot and listed."""
    title = "mxbench: benchmark history"
    intro = [f"From {source}: every stored DAG run of the DAGs you may read, each judged as the regression "
             "DAG judges (its default baseline and smallest drop) against the DAG runs before it on the same "
             "variant, launcher and kind of machine (machine: the store's fingerprint of the hardware: GPU model "
             "and count, driver, CUDA, CPU). MXNet build: the version the trainer reported, which is what ran "
             "whatever was asked for; runtime: the interpreter or image each run used."]
    if history.empty:
        return render_page(title, [], [("Throughput by variant and MXNet build", "No runs are stored yet.")], [],
                           intro=intro)
    history = with_build(history).assign(when=lambda h: pd.to_datetime(h["when"], utc=True))
    ok = history[(history["status"] == "ok") & history["samples_per_sec"].notna()]
    # each repeat's own build asked for; rows stored before the store kept it have their DAG run's
    ok = ok.assign(asked=ok["mxnet_asked"].astype(object).fillna(ok["mxnet_package"].astype(object)))
    per_run = ok.groupby(["variant", "launcher", "environment", "build", "run_id", "dag_id"], as_index=False,
                         dropna=False).agg(
        when=("when", "min"), samples_per_sec=("samples_per_sec", "median"), verdict=("verdict", "first"),
        runtime=("runtime", _distinct))
    group = ["variant", "launcher", "environment", "build"]
    by_build = per_run.groupby(group, as_index=False, dropna=False).agg(
        dag_runs=("run_id", "nunique"), median=("samples_per_sec", "median"), low=("samples_per_sec", "min"),
        high=("samples_per_sec", "max"), last=("when", "max"),
        regressions=("verdict", lambda v: int((v == "regression").sum())))
    by_build = by_build.merge(ok.groupby(group, as_index=False, dropna=False).agg(
        asked=("asked", _distinct), runtime=("runtime", _distinct)), on=group, how="left")
    by_build = pd.DataFrame({
        "variant": by_build["variant"], "launcher": by_build["launcher"], "machine": by_build["environment"],
        "MXNet build": by_build["build"], "asked for": by_build["asked"], "runtime": by_build["runtime"],
        "DAG runs": by_build["dag_runs"],
        "samples/s (median of runs) [min–max]": [f"{_fmt(m)} [{_fmt(lo)}–{_fmt(hi)}]" for m, lo, hi in
                                                 zip(by_build["median"], by_build["low"], by_build["high"])],
        "last run": by_build["last"].dt.strftime("%Y-%m-%d %H:%M"), "regressions": by_build["regressions"]})
    flagged = per_run[per_run["verdict"] == "regression"].sort_values("when")
    flagged = pd.DataFrame({"when": flagged["when"].dt.strftime("%Y-%m-%d %H:%M"), "DAG": flagged["dag_id"],
                            "DAG run": flagged["run_id"], "variant": flagged["variant"],
                            "launcher": flagged["launcher"], "machine": flagged["environment"],
                            "MXNet build": flagged["build"], "runtime": flagged["runtime"],
                            "samples/s (median)": flagged["samples_per_sec"].map(_fmt)})
    png = io.BytesIO()
    plot_history(history, png)
    sections = [("Throughput by variant and MXNet build", by_build),
                ("Regressions flagged (red rings in the plot)", flagged),
                ("Step finder: which build first got slower", step_table(history))]
    return render_page(title, [], sections, [("Throughput history by MXNet build", png.getvalue())], intro=intro)
