"""The report leads with the answer: per variant and launcher pair a short verdict (the forest plot
and its table), then one box of conditions, then the long verdict lines, the same in report.md and
report.html (which the UI serves); a condition true of several targets is one line; the history
plot's time axis spans its data."""
import html
import io
import json
import math
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest
from matplotlib.dates import date2num

from mxbench import report
from mxbench.report import notes, plots, provenance, verdict_lines
from mxbench.run_folder import DagRunFolder
from mxbench.stages import pipeline
from mxbench.stats import verdict
from support.stored_runs import make_dag_dir, ok_runs, variant

SLOWER = "kubernetes at 94.7% of ssh, 95% CI [92.1%, 97.4%], 6 rounds paired: slower, not explained by noise " \
         "(p = 0.031 < α = 0.05)"


def ratio_row(**columns):
    """One row of tables/ratios.csv as ``metrics.launcher_ratios`` writes it."""
    row = {"variant": "cpu2h-bs64", "launcher": "kubernetes", "reference": "ssh", "ratio": 0.947, "ci_low": 0.921,
           "ci_high": 0.974, "level": 0.95, "p_value": 0.031, "alpha": 0.05, "n": 6, "n_reference": 6,
           "min_detectable": 0.03, "outcome": "slower", "order": "interleaved, counterbalanced (...)",
           "analysis": "paired, 6 rounds", "verdict": SLOWER, "stopping": None}
    return {**row, **columns}


def test_a_paired_verdict_leads_with_the_ratio_interval_rounds_and_words():
    (line,) = verdict_lines(pd.DataFrame([ratio_row()]))
    assert line == ("cpu2h-bs64: kubernetes at 94.7% of ssh, 95% CI [92.1%, 97.4%], 6 rounds paired: slower, "
                    "not explained by noise (p = 0.031 < α = 0.05)")


def test_one_line_per_pair_faster_and_cant_tell_alike():
    faster = ratio_row(variant="cpu1-bs64", launcher="ssh", reference="local", ratio=1.052, ci_low=1.01,
                       ci_high=1.09, outcome="faster",
                       verdict="ssh at 105.2% of local, 95% CI [101.0%, 109.0%], 6 rounds paired: faster, not "
                               "explained by noise (p = 0.031 < α = 0.05)")
    noise = ratio_row(ratio=0.99, ci_low=0.96, ci_high=1.02, outcome="can't tell", p_value=0.56,
                      verdict="kubernetes at 99.0% of ssh, 95% CI [96.0%, 102.0%], 6 rounds paired: can't tell "
                              "(p = 0.562 ≥ α = 0.05; no target band to show equivalence by); a gap of 3.0% or "
                              "more would have been detected (80% power)")
    lines = verdict_lines(pd.DataFrame([faster, noise]))
    assert lines == [
        "cpu1-bs64: ssh at 105.2% of local, 95% CI [101.0%, 109.0%], 6 rounds paired: faster, not explained by "
        "noise (p = 0.031 < α = 0.05)",
        "cpu2h-bs64: kubernetes at 99.0% of ssh, 95% CI [96.0%, 102.0%], 6 rounds paired: can't tell "
        "(p = 0.562 ≥ α = 0.05; no target band to show equivalence by); a gap of 3.0% or more would have been "
        "detected (80% power)"]


def test_an_unpaired_verdict_says_so_and_why_with_the_repeats_of_each_side():
    row = ratio_row(n=4, n_reference=5, analysis="unpaired: runs overlapped in time",
                    verdict="kubernetes at 94.7% of ssh, 95% CI [92.1%, 97.4%], 4 vs 5 repeats: slower, not "
                            "explained by noise (p = 0.016 < α = 0.05)")
    (line,) = verdict_lines(pd.DataFrame([row]))
    assert line == ("cpu2h-bs64: kubernetes at 94.7% of ssh, 95% CI [92.1%, 97.4%], 4 vs 5 repeats unpaired (runs "
                    "overlapped in time): slower, not explained by noise (p = 0.016 < α = 0.05)")


def test_too_few_repeats_shows_no_interval():
    row = ratio_row(n=2, n_reference=2, ci_low=math.nan, ci_high=math.nan, p_value=math.nan,
                    outcome="too few repeats", analysis="unpaired: 2 rounds, fewer than the 6 a paired test needs",
                    verdict="kubernetes at 94.7% of ssh, 2 vs 2 repeats: too few repeats to tell (at least 3 a side)")
    (line,) = verdict_lines(pd.DataFrame([row]))
    assert line == ("cpu2h-bs64: kubernetes at 94.7% of ssh, 2 vs 2 repeats unpaired (2 rounds, fewer than the 6 "
                    "a paired test needs): too few repeats to tell (at least 3 a side)")


