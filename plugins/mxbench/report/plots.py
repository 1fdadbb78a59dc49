"""The report's PNG plots: throughput vs devices, seconds per epoch, validation accuracy,
every run's speed in the order it ran, launcher ratios and the throughput history. Colours are
Okabe and Ito's, which readers with colour-blindness tell apart; launchers also differ by marker."""
import io
from datetime import timezone
from pathlib import Path
from typing import Optional

import pandas as pd

from mxbench.regression.regression_rule import dag_run_keys
from mxbench.results.contention import flags
from mxbench.run_folder import write_atomically

# Okabe & Ito (2008): colours that stay distinct with the common kinds of colour-blindness
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def _figure():
    # a Figure of its own, not pyplot's global state: the api-server draws in several threads
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2), dpi=100)
    ax = fig.subplots()
    ax.set_prop_cycle(color=PALETTE)
    return fig, ax


def has_curve(summary: pd.DataFrame) -> bool:
    """Whether any series of the scaling plot has two device counts: one point is no curve."""
    ok = summary.dropna(subset=["samples_per_sec"])
    if ok.empty:
        return False
    return bool(ok.groupby(["launcher", "num_layers", "batch_per_device"])["devices"].nunique().max() > 1)


CONTENDED_LABEL = "contended (other work on its hosts)"


def plot_run_order(runs: pd.DataFrame, path: Path):
    """Every measured run's speed in the order the runs started, one colour and marker per launcher:
    drift, a contended stretch and outliers show at a glance. Every contended run is ringed, whatever
    its launcher (a pod that read its own pressure too), with a legend entry."""
    fig, ax = _figure()
    ok = runs[(runs["status"] == "ok") & runs["samples_per_sec"].notna()].copy()
    ok["started_at"] = pd.to_numeric(ok["started_at"], errors="coerce")
    ok = ok.sort_values("started_at").reset_index(drop=True)
    for i, (launcher, group) in enumerate(ok.groupby("launcher", sort=False)):
        ax.plot(group.index + 1, group["samples_per_sec"], linestyle="none", marker=MARKERS[i % len(MARKERS)],
                color=PALETTE[i % len(PALETTE)], label=launcher)
    contended = ok[flags(ok["contended"])] if "contended" in ok else ok.iloc[:0]
    if not contended.empty:  # a ring around each run that had other work on its hosts
        ax.plot(contended.index + 1, contended["samples_per_sec"], linestyle="none", marker="o", markersize=14,
                markerfacecolor="none", markeredgecolor="black", label=CONTENDED_LABEL, gid="contended-rings")
    ax.set(xlabel="run, in the order it started", ylabel="samples/s (Speedometer)",
           title="Every run's speed in the order it ran")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    _save(fig, path)


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
    ax.set(xlabel="devices (GPUs, or worker processes on CPU; log2 scale)",
           ylabel="samples/s (Speedometer; median, min–max)",
           title="Throughput vs devices (dashed: ideal linear scaling)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    _save(fig, path)


def plot_scaling_fit(found, path: Path):
    """Efficiency against devices per setup (``report.scaling_tables.models``): the measured sizes as dots
    (measured samples/s over devices times the fitted 1-device rate), the model as a line through
    the measured sizes, and the projections as hollow markers with their intervals, labelled."""
    fig, ax = _figure()
    devices = set()
    for i, m in enumerate(found):
        colour, marker = PALETTE[i % len(PALETTE)], MARKERS[i % len(MARKERS)]
        one = m.model.coef[0]
        points = sorted(m.model.points, key=lambda p: p.config.devices)
        ax.plot([p.config.devices for p in points], [one / p.steps.mean() for p in points], linestyle="none",
                marker=marker, color=colour, label=f"{m.name}: measured")
        curve = sorted(m.curve, key=lambda c: (c.config.devices, c.config.hosts))
        fitted = [c for c in curve if not c.projected]
        ax.plot([c.config.devices for c in fitted], [c.efficiency for c in fitted], color=colour, label="model")
        ahead = [c for c in curve if c.projected]
        ax.errorbar([c.config.devices for c in ahead], [c.efficiency for c in ahead],
                    yerr=[[c.efficiency - c.efficiency_low for c in ahead],
                          [c.efficiency_high - c.efficiency for c in ahead]],
                    linestyle=":", marker=marker, mfc="none", color=colour, capsize=3, label="PROJECTED")
        devices |= {c.config.devices for c in curve}
    ticks = sorted(devices) or [1]
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(d) for d in ticks])
    ax.minorticks_off()
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    ax.set(xlabel="devices (log2 scale)", ylabel="scaling efficiency (fitted 1-device rate = 100%)",
           title="Scaling model: measured, fitted and PROJECTED (hollow; bars: interval)")
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
        per_run = epochs.groupby(["variant", "launcher", "repeat", "epoch"],
                                 as_index=False)["validation_accuracy"].mean()
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


