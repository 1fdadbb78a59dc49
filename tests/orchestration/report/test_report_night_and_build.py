"""A regression DAG run's report says what it measured (issue 43 §1): its title names the night
(the logical date) and the MXNet build, a line above the answer says both and the variants, "Since
last time" says the build changed, and a backfill's report shows the builds view over its DAG runs
first. Seeded folders through the stages a DAG run takes: store, regression check, since last,
join, report."""
import json
from datetime import timedelta

import numpy as np
import pytest

from mxbench import report, store
from mxbench.report import BACKFILL_BUILDS
from mxbench.run_folder import DagRunFolder, write_json
from mxbench.stages import pipeline
from mxbench.stages.regression_check import check_regressions
from mxbench.stages.since_last import since_last
from support.stored_runs import T0, make_dag_dir, ok_runs

DAG = "mxbench_regression"
NIGHTS = [("mxnet==1.8.0.post0", "1.8.0", 100.0), ("mxnet==1.8.0.post0", "1.8.0", 100.0),
          ("mxnet==1.9.0", "1.9.0", 80.0)]


def night(tmp_path, url, day, package, reported, level, trigger="backfill", days=1):
    """One regression DAG run's folder, as its tasks leave it up to the report."""
    speeds = [float(level * np.exp(e)) for e in np.random.default_rng(day).normal(0, 0.01, 5)]
    run_id = f"{trigger}__2026-11-{day + 2:02d}T00:00:00+00:00"
    dag_dir = make_dag_dir(tmp_path, f"night{day}", ok_runs(speeds=speeds), started=T0 + timedelta(days=40 + day),
                           run_id=run_id, ran={"local": {"mxnet_asked": package, "mxnet_reported": reported,
                                                         "runtime": "/venvs/b/bin/python"}})
    request = json.loads((dag_dir / "request.json").read_text())
    version = package.split("==")[1]
    request.update(dag_id=DAG, build={"package": package, "version": version, "commit": None,
                                      "image": f"mxbench-train:{version}"})
    (dag_dir / "request.json").write_text(json.dumps(request))
    logical = T0.replace(month=11, day=day + 2)
    stored = store.record_dag_run(url, DagRunFolder(dag_dir), dag_id=DAG, run_id=run_id, trigger=trigger,
                                  build=request["build"], logical_date=logical,
                                  data_interval=(logical, logical + timedelta(days=days)))
    write_json(DagRunFolder(dag_dir).stored, stored)  # as store_results leaves it
    check_regressions(DagRunFolder(dag_dir), url, DAG, run_id, stored["fingerprints"], 5, 0.05)
    since_last(DagRunFolder(dag_dir), url, DAG, run_id)
    pipeline.join(DagRunFolder(dag_dir))
    report.build_report(DagRunFolder(dag_dir))
    return dag_dir


@pytest.fixture
def backfill(tmp_path):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    return [night(tmp_path, url, day, *build) for day, build in enumerate(NIGHTS)]


def test_the_title_names_the_night_and_the_build_and_since_last_says_the_build_changed(backfill):
    md = (backfill[-1] / "report" / "report.md").read_text()
    title, measured = md.splitlines()[0], md.splitlines()[2]
    assert title.startswith("# mxbench_regression · backfill night of 2026-11-04 · MXNet 1.9.0 (mxnet==1.9.0) · "
                            "cpu-demo: cpu2-bs32 · ran 2026-")
    assert measured == ("Measured: backfill night of 2026-11-04; MXNet 1.9.0 (mxnet==1.9.0); variants cpu2-bs32 "
                        "on local")
    since = md.split("## Since last time\n\n", 1)[1].split("\n## ", 1)[0]
    assert "build changed: 1.8.0 → 1.9.0" in since and ", slower" in since
    earlier = (backfill[1] / "report" / "report.md").read_text()
    assert "# mxbench_regression · backfill night of 2026-11-03 · MXNet 1.8.0 (mxnet==1.8.0.post0)" in earlier
    assert "same build 1.8.0" in earlier.split("## Since last time", 1)[1].split("\n## ", 1)[0]
    page = (backfill[-1] / "report" / "report.html").read_text()
    assert "<title>mxbench_regression · backfill night of 2026-11-04 · MXNet 1.9.0" in page
    assert page.index("class='measured'") < page.index("id='answer'")


def test_a_backfills_report_shows_its_builds_first(backfill):
    md = (backfill[-1] / "report" / "report.md").read_text()
    assert md.index(f"## {BACKFILL_BUILDS}") < md.index("## Answer")
    section = md.split(f"## {BACKFILL_BUILDS}\n\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| cpu2-bs32")]
    assert len(rows) == 2 and "| 1.8.0 (since 2026-10-15) |" in rows[0] and "| 1.9.0 (since 2026-11-04) |" in rows[1]
    assert "first build" in rows[0] and "from 1.8.0: -" in rows[1] and ", slower |" in rows[1]
    assert "cpu: AMD EPYC 7B13 x2" in rows[0]
    page = (backfill[-1] / "report" / "report.html").read_text()
    assert page.index("id='backfill-builds'") < page.index("id='answer'")
    assert "href='../../report/mxbench_regression/backfill__2026-11-02T00%3A00%3A00%2B00%3A00'" in page
    # and a link to the history page filtered to this backfill (the UI finds its id from this DAG run)
    section = page.split("id='backfill-builds'", 1)[1].split("</section>", 1)[0]
    assert ("<a href='../../history/backfill-of/mxbench_regression/backfill__2026-11-04T00%3A00%3A00%2B00%3A00'>"
            "This backfill's DAG runs on the history page</a>") in section
    # the same view, for its series, among the regression sections
    assert "## Builds: what each MXNet build did to speed\n" in md


def test_a_scheduled_night_has_no_backfill_section_and_a_manual_run_no_night(tmp_path):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    # Airflow 3's cron timetable: an empty data interval at the logical date
    scheduled = night(tmp_path, url, 0, "mxnet==1.9.1", "1.9.1", 90.0, trigger="scheduled", days=0)
    md = (scheduled / "report" / "report.md").read_text()
    assert md.startswith("# mxbench_regression · night of 2026-11-02 · MXNet 1.9.1 (mxnet==1.9.1) · ")
    assert BACKFILL_BUILDS not in md
    manual = make_dag_dir(tmp_path, "manual", ok_runs(), run_id="manual__1")
    pipeline.join(DagRunFolder(manual))
    report.build_report(DagRunFolder(manual))
    title = (manual / "report" / "report.md").read_text().splitlines()[0]
    assert "night" not in title and "MXNet" not in title and title.endswith(" UTC · cpu-demo: cpu2-bs32")