@pytest.mark.parametrize("stopping, ending", [
    ("stopped after 7 rounds: interval ±2.1% ≤ ±2.5% (target gap 5%)",
     "; stopped after 7 rounds: interval ±2.1% ≤ ±2.5% (target gap 5%)"),
    ("budget spent: a gap of 6.3% or more would have been detected",
     "; budget spent: a gap of 6.3% or more would have been detected"),
    (None, "(p = 0.031 < α = 0.05)"), (math.nan, "(p = 0.031 < α = 0.05)"), ("", "(p = 0.031 < α = 0.05)")])
def test_why_the_rounds_stopped_ends_the_line_where_the_table_says(stopping, ending, tmp_path):
    (tmp_path / "ratios.csv").write_text(pd.DataFrame([ratio_row(stopping=stopping)]).to_csv(index=False))
    (line,) = verdict_lines(pd.read_csv(tmp_path / "ratios.csv"))  # as the report reads it: NaN for empty
    assert line.endswith(ending) and line.count("; ") == (1 if ending.startswith("; ") else 0)


def test_a_table_from_before_the_analysis_and_stopping_columns_reads_as_the_unpaired_rule_it_used(tmp_path):
    old = pd.DataFrame([ratio_row(n=4, n_reference=4, verdict="kubernetes at 94.7% of ssh, 95% CI [92.1%, 97.4%], "
                                  "4 vs 4 repeats: slower, not explained by noise (p = 0.029 < α = 0.05)")])
    (tmp_path / "ratios.csv").write_text(old.drop(columns=["analysis", "stopping"]).to_csv(index=False))
    ratios = pd.read_csv(tmp_path / "ratios.csv")
    (line,) = verdict_lines(ratios)
    assert line == ("cpu2h-bs64: kubernetes at 94.7% of ssh, 95% CI [92.1%, 97.4%], 4 vs 4 repeats unpaired: "
                    "slower, not explained by noise (p = 0.029 < α = 0.05)")
    assert list(report.ratio_table(ratios)["analysis"]) == ["unpaired"]


@pytest.mark.parametrize("compare, analysis", [
    (lambda: verdict.compare([90, 91, 92, 93.0], [100, 101, 99, 100.5], "kubernetes", "ssh"),
     "unpaired: no start times to pair the runs by"),
    (lambda: verdict.compare_paired([(90, 100), (92, 101), (91, 99), (93, 100), (90.5, 98), (92, 100.5)],
                                    "kubernetes", "ssh"), None)])
def test_the_line_carries_the_verdicts_own_words_after_its_head(compare, analysis):
    """The line rebuilds the head (variant, analysis) and keeps what ``verdict`` said after it."""
    result = compare().to_dict()
    row = {"variant": "v", "launcher": "kubernetes", "reference": "ssh", **result,
           "analysis": analysis or result["analysis"]}
    (line,) = verdict_lines(pd.DataFrame([row]))
    head, words = result["verdict"].split(": ", 1)
    assert line.endswith(": " + words) and line.startswith("v: " + head.split(", ")[0])
    assert ("6 rounds paired" in line) if analysis is None else ("4 vs 4 repeats unpaired (no start times" in line)


# --- banners --------------------------------------------------------------------------------------

def request_with_targets(dag_dir, targets, hosts=1):
    request = json.loads((dag_dir / "request.json").read_text())
    request["targets"] = targets
    for run in request["runs"]:
        run["variant"]["hosts"] = hosts
    (dag_dir / "request.json").write_text(json.dumps(request))


def target(gpus=0, one_machine=False, notes=()):
    return {"hosts": 2, "gpus_per_host": gpus, "one_machine": one_machine, "notes": list(notes)}


def test_a_banner_true_of_several_targets_is_one_line_naming_them_all(tmp_path):
    dag_dir = make_dag_dir(tmp_path, "run", ok_runs(launchers=("local", "ssh", "kubernetes")))
    request_with_targets(dag_dir, {"local": target(one_machine=True), "ssh": target(one_machine=True),
                                   "kubernetes": target(notes=["the stand-in"])}, hosts=2)
    lines = provenance(DagRunFolder(dag_dir))
    no_gpu = [n for n in lines if n.startswith("No GPU")]
    assert no_gpu == ["No GPU on the local, ssh and kubernetes targets: training ran on the CPU; GPU columns are "
                      "n/a, and workers on one host share its cores, so scaling shows the host, not MXNet."]
    (one,) = [n for n in lines if n.startswith("ONE MACHINE")]
    assert one.startswith("ONE MACHINE: the local and ssh launchers ran multi-host variants on this one machine")
    assert "KUBERNETES TARGET: the stand-in" in lines
    assert len(lines) == len(set(lines))