def plot_history(history: pd.DataFrame, path, alerts: Optional[pd.DataFrame] = None,
                 names: Optional[dict] = None):
    """Throughput per series (variant, launcher, kind of machine) over the DAG runs' dates, as small
    multiples, one panel each with its own scale, one colour per MXNet build (named in the legend),
    each DAG run's median with the min–max of its repeats; DAG runs the regression
    rule flagged are ringed red and labelled with their triage state where a person set one
    (``alerts``: ``store.read_alerts``' rows), and the first DAG run of each new level (a change
    point) is boxed in a black diamond with its level change. Machines by name where ``names``
    (fingerprint -> name) has one; dates as dates, fitted to the span (``date_axis``)."""
    from matplotlib.figure import Figure

    history = history.dropna(subset=["samples_per_sec"]).assign(when=lambda h: pd.to_datetime(h["when"], utc=True))
    builds = list(dict.fromkeys(history.sort_values("when")["build"]))
    colours = {b: PALETTE[i % len(PALETTE)] for i, b in enumerate(builds)}
    series = list(history.groupby(["variant", "launcher", "environment"], dropna=False))
    machines = history["environment"].nunique()
    columns = min(3, max(len(series), 1))
    rows = -(-max(len(series), 1) // columns)
    fig = Figure(figsize=(3.6 * columns + 1, 2.8 * rows + 0.6), dpi=100)
    axes = fig.subplots(rows, columns, squeeze=False, sharex=True).ravel()
    states = _triage_states(alerts)
    for ax, ((variant, launcher, machine), group) in zip(axes, series):
        _history_panel(ax, group, colours, states)
        named = (names or {}).get(machine) or machine
        ax.set_title(f"{variant} ({launcher}" + (f", {named})" if machines > 1 or named != machine else ")"),
                     fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[len(series):]:
        ax.set_visible(False)
    axes[0].set_ylabel("samples/s (median over repeats)", fontsize=7)
    for build, colour in colours.items():
        axes[0].scatter([], [], color=colour, label=f"MXNet {build}")
    fig.suptitle("Throughput history by MXNet build, one panel per series (bars: min–max of repeats)", fontsize=9)
    limits = time_limits(history["when"])
    if limits:
        axes[0].set_xlim(*(t.to_pydatetime() for t in limits))
        for ax in axes[:len(series)]:
            date_axis(ax, limits[1] - limits[0])
    legend = {}  # one entry per label over every panel
    for ax in axes[:max(len(series), 1)]:
        legend.update({label: handle for handle, label in zip(*ax.get_legend_handles_labels())})
    labels, handles = list(legend), list(legend.values())
    if handles:
        fig.legend(handles, labels, fontsize=7, loc="lower center", ncols=min(len(labels), 5))
    fig.tight_layout(rect=(0, 0.08 if handles else 0, 1, 0.95))
    _save(fig, path)


def date_axis(ax, span: pd.Timedelta):
    """Dates a reader can read under a panel: a few ticks, each labelled whole (no offset text to
    match against them), as days over a span of days or more, with the hour under two days, as
    months over years."""
    from matplotlib.dates import AutoDateLocator, DateFormatter

    if span > pd.Timedelta(days=730):
        shown = "%Y-%m"
    elif span > pd.Timedelta(days=2):
        shown = "%Y-%m-%d"
    else:
        shown = "%Y-%m-%d %H:%M"
    ax.xaxis.set_major_locator(AutoDateLocator(tz=timezone.utc, minticks=2, maxticks=5))
    ax.xaxis.set_major_formatter(DateFormatter(shown, tz=timezone.utc))
    ax.tick_params(axis="x", labelrotation=30)


def _triage_states(alerts: Optional[pd.DataFrame]) -> dict:
    """(dag_id, run_id, variant, launcher, machine key) -> the state a person set."""
    if alerts is None or alerts.empty:
        return {}
    return {(a.dag_id, a.run_id, a.variant, a.launcher, a.environment or ""): a.state for a in alerts.itertuples()}


def _history_panel(ax, group: pd.DataFrame, colours: dict, states: dict):
    if "change_point" not in group.columns:  # a history.csv written before change points
        group = group.assign(change_point=float("nan"))
    per_run = group.groupby([*dag_run_keys(group), "build"], as_index=False).agg(
        when=("when", "min"), samples_per_sec=("samples_per_sec", "median"), verdict=("verdict", "first"),
        change_point=("change_point", "first"), variant=("variant", "first"), launcher=("launcher", "first"),
        environment=("environment", "first")).sort_values("when")
    spread = group.groupby(dag_run_keys(group))["samples_per_sec"].agg(["min", "max"])
    spread = per_run.join(spread, on=dag_run_keys(group))
    ax.vlines(spread["when"], spread["min"], spread["max"], colors=[colours[b] for b in spread["build"]],
              linewidth=1.5, alpha=0.7, zorder=2)
    ax.plot(per_run["when"], per_run["samples_per_sec"], color="grey", alpha=0.4, linewidth=1)
    ax.scatter(per_run["when"], per_run["samples_per_sec"], c=[colours[b] for b in per_run["build"]], s=18, zorder=3)
    flagged = per_run[per_run["verdict"] == "regression"]
    ax.scatter(flagged["when"], flagged["samples_per_sec"], s=120, facecolors="none", edgecolors="red",
               linewidths=1.5, zorder=4, label="regression" if not flagged.empty else None)
    for row in flagged.itertuples():
        key = (getattr(row, "dag_id", None), row.run_id, row.variant, row.launcher,
               "" if pd.isna(row.environment) else row.environment)
        if states.get(key):
            ax.annotate(states[key], (row.when, row.samples_per_sec), fontsize=6, color="red", xytext=(0, 8),
                        textcoords="offset points", ha="center")
    changed = per_run[per_run["change_point"].notna()]
    ax.scatter(changed["when"], changed["samples_per_sec"], s=70, marker="D", facecolors="none",
               edgecolors="black", linewidths=1.2, zorder=4, label="change point" if not changed.empty else None)
    for when, speed, shift in zip(changed["when"], changed["samples_per_sec"], changed["change_point"]):
        ax.annotate(f"{shift:+.1%}", (when, speed), fontsize=7, xytext=(0, -12), textcoords="offset points",
                    ha="center")


SMALLEST_TIME_MARGIN = pd.Timedelta(hours=1)


def time_limits(whens: pd.Series, margin=0.05, least=SMALLEST_TIME_MARGIN):
    """The history plot's time axis: the data's span and ``margin`` of it on each side, at least
    ``least``; None without data. Left to matplotlib, one DAG run (or several minutes apart)
    would sit on an axis of years."""
    whens = pd.to_datetime(pd.Series(whens), utc=True).dropna()
    if whens.empty:
        return None
    first, last = whens.min(), whens.max()
    pad = max((last - first) * margin, least)
    return first - pad, last + pad


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
