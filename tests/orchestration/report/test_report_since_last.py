"""What changed since last time (issue 33 §4): right after the answer, each series beside the
previous DAG run of the same DAG and setup, read from a planted results store at report time, with
the change and its 95% interval (the launcher verdict's statistics), the regression baseline's
change where the check ran, and a link to each DAG run's report; "no earlier DAG run of this
setup" when there is none; why, when the store cannot be read. The rows are a table in the DAG run
folder, so a report rebuilt without the store shows them again."""
import json
from datetime import timedelta

import pandas as pd
import pytest

from mxbench import report, store
from mxbench.report import links
from mxbench.run_folder import DagRunFolder
from mxbench.stages import pipeline
from mxbench.stages.since_last import NO_PREVIOUS, since_last
from mxbench.stats.verdict import compare
from support.stored_runs import T0, make_dag_dir, ok_runs, variant

DAG = "mxbench_benchmark"
BEFORE = (100.0, 101.0, 99.0, 100.5)
NOW = (94.0, 95.0, 93.5, 94.5)


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'results.db'}"


def folder(tmp_path, name, speeds, started, run_id, v=None, dag_id=DAG, params=None, contended=None):
    dag_dir = make_dag_dir(tmp_path, name, ok_runs(v=v, speeds=speeds), started=started, run_id=run_id,
                           params=params, contended=contended)
    request = json.loads((dag_dir / "request.json").read_text())
    (dag_dir / "request.json").write_text(json.dumps({**request, "dag_id": dag_id}))
    return dag_dir


def stored(url, dag_dir, run_id, dag_id=DAG):
    store.record_dag_run(url, DagRunFolder(dag_dir), dag_id=dag_id, run_id=run_id, trigger="manual")


def test_the_section_shows_the_previous_run_of_the_setup_its_change_interval_and_link(tmp_path, url):
    stored(url, folder(tmp_path, "first", (80.0,) * 4, T0, "manual__first"), "manual__first")
    stored(url, folder(tmp_path, "previous", BEFORE, T0 + timedelta(days=1), "manual__prev:1"), "manual__prev:1")
    # another DAG's and another setup's (an epochs override) later runs are never "last time"
    stored(url, folder(tmp_path, "regression", (50.0,) * 4, T0 + timedelta(days=2), "scheduled__x",
                       dag_id="mxbench_regression"), "scheduled__x", dag_id="mxbench_regression")
    stored(url, folder(tmp_path, "deeper", (40.0,) * 4, T0 + timedelta(days=2), "manual__deep",
                       params={"preset": "cpu-demo", "repeats": 2, "epochs": 9},
                       v={**variant(), "epochs": 9}), "manual__deep")
    now = folder(tmp_path, "now", NOW, T0 + timedelta(days=3), "manual__now")
    table = since_last(DagRunFolder(now), url, DAG, "manual__now")  # before its store task: not stored yet
    (row,) = table.to_dict("records")
    expected = compare(NOW, BEFORE)
    assert row["previous_run_id"] == "manual__prev:1" and row["previous_dag_id"] == DAG
    assert row["change"] == pytest.approx(expected.ratio - 1)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((expected.ci_low - 1, expected.ci_high - 1))
    assert row["ci_high"] < 0 and row["outcome"] == expected.outcome
    assert row["n"] == row["previous_n"] == 4 and row["machine_class"].startswith("cpu: AMD EPYC")
    pipeline.join(DagRunFolder(now))
    report.build_report(DagRunFolder(now))
    md = (now / "report" / "report.md").read_text()
    section = md.split("## Since last time\n\n", 1)[1].split("\n## ", 1)[0]
    assert md.index("## Answer") < md.index("## Since last time") < md.index("## Conditions")
    (line,) = [line for line in section.splitlines() if line.startswith("| cpu2-bs32 (local)")]
    assert "manual__prev:1" in line and f"{expected.ratio - 1:+.1%} [{expected.ci_low - 1:+.1%}," in line
    page = (now / "report" / "report.html").read_text()
    block = page.split("<section id='since-last'", 1)[1].split("</section>", 1)[0]
    assert page.index("id='answer'") < page.index("id='since-last'") < page.index("class='conditions'")
    assert "href='../../report/mxbench_benchmark/manual__prev%3A1'" in block
    # rebuilt from the folder alone: the store is gone, the section is not
    (tmp_path / "results.db").unlink()
    report.build_report(DagRunFolder(now))
    assert "manual__prev:1" in (now / "report" / "report.md").read_text().split("## Since last time", 1)[1]


def test_no_earlier_dag_run_of_this_setup_says_so(tmp_path, url):
    stored(url, folder(tmp_path, "other", BEFORE, T0, "manual__other", v=variant("cpu1-bs32", workers=1)),
           "manual__other")
    now = folder(tmp_path, "now", NOW, T0 + timedelta(days=1), "manual__now")
    stored(url, now, "manual__now")  # stored first: itself is not its own last time
    (row,) = since_last(DagRunFolder(now), url, DAG, "manual__now").to_dict("records")
    assert row["note"] == NO_PREVIOUS and pd.isna(row["previous_run_id"])
    report.build_report(DagRunFolder(now))
    assert NO_PREVIOUS in (now / "report" / "report.md").read_text().split("## Since last time", 1)[1]


