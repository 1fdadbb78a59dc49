"""The HTML pages: ``render_page`` (a DAG run's report.html and the history page share it) and
``history_page``, the UI's "Benchmark history"."""
import base64
import html
import io
from typing import Iterable, List, Optional, Tuple

import pandas as pd

from mxbench.report.builds_view import Machine, named_machines
from mxbench.report.plots import plot_history
from mxbench.report.tables import STEP_FINDER, distinct, fmt, step_table, with_build
from mxbench.results.contention import flags


def render_page(title: str, notes: List[str], sections, images: List[Tuple[str, bytes]], intro=(),
                footer=(), *, lead: str = "", conditions=(), details=()) -> str:
    """A self-contained HTML page (plots inline as PNG data): the report of a DAG run (written to
    report.html, served by the Airflow UI's "Benchmark report" view) and the "Benchmark history"
    page. ``sections``: (heading, DataFrame, a sentence or a list of lines); ``notes`` are shown as
    warnings first. The report's own order: ``lead`` (the answer: HTML this package made), then
    ``conditions`` (``notes.Condition``: one line each, the whole sentence a click away), then the
    sections; ``details`` (the run id, the folder) close the page."""
    style = ("body{font-family:sans-serif;margin:1em 2em;max-width:1200px;color:#222}"
             "h1{font-size:1.5em;margin:.3em 0}h2{font-size:1.2em;margin:1em 0 .4em}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px}"
             ".note{background:#fff3cd;border:1px solid #8a6d00;padding:8px;margin:6px 0;font-weight:bold}"
             ".conditions{border:1px solid #8a6d00;background:#fffbea;padding:4px 12px;margin:8px 0}"
             ".conditions ul{margin:4px 0;padding-left:1.2em}.conditions li{margin:2px 0}"
             ".conditions h2{margin:.3em 0;font-size:1.05em}"
             ".tag{display:inline-block;border:1px solid #555;border-radius:3px;padding:0 4px;margin:1px 2px;"
             "font-size:11px;background:#f4f4f4}"
             "figure{display:inline-block;margin:4px;max-width:48%}figure img{max-width:100%}"
             "figcaption{font-size:12px}svg.forest{max-width:100%;height:auto}")
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{style}</style></head><body><main><h1>{html.escape(title)}</h1>"]
    parts += [f"<div class='note'>{html.escape(n)}</div>" for n in notes]
    parts.append(lead)
    if conditions:
        parts.append(conditions_box(conditions))
    parts += [f"<p>{html.escape(line)}</p>" for line in intro]
    for name, frame in sections:
        if isinstance(frame, str):
            body = f"<p>{html.escape(frame)}</p>"
        elif isinstance(frame, list):
            body = "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in frame) + "</ul>"
        else:
            body = table_html(frame) if not frame.empty else "<p><i>none</i></p>"
        parts.append(f"<h2>{html.escape(name)}</h2>{body}")
    if images:
        parts.append("<h2>Plots</h2>")
    for caption, png in images:
        encoded = base64.b64encode(png).decode()
        parts.append(f"<figure><img alt='{html.escape(caption, quote=True)}' src='data:image/png;base64,{encoded}'>"
                     f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    parts += [f"<p>{html.escape(line)}</p>" for line in footer]
    if details:
        parts.append("<details class='run-details'><summary>Run details</summary><ul>"
                     + "".join(f"<li>{html.escape(line)}</li>" for line in details) + "</ul></details>")
    parts.append("</main></body></html>")
    return "".join(parts)


def table_html(frame: pd.DataFrame, **options) -> str:
    """A table, every cell escaped; a ``links.Links`` cell as its anchors (hrefs this package made)."""
    from mxbench.report.links import Links

    if not any(isinstance(value, Links) for column in frame.columns for value in frame[column]):
        return frame.to_html(index=False, escape=True, na_rep="n/a", **options)
    cells = frame.astype(object).map(lambda value: value.html() if isinstance(value, Links)
                                     else "n/a" if _missing(value) else html.escape(str(value)))
    return cells.rename(columns=lambda name: html.escape(str(name))).to_html(index=False, escape=False, **options)


def _missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and value != value)