def test_a_banner_names_only_the_targets_it_is_true_of(tmp_path):
    dag_dir = make_dag_dir(tmp_path, "run", ok_runs(launchers=("local", "ssh")))
    request_with_targets(dag_dir, {"local": target(one_machine=True), "ssh": target(gpus=8)}, hosts=2)
    lines = provenance(DagRunFolder(dag_dir))
    assert [n.split(":")[0] for n in lines if n.startswith(("No GPU", "ONE MACHINE"))] == [
        "ONE MACHINE", "No GPU on the local target"]
    assert any(n.startswith("ONE MACHINE: the local launcher ran multi-host variants") for n in lines)
    request_with_targets(dag_dir, {"local": target(gpus=1), "ssh": target(gpus=8)}, hosts=1)
    assert not [n for n in provenance(DagRunFolder(dag_dir)) if n.startswith(("No GPU", "ONE MACHINE"))]


def test_names_are_joined_as_a_sentence():
    assert [notes.join_names(n) for n in (["a"], ["a", "b"], ["a", "b", "c"])] == ["a", "a and b", "a, b and c"]


# --- the history plot's time axis --------------------------------------------------------------

def history(whens):
    return pd.DataFrame([{"when": when, "samples_per_sec": 100.0 + i, "build": "1.9.1", "environment": "box",
                          "variant": "cpu1-bs64", "launcher": "local", "dag_id": "mxbench_regression",
                          "run_id": f"r{i}", "verdict": "ok", "repeat": 1, "status": "ok"}
                         for i, when in enumerate(whens)])


@pytest.fixture
def figures(monkeypatch):
    kept = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: kept.append(fig))
    return kept


T = pd.Timestamp("2026-11-01 10:00", tz="UTC")


@pytest.mark.parametrize("whens", [[T], [T, T + pd.Timedelta(minutes=7)]], ids=["one run", "minutes apart"])
def test_one_run_or_runs_minutes_apart_sit_on_an_axis_of_hours_not_years(whens, figures):
    plots.plot_history(history(whens), io.BytesIO())
    (ax,) = figures[0].axes
    left, right = ax.get_xlim()
    assert right - left < 1  # days
    assert left < date2num(min(whens).to_pydatetime()) and date2num(max(whens).to_pydatetime()) < right


def test_the_axis_spans_months_of_runs_with_a_small_margin(figures):
    whens = [T + pd.Timedelta(days=d) for d in range(0, 100, 10)]
    plots.plot_history(history(whens), io.BytesIO())
    left, right = figures[0].axes[0].get_xlim()
    span = date2num(whens[-1].to_pydatetime()) - date2num(whens[0].to_pydatetime())
    assert span < right - left <= span * 1.1 + 1e-9


def tick_labels(figure):
    figure.draw_without_rendering()
    return [label.get_text() for label in figure.axes[0].get_xticklabels() if label.get_text()]


def test_the_date_axis_reads_the_dates_of_its_points(figures):
    """The backfill of docs/results-store.md (11-03..05) and the scheduled night a month later: every tick a whole
    date inside the span, the months of the points, no offset text naming another month."""
    nights = [pd.Timestamp(f"2026-11-0{d}", tz="UTC") for d in (3, 4, 5)]
    plots.plot_history(history(nights), io.BytesIO())
    labels = tick_labels(figures[-1])
    assert len(labels) >= 2 and all(label.startswith("2026-11-0") and len(label) == 10 for label in labels)
    assert figures[-1].axes[0].xaxis.get_major_formatter().get_offset() == ""
    plots.plot_history(history([*nights, pd.Timestamp("2026-12-06", tz="UTC")]), io.BytesIO())
    labels = tick_labels(figures[-1])
    assert len(labels) >= 2 and all("2026-11-03" <= label <= "2026-12-06" for label in labels)
    assert all(pd.Timestamp(label) for label in labels)  # each a date, whole
    plots.plot_history(history([T, T + pd.Timedelta(hours=5)]), io.BytesIO())
    assert all(label.startswith("2026-11-01 ") for label in tick_labels(figures[-1]))  # hours within a day


