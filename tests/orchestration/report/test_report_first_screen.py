"""The report's first screen answers: a forest plot with one row per variant and launcher pair, a
short verdict label and one line of why, tags for the conditions that bear on each line, a title
people can say, only plots that carry information; in headless Chromium at 1366x768 the answer
lies within the first screen, above the conditions box, and axe-core finds no serious or critical
accessibility violation."""
import json
import math
import re

import pandas as pd
import pytest

from mxbench import report
from mxbench.report import answer, notes
from mxbench.run_folder import DagRunFolder
from mxbench.stages import pipeline
from support.stored_runs import make_dag_dir, ok_runs, variant

HASH = re.compile(r"[0-9a-f]{16,}")


def ratio_row(**columns):
    row = {"variant": "cpu2h-bs64", "launcher": "kubernetes", "reference": "ssh", "ratio": 0.947, "ci_low": 0.921,
           "ci_high": 0.974, "level": 0.95, "p_value": 0.031, "alpha": 0.05, "n": 6, "n_reference": 6,
           "min_detectable": 0.03, "outcome": "slower", "analysis": "paired, 6 rounds", "verdict": "…"}
    return {**row, **columns}


OUTCOMES = {"slower": "slower", "faster": "faster", "within the band": "within the band", "can't tell": "can't tell",
            "borderline": answer.NOT_SETTLED, "too few repeats": answer.NOT_SETTLED,
            "undecidable at this n": answer.NOT_SETTLED}


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_each_outcome_reads_as_one_of_five_labels_with_its_reason(outcome):
    ratio = 1.06 if outcome == "faster" else 0.947
    band = {"target_gap": 0.15, "tost_low": 0.9, "tost_high": 1.1 if outcome == "within the band" else 1.2,
            "rounds_to_resolve": 11}
    (row,) = answer.answer_rows(pd.DataFrame([ratio_row(outcome=outcome, ratio=ratio, **band)]), lambda pair: [])
    assert row.label == OUTCOMES[outcome] and row.pair == "kubernetes / ssh"
    assert row.why.endswith("(6 rounds paired)") and "p = 0.031" in row.why
    if outcome in ("slower", "faster"):
        assert "interval excludes 100%" in row.why
    elif outcome == "within the band":
        assert "the 90% interval [90.0%, 110.0%] inside the ±15% band" in row.why
        assert answer.COLOURS[row.label] == "#009E73"  # the one green label
    elif outcome == "can't tell":
        assert "the 90% interval [90.0%, 120.0%] runs past the ±15% band" in row.why
        assert "a gap of 3.0% or more would have shown; about 11 rounds would resolve it" in row.why
        assert answer.COLOURS[row.label] != answer.COLOURS["within the band"]  # grey, not green
    else:
        assert "more rounds" in row.why or "could reach" in row.why


def test_the_forest_plot_has_one_row_per_pair_with_its_verdicts_shape():
    rows = answer.answer_rows(pd.DataFrame([
        ratio_row(), ratio_row(reference="local", ratio=1.08, ci_low=1.03, ci_high=1.13, outcome="faster"),
        ratio_row(variant="cpu1-bs64", ratio=0.99, ci_low=0.9, ci_high=1.1, outcome="can't tell",
                  min_detectable=float("nan")),
        ratio_row(variant="cpu1-bs32", ratio=1.0, ci_low=0.98, ci_high=1.02, outcome="within the band")]),
        lambda pair: ["shared cores"])
    svg = answer.forest_svg(rows, target_gap=0.05)
    found = re.findall(r"<g class='forest-row' data-variant='([^']+)' data-pair='([^']+)' data-verdict='([^']+)'>",
                       svg)
    assert found == [("cpu2h-bs64", "kubernetes / ssh", "slower"), ("cpu2h-bs64", "kubernetes / local", "faster"),
                     ("cpu1-bs64", "kubernetes / ssh", "can&#x27;t tell"),
                     ("cpu1-bs32", "kubernetes / ssh", "within the band")]
    # shapes, not colour alone: the band is one rect, "can't tell" a hollow square, "within the band" a dot
    assert svg.count("<polygon") == 2 and svg.count("<circle") == 1 and svg.count("<rect") == 2
    assert "target band ±5%" in svg and "<title id='forest-title'>" in svg and "role='img'" in svg
    # the detectable gap's ticks: two for each row that has one
    assert svg.count("stroke='#888'") == 6


def test_an_interval_beyond_the_axis_is_cut_at_its_edge():
    rows = answer.answer_rows(pd.DataFrame([ratio_row(ci_low=0.05, ci_high=9.0)]), lambda pair: [])
    lo, hi = answer.axis_limits(rows, 0.05)
    assert 0.1 < lo < 0.25 and 2.5 < hi < 2.7  # 25%..250%, and a margin
    assert all(lo <= tick <= hi for tick in answer.ticks(lo, hi)) and 4 <= len(answer.ticks(lo, hi)) <= 10