def since_last_block(since, heading: str) -> str:
    """The short section after the answer: each series against the previous DAG run of its setup
    (a table, or a sentence saying why there is none)."""
    body = f"<p>{html.escape(since)}</p>" if isinstance(since, str) else table_html(since)
    return (f"<section id='since-last' aria-labelledby='since-last-heading'><h2 id='since-last-heading'>"
            f"{html.escape(heading)}</h2>{body}</section>")


def conditions_box(conditions) -> str:
    """One line per condition, its whole sentence a click away."""
    items = "".join(f"<li><details><summary>{html.escape(c.short)}</summary>{html.escape(c.detail)}</details></li>"
                    for c in conditions)
    return f"<section class='conditions' aria-labelledby='conditions'><h2 id='conditions'>Conditions</h2>" \
           f"<ul>{items}</ul></section>"


def answer_block(table: pd.DataFrame, forest: str, empty_line: str) -> str:
    """The report's first screen: the forest plot, then its text equivalent (the verdict labels,
    why, and the tags of the conditions that bear on each line); ``empty_line`` without pairs."""
    body = forest
    if empty_line:
        body += f"<p>{html.escape(empty_line)}</p>"
    if table.empty:
        pass
    elif "read with" not in table:  # one launcher: the throughput
        body += table.to_html(index=False, escape=True, na_rep="n/a", classes="answer")
    else:
        shown = table.assign(**{"read with": [
            " ".join(f"<span class='tag'>{html.escape(tag)}</span>" for tag in tags.split(", ") if tag)
            for tags in table["read with"]]})
        escaped = shown.drop(columns="read with").astype(str).map(html.escape)
        body += escaped.assign(**{"read with": shown["read with"]}).to_html(index=False, escape=False,
                                                                            classes="answer")
    return f"<section id='answer' aria-labelledby='answer-heading'><h2 id='answer-heading'>Answer</h2>{body}</section>"


BACKFILLS = "Backfills (newest first; each link: the history of its DAG runs only)"

# where the triage table (which holds forms, so render_page cannot escape it) goes in the page
TRIAGE_TABLE = "mxbench-triage-table"


def triage_form(alert: dict, token: str) -> str:
    """The small form that sets one alert's state: the states it may become, a reason, a button.
    It posts to ``history/alerts``, relative to the history page; no script."""
    from mxbench.regression.triage import ALLOWED, MAX_REASON

    fields = {"dag_id": alert["DAG"], "run_id": alert["DAG run"], "variant": alert["variant"],
              "launcher": alert["launcher"], "environment": machine_key_of(alert["machine"]), "token": token}
    hidden = "".join(f"<input type='hidden' name='{name}' value='{html.escape(str(value), quote=True)}'>"
                     for name, value in fields.items())
    options = "".join(f"<option>{html.escape(state)}</option>" for state in ALLOWED[alert["state"]])
    return (f"<form method='post' action='history/alerts'>{hidden}<select name='state'>{options}</select> "
            f"<input name='reason' placeholder='why' maxlength='{MAX_REASON}'> <button type='submit'>Set</button>"
            "</form>")


def machine_key_of(machine) -> str:
    """The store's key of a table's machine cell: a ``Machine``'s fingerprint, else the cell ("" for none)."""
    return machine.fingerprint if isinstance(machine, Machine) else machine


def triage_table(flagged: pd.DataFrame, editable: Iterable[str], token: str) -> str:
    """The flagged regressions as an HTML table, every cell escaped, with a triage form on the
    alerts of the DAGs in ``editable``."""
    editable = set(editable)
    cells = flagged.astype(object).where(flagged.notna(), "n/a").map(
        lambda v: v.html() if isinstance(v, Machine) else html.escape(str(v)))
    forms = [triage_form(alert, token) if alert["DAG"] in editable else ""
             for alert in flagged.to_dict("records")]
    return cells.assign(**{"set state": forms}).to_html(index=False, escape=False)