def test_an_unreachable_store_says_why_without_its_password_and_fails_nothing(tmp_path):
    now = folder(tmp_path, "now", NOW, T0, "manual__now")
    down = "postgresql+psycopg2://mxbench:s3cret-pw@127.0.0.1:1/results"
    (row,) = since_last(DagRunFolder(now), down, DAG, "manual__now").to_dict("records")
    assert row["note"].startswith("not shown: the results store could not be read (")
    assert "s3cret-pw" not in row["note"]
    report.build_report(DagRunFolder(now))
    section = (now / "report" / "report.md").read_text().split("## Since last time", 1)[1].split("\n## ", 1)[0]
    assert "not shown: the results store could not be read" in section and "s3cret-pw" not in section
    named = since_last(DagRunFolder(now), "", DAG, "manual__now",
                       unreadable="the results connection could not be read (x)")
    assert named["note"].tolist() == ["not shown: the results connection could not be read (x)"]


def test_the_regression_baseline_change_and_its_newest_dag_run_are_shown(tmp_path, url, monkeypatch):
    nightly = "mxbench_regression"
    monkeypatch.delenv("MXBENCH_BASELINE_DAGS", raising=False)
    for day in (1, 2):
        run_id = f"scheduled__2026-01-0{day}"
        stored(url, folder(tmp_path, run_id, BEFORE, T0 + timedelta(days=day), run_id, dag_id=nightly), run_id,
               dag_id=nightly)
    now = folder(tmp_path, "now", NOW, T0 + timedelta(days=3), "scheduled__2026-01-03", dag_id=nightly)
    stored(url, now, "scheduled__2026-01-03", dag_id=nightly)
    pd.DataFrame([{"variant": "cpu2-bs32", "launcher": "local", "status": "regression", "change": -0.06,
                   "ci_low": -0.08, "ci_high": -0.04, "baseline_runs": "scheduled__2026-01-01 scheduled__2026-01-02",
                   "message": "slower"}]).to_csv(now / "tables" / "regression.csv", index=False)
    (row,) = since_last(DagRunFolder(now), url, nightly, "scheduled__2026-01-03").to_dict("records")
    assert row["previous_run_id"] == "scheduled__2026-01-02"
    assert (row["baseline_status"], row["baseline_change"], row["baseline_runs"]) == ("regression", -0.06, 2)
    assert (row["baseline_dag_id"], row["baseline_run_id"]) == (nightly, "scheduled__2026-01-02")
    report.build_report(DagRunFolder(now))
    md = (now / "report" / "report.md").read_text().split("## Since last time", 1)[1].split("\n## ", 1)[0]
    assert "-6.0% [-8.0%, -4.0%], regression (2 DAG runs; newest scheduled__2026-01-02)" in md
    page = (now / "report" / "report.html").read_text()
    assert page.count("href='../../report/mxbench_regression/scheduled__2026-01-02'") == 2


def test_report_links_quote_every_id_whole():
    assert links.report_href("d", "a/b?c#d e") == "../../report/d/a%2Fb%3Fc%23d%20e"
    assert links.report_href("d", "javascript:x").startswith("../../")


def test_a_bisects_probe_is_not_compared_and_says_why(tmp_path, url):
    probe = folder(tmp_path, "probe", NOW, T0, "probe__1", dag_id="mxbench_bisect")
    (row,) = since_last(DagRunFolder(probe), url, "mxbench_bisect", "probe__1").to_dict("records")
    assert row["note"].startswith("not compared: a bisect's DAG runs") and pd.isna(row["previous_run_id"])


QUIET_BEFORE = (100.0, 101.0, 99.0, 100.5, 99.5, 100.2)


def test_a_busy_dag_run_after_a_quiet_one_calls_nothing_slower_from_its_contended_runs(tmp_path, url):
    """Three of nine runs slowed 20% by a busy loop beside them (contended): left out and counted,
    and the quiet six are no slower than last time; the previous DAG run's contended repeats are
    left out too and counted."""
    stored(url, folder(tmp_path, "previous", QUIET_BEFORE + (70.0, 71.0), T0, "manual__prev",
                       contended=(7, 8)), "manual__prev")
    busy = (80.0, 79.0, 81.0, 80.5, 100.1, 99.9, 100.6, 99.4, 100.3)
    now = folder(tmp_path, "now", busy, T0 + timedelta(days=1), "manual__now", contended=(1, 2, 3, 4))
    (row,) = since_last(DagRunFolder(now), url, DAG, "manual__now").to_dict("records")
    assert row["previous_run_id"] == "manual__prev" and row["n"] == 5 and row["previous_n"] == 6
    assert row["outcome"] != "slower" and abs(row["change"]) < 0.01
    assert row["note"] == ("4 contended runs of this DAG run left out (other work on their hosts); "
                           "2 contended runs of the previous left out (other work on their hosts)")
    pipeline.join(DagRunFolder(now))
    report.build_report(DagRunFolder(now))
    section = (now / "report" / "report.md").read_text().split("## Since last time\n\n", 1)[1].split("\n## ", 1)[0]
    assert "4 contended runs of this DAG run left out" in section


def test_a_series_whose_runs_were_all_contended_is_not_compared_and_says_so(tmp_path, url):
    stored(url, folder(tmp_path, "previous", QUIET_BEFORE, T0, "manual__prev", contended=()), "manual__prev")
    now = folder(tmp_path, "now", (80.0, 79.0, 81.0, 80.5), T0 + timedelta(days=1), "manual__now",
                 contended=(1, 2, 3, 4))
    (row,) = since_last(DagRunFolder(now), url, DAG, "manual__now").to_dict("records")
    assert row["note"] == ("contended: not compared: 4 contended runs of this DAG run left out (other work on "
                           "their hosts)")
    assert pd.isna(row["change"]) and pd.isna(row["outcome"])