@pytest.fixture
def three_launchers(tmp_path):
    runs = [(variant("cpu2h-bs64"), launcher, r, "ok", speed * (1 + 0.01 * r), None)
            for r in range(1, 4) for launcher, speed in (("local", 100.0), ("ssh", 97.0), ("kubernetes", 93.0))]
    dag_dir = make_dag_dir(tmp_path, "mxbench_benchmark.manual__2026-12-04T20_21_41-" + "ab" * 32, runs,
                           run_id="manual__2026-12-04T20:21:41+00:00")
    request = json.loads((dag_dir / "request.json").read_text())
    request.update(dag_id="mxbench_benchmark", run_id="manual__2026-12-04T20:21:41+00:00", targets={
        "local": {"hosts": 1, "gpus_per_host": 0, "one_machine": True, "notes": []},
        "ssh": {"hosts": 2, "gpus_per_host": 0, "on_this_machine": True, "notes": ["the hosts are this machine"]},
        "kubernetes": {"hosts": 2, "gpus_per_host": 0, "stand_in": True, "on_this_machine": True,
                       "notes": ["the Kubernetes cluster is the local Kubernetes stand-in (…): its gap is the "
                                 "launch path's"]}})
    request["params"].update(preset="cpu-demo", target_gap=0.1)
    (dag_dir / "request.json").write_text(json.dumps(request))
    (dag_dir / "data.json").write_text(json.dumps({"synthetic": True, "source": "generated",
                                                   "records": {"train": 100}}))
    pipeline.join(DagRunFolder(dag_dir))
    report.build_report(DagRunFolder(dag_dir))
    return dag_dir


def test_the_title_says_the_dag_when_and_what_and_the_ids_are_in_the_details(three_launchers):
    md = (three_launchers / "report" / "report.md").read_text()
    title = md.splitlines()[0]
    assert title.startswith("# mxbench_benchmark · ") and title.endswith(" UTC · cpu-demo: cpu2h-bs64")
    assert not HASH.search(title)
    details = md.split("## Run details\n\n", 1)[1]
    assert "- DAG run: manual__2026-12-04T20:21:41+00:00" in details and three_launchers.name in details


def test_the_answer_comes_before_any_condition_and_carries_its_tags(three_launchers):
    md = (three_launchers / "report" / "report.md").read_text()
    answer_at, conditions_at = md.index("## Answer"), md.index("## Conditions\n")
    assert answer_at < conditions_at
    for condition in notes.conditions(DagRunFolder(three_launchers)):
        assert md.index(condition.short) > conditions_at and md.index(condition.detail) > conditions_at
    ratios = pd.read_csv(three_launchers / "tables" / "ratios.csv")
    rows = [line for line in md[answer_at:conditions_at].splitlines() if line.startswith("| cpu2h-bs64 |")]
    assert len(rows) == len(ratios) == 3
    tagged = {line.split(" | ")[1]: line.split(" | ")[-1].rstrip(" |") for line in rows}
    assert tagged["ssh / local"] == "synthetic data, shared cores, CPU only"
    assert tagged["kubernetes / ssh"] == "synthetic data, stand-in cluster, shared cores, CPU only"
    svg = (three_launchers / "report" / report.FOREST).read_text()
    assert svg.count("class='forest-row'") == 3 and "target band ±10%" in svg


def test_only_plots_that_carry_information_are_drawn(three_launchers):
    out = three_launchers / "report"
    # one device count: no scaling curve; synthetic data: no accuracy curve; every run in order: yes
    assert not (out / "scaling.png").exists() and not (out / "accuracy.png").exists()
    assert (out / "run_order.png").stat().st_size > 5_000 and (out / "epoch_time.png").exists()
    md = (out / "report.md").read_text()
    assert "scaling.png" not in md and "![Every run's speed in the order it ran" in md
    order = md.split("## Every run in the order it ran\n\n", 1)[1].split("\n## ", 1)[0]
    assert len([line for line in order.splitlines() if line.startswith("| cpu2h-bs64__")]) == 9


def test_one_run_series_has_no_scaling_curve_two_device_counts_have(tmp_path):
    one = make_dag_dir(tmp_path, "one", ok_runs())
    two = make_dag_dir(tmp_path, "two", ok_runs() + ok_runs(v=variant("cpu1-bs32", workers=1)))
    for dag_dir in (one, two):
        pipeline.join(DagRunFolder(dag_dir))
        report.build_report(DagRunFolder(dag_dir))
    assert not (one / "report" / "scaling.png").exists() and (two / "report" / "scaling.png").exists()