def history_page(history: pd.DataFrame, source: str, alerts: Optional[pd.DataFrame] = None,
                 editable: Iterable[str] = (), form_token: Optional[str] = None,
                 sizes: Optional[pd.DataFrame] = None, names: Optional[dict] = None,
                 scope: Optional[str] = None, backfills: Optional[pd.DataFrame] = None) -> str:
    """The "Benchmark history" page: throughput per variant over DAG runs and MXNet builds, from
    the results store's rows (``regression.regression_rule.judge_history``'s, with ``verdict``); regressions ringed
    in the plot and listed, each with its triage state from ``alerts`` (``store.read_alerts``'
    rows; none: new) and, on the alerts of the DAGs in ``editable``, a form to set it that carries
    ``form_token``. A DAG run with a contended run (other work on its hosts) is counted beside its
    series, and a flagged regression says how many of its runs were contended. With ``sizes``
    (``store.read_sizes``) and a model measured at more than one device count: its measured scaling
    efficiency and cost per million images by MXNet build (``scaling_by_build``). First, the builds
    view (``report.builds_view``), machines named by ``names`` (``store.machine_names``). ``scope``: a
    sentence saying which DAG runs ``history`` was narrowed to (one backfill's), shown first;
    ``backfills``: a table of backfills, each a link to the page of its DAG runs only, shown last."""
    title = "mxbench: benchmark history" + (" of one backfill" if scope else "")
    intro = [f"From {source}: every stored DAG run of the DAGs you may read, each judged as the regression "
             "DAG judges (its default baseline and smallest drop; not its confirmation rounds, false-discovery "
             "control or triage, which only its own DAG runs' findings show) against the DAG runs before it on the "
             "same variant, launcher, setup and kind of machine (machine: the store's fingerprint of the hardware: "
             "GPU model and count, driver, CUDA, CPU), of the DAGs whose runs may be a baseline "
             "(MXBENCH_BASELINE_DAGS; another DAG's runs are shown, not judged). Contended runs (other work on their "
             "hosts) are left out of the judgement and counted in the tables; a DAG run whose runs were all "
             "contended is not compared. MXNet build: the version the trainer reported, which is what ran "
             "whatever was asked for; runtime: the interpreter or image each run used."]
    intro = ([scope] if scope else []) + intro
    if history.empty:
        return render_page(title, [], [("Throughput by variant and MXNet build", "No runs are stored yet.")], [],
                           intro=intro)
    history = with_build(history).assign(when=lambda h: pd.to_datetime(h["when"], utc=True))
    ok = history[(history["status"] == "ok") & history["samples_per_sec"].notna()]
    # each repeat's own build asked for; rows stored before the store kept it have their DAG run's
    ok = ok.assign(asked=ok["mxnet_asked"].astype(object).fillna(ok["mxnet_package"].astype(object)))
    ok = ok.assign(contended=flags(ok["contended"]) if "contended" in ok else False)
    per_run = ok.groupby(["variant", "launcher", "environment", "build", "run_id", "dag_id"], as_index=False,
                         dropna=False).agg(
        when=("when", "min"), samples_per_sec=("samples_per_sec", "median"), verdict=("verdict", "first"),
        runtime=("runtime", distinct), contended=("contended", "sum"))
    group = ["variant", "launcher", "environment", "build"]
    by_build = per_run.groupby(group, as_index=False, dropna=False).agg(
        dag_runs=("run_id", "nunique"), median=("samples_per_sec", "median"), low=("samples_per_sec", "min"),
        high=("samples_per_sec", "max"), last=("when", "max"),
        regressions=("verdict", lambda v: int((v == "regression").sum())),
        contended=("contended", lambda c: int((c > 0).sum())))
    by_build = by_build.merge(ok.groupby(group, as_index=False, dropna=False).agg(
        asked=("asked", distinct), runtime=("runtime", distinct)), on=group, how="left")
    by_build = pd.DataFrame({
        "variant": by_build["variant"], "launcher": by_build["launcher"], "machine": by_build["environment"],
        "MXNet build": by_build["build"], "asked for": by_build["asked"], "runtime": by_build["runtime"],
        "DAG runs": by_build["dag_runs"],
        "samples/s (median of runs) [min–max]": [f"{fmt(m)} [{fmt(lo)}–{fmt(hi)}]" for m, lo, hi in
                                                 zip(by_build["median"], by_build["low"], by_build["high"])],
        "last run": by_build["last"].dt.strftime("%Y-%m-%d %H:%M"), "regressions": by_build["regressions"],
        "contended DAG runs": by_build["contended"]})
    flagged = per_run[per_run["verdict"] == "regression"].sort_values("when")
    flagged = pd.DataFrame({"when": flagged["when"].dt.strftime("%Y-%m-%d %H:%M"), "DAG": flagged["dag_id"],
                            "DAG run": flagged["run_id"], "variant": flagged["variant"],
                            "launcher": flagged["launcher"], "machine": flagged["environment"],
                            "MXNet build": flagged["build"], "runtime": flagged["runtime"],
                            "samples/s (median)": flagged["samples_per_sec"].map(fmt),
                            # other work on the hosts: a reader weighs the alert by it
                            "contended runs": flagged["contended"].astype(int)})
    flagged = with_triage(flagged, alerts)
    flagged = flagged.assign(machine=named_machines(flagged["machine"], names or {}))
    png = io.BytesIO()
    plot_history(history, png, alerts, names)
    forms = bool(form_token) and not flagged.empty and flagged["DAG"].isin(list(editable)).any()
    by_build = by_build.assign(machine=named_machines(by_build["machine"], names or {}))
    sections = [builds_section(history, names),
                ("Throughput by variant and MXNet build", by_build),
                ("Regressions flagged (red rings in the plot)", TRIAGE_TABLE if forms else flagged),
                (STEP_FINDER, named_steps(step_table(history), names or {}))]
    sections[1:1] = scaling_by_build(history, sizes, names or {})
    if backfills is not None:
        sections.append((BACKFILLS, backfills))
    page = render_page(title, [], sections, [("Throughput history by MXNet build", png.getvalue())], intro=intro)
    return page.replace(f"<p>{TRIAGE_TABLE}</p>", triage_table(flagged, editable, form_token), 1) if forms else page