def test_each_point_has_its_spread_and_machines_and_builds_are_named(figures):
    rows = pd.concat([history([T, T + pd.Timedelta(days=1)]).assign(repeat=r, samples_per_sec=100.0 + 10 * r)
                      for r in (1, 2, 3)], ignore_index=True)
    rows.loc[rows["run_id"] == "r1", "build"] = "1.9.0"
    plots.plot_history(rows, io.BytesIO(), names={"box": "cpu: AMD EPYC 7B13 x2"})
    (ax,) = figures[-1].axes
    assert ax.get_title() == "cpu1-bs64 (local, cpu: AMD EPYC 7B13 x2)"
    (bars,) = [c for c in ax.collections if c.__class__.__name__ == "LineCollection"]
    assert [tuple(seg[:, 1]) for seg in bars.get_segments()] == [(110.0, 130.0), (110.0, 130.0)]  # min–max
    legend = [t.get_text() for t in figures[-1].legends[0].get_texts()]
    assert legend[:2] == ["MXNet 1.9.1", "MXNet 1.9.0"]


def test_time_limits_pad_the_span_by_at_least_an_hour():
    assert plots.time_limits(pd.Series([T])) == (T - pd.Timedelta(hours=1), T + pd.Timedelta(hours=1))
    far = pd.Series([T, T + pd.Timedelta(days=40)])
    assert plots.time_limits(far) == (T - pd.Timedelta(days=2), T + pd.Timedelta(days=42))
    assert plots.time_limits(pd.Series([], dtype="datetime64[ns, UTC]")) is None


def test_the_history_is_small_multiples_one_panel_per_series_with_triage_states(figures):
    """Four series, each on its own scale; a flagged DAG run a person acknowledged says so."""
    series = [history([T + pd.Timedelta(days=d) for d in range(5)]).assign(variant=v, launcher=launcher)
              for v in ("cpu1-bs64", "cpu2w-bs64") for launcher in ("local", "ssh")]
    rows = pd.concat(series, ignore_index=True)
    flagged = (rows["variant"] == "cpu2w-bs64") & (rows["launcher"] == "ssh") & (rows["run_id"] == "r4")
    rows.loc[flagged, ["verdict", "samples_per_sec"]] = ["regression", 50.0]
    alerts = pd.DataFrame([{"dag_id": "mxbench_regression", "run_id": "r4", "variant": "cpu2w-bs64",
                            "launcher": "ssh", "environment": "box", "state": "acknowledged"}])
    plots.plot_history(rows, io.BytesIO(), alerts)
    panels = [ax for ax in figures[0].axes if ax.get_visible()]
    assert sorted(ax.get_title() for ax in panels) == ["cpu1-bs64 (local)", "cpu1-bs64 (ssh)", "cpu2w-bs64 (local)",
                                                       "cpu2w-bs64 (ssh)"]
    (ringed,) = [ax for ax in panels if ax.get_title() == "cpu2w-bs64 (ssh)"]
    assert [t.get_text() for t in ringed.texts] == ["acknowledged"]
    assert all(not ax.texts for ax in panels if ax is not ringed)


def test_an_empty_history_still_draws(tmp_path):
    plots.plot_history(history([T]).iloc[:0], tmp_path / "history.png")
    assert (tmp_path / "history.png").read_bytes()[:4] == b"\x89PNG"


# --- the same lines in report.md and report.html -----------------------------------------------

class Page(HTMLParser):
    """The report page as a reader sees it: the banners, the items under each heading, and the
    conditions' short lines (each a <summary>, its sentence a click away)."""

    def __init__(self, page: str):
        super().__init__()
        self.banners, self.items, self.heading, self.inside, self.summaries = [], {}, None, None, []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        if tag == "div" and ("class", "note") in attrs:
            self.inside = "note"
            self.banners.append("")
        elif tag == "summary":
            self.inside = "summary"
            self.summaries.append("")
        elif tag in ("h2", "li"):
            self.inside = tag
            if tag == "h2":
                self.heading = ""
            else:
                self.items.setdefault(self.heading, []).append("")

    def handle_endtag(self, tag):
        if tag in ("div", "h2", "li", "summary"):
            self.inside = None

    def handle_data(self, data):
        if self.inside == "note":
            self.banners[-1] += data
        elif self.inside == "summary":
            self.summaries[-1] += data
        elif self.inside == "h2":
            self.heading += data
        elif self.inside == "li":
            self.items[self.heading][-1] += data


def markdown_section(md: str, heading: str) -> str:
    return md.split(f"## {heading}\n\n", 1)[1].split("\n## ", 1)[0]