@pytest.mark.slow  # headless Chromium
def test_at_1366x768_the_answer_is_the_first_screen_and_the_page_passes_axe(three_launchers):
    from support.browser import axe_violations, chromium, layout, screenshot

    with chromium() as browser:
        browser.get((three_launchers / "report" / "report.html").as_uri())
        seen = layout(browser)
        assert seen["viewport"] == 768
        assert seen["answer"]["bottom"] <= 768, seen  # within the first screen
        assert seen["answer"]["bottom"] <= seen["conditions"]["top"], seen  # above the conditions box
        assert len(seen["rows"]) == 3 and not HASH.search(seen["title"])
        assert axe_violations(browser) == []
        screenshot(browser, "report-first-screen.png")


def test_contended_runs_are_one_condition_line_and_marked_in_the_run_order(tmp_path):
    """Interference measured on the hosts (``results.contention``): the conditions box names the
    contended runs and why; the run-order table says it of each; the plot is drawn with them ringed."""
    dag_dir = make_dag_dir(tmp_path, "busy", ok_runs(speeds=(100.0, 60.0, 101.0)))
    runs_csv = dag_dir / "tables" / "runs.csv"
    runs = pd.read_csv(runs_csv)
    runs["contended"] = [False, True, False]
    runs["contention"] = [None, "other processes used 0.93 cores", None]
    runs.to_csv(runs_csv, index=False)
    out = report.build_report(DagRunFolder(dag_dir))
    md = (dag_dir / "report" / "report.md").read_text()
    (line,) = [c for c in notes.conditions(DagRunFolder(dag_dir)) if c.short.startswith("Contended")]
    assert line.short == "Contended: 1 of 3 runs had other work on their hosts"
    assert "cpu2-bs32__local__r2 (other processes used 0.93 cores)" in line.detail
    assert md.index("Contended: 1 of 3 runs") < md.index("## Every run in the order it ran")
    order = md.split("## Every run in the order it ran\n\n", 1)[1].split("\n## ", 1)[0]
    (busy,) = [row for row in order.splitlines() if "__r2 " in row]
    assert "other processes used 0.93 cores" in busy
    assert (dag_dir / "report" / "run_order.png").is_file() and out


def test_the_conditions_say_what_contended_means_and_how_the_quiet_check_went(tmp_path):
    """The thresholds the runs were judged with (here the hardware's own, from A/A runs) and the quiet
    check before each run: how many started on quiet hosts, the waiting, which went on busy and why."""
    from mxbench.results import contention
    from mxbench.run_folder import write_json

    dag_dir = make_dag_dir(tmp_path, "checked", ok_runs(speeds=(100.0, 99.0, 101.0)),
                           params={"preset": "cpu-demo", "repeats": 3, "quiet_wait_s": 60})
    own = str(contention.Thresholds(0.06, 0.01, "from 9 A/A runs on this hardware (1 calibration)"))
    runs_csv = dag_dir / "tables" / "runs.csv"
    runs = pd.read_csv(runs_csv).assign(contended=False, contention_thresholds=own, quiet=[True, True, False],
                                        quiet_wait_s=[2.0, 14.0, 60.5])
    runs.to_csv(runs_csv, index=False)
    busy_key = runs["key"].iloc[2]
    why = "not quiet after 60 s (the bound is 60 s), the run went on: box: other processes used 1.02 cores"
    write_json(dag_dir / busy_key / "meta.json", {"quiet": {"quiet": False, "why": why}})
    lines = {c.short.split(":")[0]: c for c in notes.conditions(DagRunFolder(dag_dir))}
    assert lines["Contended means"].detail == f"Contended means: {own}."
    checked = lines["Quiet check"]
    assert checked.short == "Quiet check: 2 of 3 checked runs started on quiet hosts, after 76 s of waiting in all; " \
                            "1 went on busy"
    assert f"{busy_key}: {why}" in checked.detail and "or 60 s (quiet_wait_s) had passed" in checked.detail
    # under the defaults, with nothing contended and nothing checked, neither line
    pd.read_csv(runs_csv).assign(contention_thresholds=str(contention.DEFAULTS), quiet=None).to_csv(
        runs_csv, index=False)
    shown = {c.short.split(":")[0] for c in notes.conditions(DagRunFolder(dag_dir))}
    assert not {"Contended means", "Quiet check"} & shown


# per-round log ratios ssh/local: a tight variant (its 90% interval well inside ±10%) and a wide one (its
# interval runs past ±10%, and no difference is called either)
TIGHT = [0.004, -0.003, 0.002, -0.004, 0.001, 0.0]
WIDE = [0.2, -0.15, 0.12, -0.18, 0.06, -0.03]