def named_steps(steps: pd.DataFrame, names: dict) -> pd.DataFrame:
    """The step finder's machines by name, the fingerprint a hover away."""
    return steps.assign(machine=named_machines(steps["machine"], names)) if not steps.empty else steps


def builds_section(history: pd.DataFrame, names: Optional[dict]) -> tuple:
    """The history page's builds view (``report.builds_view``): a bisect's probes measure old builds on
    purpose and are left out."""
    from mxbench.report.builds_view import BUILDS_VIEW, builds_table, builds_view, manifest_or_none
    from mxbench.store import PROBE_DAG_IDS

    judged = history[~history["dag_id"].isin(PROBE_DAG_IDS)] if "dag_id" in history else history
    return (f"{BUILDS_VIEW} (per series; contended repeats left out and counted)",
            builds_table(builds_view(judged, manifest_or_none(), names)))


def scaling_by_build(history: pd.DataFrame, sizes: Optional[pd.DataFrame], names: dict) -> list:
    """The history page's section of measured scaling efficiency and cost by MXNet build; none
    without sizes or where no model was measured at more than one device count."""
    from mxbench.report.scaling_tables import BUILD_TABLE, build_table, prices_or_why
    from mxbench.results.stored import efficiency_by_build, sized

    if sizes is None or sizes.empty:
        return []
    efficiency = efficiency_by_build(sized(history, sizes))
    if efficiency.empty:
        return []
    prices, why = prices_or_why()
    heading = (f"{BUILD_TABLE} (efficiency: the median speed / (devices x the same build's 1-device median "
               "speed, same launcher and machine), measured, not the scaling model's; cost from MXBENCH_PRICES"
               + (f". {why}" if why else "") + ")")
    table = build_table(efficiency, prices)
    return [(heading, table.assign(machine=named_machines(table["machine"], names)))]


def with_triage(flagged: pd.DataFrame, alerts: Optional[pd.DataFrame]) -> pd.DataFrame:
    """The flagged regressions with their triage state, who set it and why (an alert nobody
    triaged: new); ``machine`` "" where a run had no machine, as the store keys it."""
    from mxbench.regression.triage import NEW
    from mxbench.store.alerts import ALERT_COLUMNS, machine_key

    flagged = flagged.assign(machine=flagged["machine"].map(machine_key).astype(object))
    alerts = alerts if alerts is not None else pd.DataFrame(columns=ALERT_COLUMNS)
    alerts = alerts.rename(columns={"dag_id": "DAG", "run_id": "DAG run", "environment": "machine",
                                    "changed_by": "set by", "reason": "why"})[
        ["DAG", "DAG run", "variant", "launcher", "machine", "state", "set by", "why"]]
    merged = flagged.merge(alerts.astype(object), on=["DAG", "DAG run", "variant", "launcher", "machine"],
                           how="left")
    return merged.assign(state=merged["state"].fillna(NEW), **{"set by": merged["set by"].fillna(""),
                                                               "why": merged["why"].fillna("")})