def in_rounds(rounds=6, seed=3):
    """Runs of local and ssh in back-to-back rounds (ABBA), ssh about 5% slower: a paired verdict."""
    rng = np.random.default_rng(seed)
    v = variant("cpu2h-bs64")
    runs = []
    for r in range(1, rounds + 1):
        legs = [("local", 100.0), ("ssh", 95.0)]
        for launcher, speed in legs if r % 4 in (0, 1) else legs[::-1]:
            runs.append((v, launcher, r, "ok", float(speed * (1 + rng.normal(0, 0.005))), None))
    return runs


@pytest.fixture
def two_launchers(tmp_path):
    dag_dir = make_dag_dir(tmp_path, "run", in_rounds() + ok_runs(v=variant("cpu1-bs32", workers=1),
                                                                   launchers=("local", "ssh")))
    request_with_targets(dag_dir, {"local": target(one_machine=True), "ssh": target()})
    pipeline.join(DagRunFolder(dag_dir))
    ratios = pd.read_csv(dag_dir / "tables" / "ratios.csv")
    ratios["stopping"] = ["stopped after 6 rounds: interval ±0.4% ≤ ±2.5% (target gap 5%)", None]
    ratios.to_csv(dag_dir / "tables" / "ratios.csv", index=False)
    report.build_report(DagRunFolder(dag_dir))
    return dag_dir


def test_the_report_opens_with_the_answer_then_the_conditions_the_same_in_markdown_and_html(two_launchers):
    out = two_launchers / "report"
    md, page = (out / "report.md").read_text(), Page((out / "report.html").read_text())
    expected = verdict_lines(pd.read_csv(two_launchers / "tables" / "ratios.csv"))
    assert len(expected) == 3  # two pairs, then how the family of lines was controlled
    assert expected[2].startswith("Family: Holm over the report's 1 verdict line: each line's p is adjusted")
    assert expected[0].startswith("cpu2h-bs64: ssh at ") and "6 rounds paired: slower" in expected[0]
    assert expected[0].endswith("; stopped after 6 rounds: interval ±0.4% ≤ ±2.5% (target gap 5%)")
    assert expected[1].startswith("cpu1-bs32: ssh at ") and "2 vs 2 repeats unpaired (" in expected[1]
    assert markdown_section(md, "Verdicts") == "".join(f"- {line}\n" for line in expected)
    assert page.items["Verdicts"] == expected
    headings = [line[3:] for line in md.splitlines() if line.startswith("## ")]
    assert headings[:4] == ["Answer", "Conditions", "Verdicts", "Results"] and "Launcher speed ratio" in headings
    # the answer: one row per pair, a short label and its reason, before any condition
    answer = markdown_section(md, "Answer")
    assert answer.index("| cpu2h-bs64 | ssh / local | ") < answer.index("| cpu1-bs32 | ssh / local | ")
    assert "| slower | p " in answer and "(6 rounds paired)" in answer
    # the conditions: one short line each, once, the same words in both; no banner before the answer
    lines = [line[2:] for line in markdown_section(md, "Conditions").splitlines() if line.startswith("- ")]
    assert lines + ["Run details"] == page.summaries and not page.banners and len(lines) == len(set(lines))
    assert sum(line.startswith("No GPU on local and ssh") for line in lines) == 1
    assert all(len(line) <= notes.SHORT for line in lines)
    whole = (out / "report.html").read_text()
    for condition in notes.conditions(DagRunFolder(two_launchers)):  # the whole sentence a click away
        assert f"<summary>{html.escape(condition.short)}</summary>{html.escape(condition.detail)}" in whole


def test_one_launcher_says_there_is_no_verdict_once(tmp_path):
    dag_dir = make_dag_dir(tmp_path, "run", ok_runs(launchers=("local",)))
    pipeline.join(DagRunFolder(dag_dir))
    report.build_report(DagRunFolder(dag_dir))
    md = (dag_dir / "report" / "report.md").read_text()
    assert markdown_section(md, "Answer").endswith(report.NO_RATIO + "\n")
    assert md.count(report.NO_RATIO) == 1 and "## Launcher speed ratio" not in md and "## Verdicts" not in md
    assert "| cpu2-bs32 | local |" in markdown_section(md, "Answer")  # the answer is the throughput
    page = (dag_dir / "report" / "report.html").read_text()
    assert f"<h2 id='answer-heading'>Answer</h2><p>{report.NO_RATIO}</p>" in page
    assert page.count(report.NO_RATIO) == 1 and not (dag_dir / "report" / report.FOREST).exists()