@pytest.fixture
def banded(tmp_path):
    runs = []
    for name, ratios in (("cpu1-bs64", TIGHT), ("cpu2h-bs64", WIDE)):
        v = variant(name)
        for r, d in enumerate(ratios, start=1):  # counterbalanced rounds, back to back (make_dag_dir's order)
            legs = [("local", 100.0), ("ssh", 100.0 * math.exp(d))]
            runs += [(v, launcher, r, "ok", speed, None) for launcher, speed in (legs if r % 2 else legs[::-1])]
    dag_dir = make_dag_dir(tmp_path, "banded", runs)
    request = json.loads((dag_dir / "request.json").read_text())
    request["params"].update(target_gap=0.1)
    (dag_dir / "request.json").write_text(json.dumps(request))
    pipeline.join(DagRunFolder(dag_dir))
    report.build_report(DagRunFolder(dag_dir))
    return dag_dir


def test_only_a_line_shown_inside_the_band_reads_within_the_band_everywhere(banded):
    """The issue's demo: a line whose interval runs past the band read green "within noise"; now it
    reads "can't tell" (grey) in the answer rows, report.md and report.html, with what would resolve it."""
    ratios = pd.read_csv(banded / "tables" / "ratios.csv").set_index("variant")
    assert ratios.loc["cpu1-bs64", "outcome"] == "within the band"
    assert ratios.loc["cpu2h-bs64", "outcome"] == "can't tell"
    assert ratios.loc["cpu2h-bs64", "tost_high"] > 1.1 and ratios.loc["cpu1-bs64", "tost_high"] < 1.1
    rows = {r.variant: r for r in answer.answer_rows(ratios.reset_index(), lambda pair: [])}
    assert rows["cpu1-bs64"].label == "within the band" and rows["cpu2h-bs64"].label == "can't tell"
    assert "would resolve it" in rows["cpu2h-bs64"].why
    md = (banded / "report" / "report.md").read_text()
    answer_part = md[md.index("## Answer"):md.index("## Conditions\n")]
    (tight,) = [line for line in answer_part.splitlines() if line.startswith("| cpu1-bs64 |")]
    (wide,) = [line for line in answer_part.splitlines() if line.startswith("| cpu2h-bs64 |")]
    assert " | within the band | " in tight and " | can't tell | " in wide and "within the band" not in wide
    assert "within noise" not in md
    page = (banded / "report" / "report.html").read_text()
    assert "within noise" not in page
    svg = page[page.index("<svg xmlns='http://www.w3.org/2000/svg' class='forest'"):]
    svg = svg[:svg.index("</svg>")]
    verdicts = dict(re.findall(r"data-variant='([^']+)' data-pair='[^']+' data-verdict='([^']+)'", svg))
    assert verdicts == {"cpu1-bs64": "within the band", "cpu2h-bs64": "can&#x27;t tell"}
    wide_row = svg[svg.index("data-variant='cpu2h-bs64'"):]
    assert answer.COLOURS["within the band"] not in wide_row[:wide_row.index("</g>")]  # not green


def test_the_conditions_say_which_pod_network_the_pods_read_they_ran_on(tmp_path):
    """The Kubernetes runs' pods read their own network (namespace, interfaces' drivers and MTUs);
    the launcher records one line per run (kubernetes.json), the conditions box names each reading
    with its variants: the pod network over the overlay, the node's stack for hostNetwork."""
    from mxbench.run_folder import write_json

    pod_net, host_net = variant("cpu2h-bs64"), variant("cpu2h-bs64-hostnet")
    dag_dir = make_dag_dir(tmp_path, "pods", ok_runs(pod_net, ("kubernetes",)) + ok_runs(host_net, ("kubernetes",)))
    readings = {"cpu2h-bs64": "pod network: 5 network namespace(s), each with eth0 (veth, MTU 1450)",
                "cpu2h-bs64-hostnet": "host network: 2 network namespace(s), each with cni0 (bridge, MTU 1450), "
                                      "eth0 (veth, MTU 1500), flannel.1 (vxlan, MTU 1450)"}
    for v, line in readings.items():
        for r in (1, 2):
            write_json(dag_dir / f"{v}__kubernetes__r{r}" / "kubernetes.json", {"setup_s": 0.1, "pod_network": line})
    (line,) = [c for c in notes.conditions(DagRunFolder(dag_dir)) if c.short.startswith("Pod network")]
    assert line.short == "Pod network, as the pods read it: pod network (cpu2h-bs64); host network (cpu2h-bs64-hostnet)"
    assert line.detail == ("POD NETWORK, as the Kubernetes runs' pods read it (their network namespace, and each "
                           f"interface's driver and MTU, from inside the pod): cpu2h-bs64: {readings['cpu2h-bs64']}; "
                           f"cpu2h-bs64-hostnet: {readings['cpu2h-bs64-hostnet']}.")
