"""What changed since last time: beside each series, the previous DAG run of the same DAG, setup and
machine, with the change and its interval; in the report right after the verdicts, linked."""
import pandas as pd
import pytest

from mxbench import report, store
from mxbench.stages import pipeline
from support.stored_runs import make_dag_dir, ok_runs


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'results.db'}"


def stored(url, tmp_path, name, run_id, speeds, params=None):
    dag_dir = make_dag_dir(tmp_path, name, ok_runs(speeds=speeds), params=params)
    store.record_dag_run(url, dag_dir, dag_id="mxbench_benchmark", run_id=run_id, trigger="manual", build={})


def test_the_previous_dag_run_of_the_setup_and_the_change_with_its_interval(url, tmp_path):
    stored(url, tmp_path, "old", "manual__1", (100.0, 101.0, 99.0, 100.5))
    stored(url, tmp_path, "last", "manual__2", (100.0, 102.0, 101.0, 99.5))
    now = make_dag_dir(tmp_path, "now", ok_runs(speeds=(80.0, 81.0, 79.5, 80.5)))
    (row,) = pipeline.since_last(now, url, "mxbench_benchmark", "manual__3").itertuples()
    assert row.previous_run == "manual__2" and row.previous_median == pytest.approx(100.5)
    assert row.change == pytest.approx(80.25 / 100.5 - 1, rel=1e-3)
    assert row.change_low < row.change < row.change_high < 0 and row.outcome == "slower"
    assert pd.read_csv(now / "tables" / "since_last.csv")["previous_run"].tolist() == ["manual__2"]
    # in the report: after the verdicts, the previous run a link to its report beside this one's
    report.build_report(now)
    md = (now / "report" / "report.md").read_text()
    assert "## Since last time" in md and "manual__2" in md and "-20.1% [" in md
    html = (now / "report" / "report.html").read_text()
    assert "<a href='./manual__2'>manual__2</a>" in html


def test_another_setup_or_dag_is_no_previous_run_and_an_unreadable_store_is_said(url, tmp_path):
    stored(url, tmp_path, "more-images", "manual__1", (100.0, 101.0), params={"preset": "cpu-demo", "repeats": 2,
                                                                              "synthetic_images": 5000})
    now = make_dag_dir(tmp_path, "now", ok_runs())
    (row,) = pipeline.since_last(now, url, "mxbench_benchmark", "manual__2").itertuples()
    assert row.note == "no earlier DAG run of this setup on this machine" and pd.isna(row.previous_run)
    (row,) = pipeline.since_last(now, url, "mxbench_regression", "manual__2").itertuples()
    assert row.note == "no earlier DAG run of this setup on this machine"
    bad = "postgresql+psycopg2://mx:hunter2secret@127.0.0.1:1/results"
    (row,) = pipeline.since_last(now, bad, "mxbench_benchmark", "manual__2").itertuples()
    assert row.note.startswith("not shown: the results store could not be read") and "hunter2secret" not in row.note
