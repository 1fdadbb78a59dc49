"""The history page filtered to one Airflow backfill (issue 43 §4): ``/history?backfill=<id>``
shows only the DAG runs that backfill made (Airflow's metadata DB: each carries its backfill id),
its builds view first; a backfill report's link finds the id from its DAG run. The id is checked
before any query, and nothing from the query string reaches the page."""
from datetime import timedelta

import pytest

from mxbench import store
from mxbench.run_folder import DagRunFolder
from support.stored_runs import T0, make_dag_dir, ok_runs, variant

DAG = "mxbench_regression"


class Reader:
    def get_id(self):
        return "reader"


def record_nights(url, root, builds):
    """One scheduled or backfill DAG run of the regression DAG a night, each measuring its build."""
    for day, build in enumerate(builds):
        ran = {"local": {"mxnet_asked": f"mxnet=={build}", "mxnet_reported": build}}
        folder = make_dag_dir(root, f"night-{day}", ok_runs(variant("cpu1-nightly"), speeds=(100.0, 101.0, 99.0)),
                              started=T0 + timedelta(days=day), ran=ran)
        store.record_dag_run(url, DagRunFolder(folder), dag_id=DAG, run_id=f"night-{day}", trigger="backfill")


@pytest.fixture
def backfill_id(airflow_db):
    """An Airflow backfill of the regression DAG that made nights 5 to 7 (night 0 to 4: another backfill's)."""
    from airflow.models.backfill import Backfill
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType

    with create_session() as session:
        made = Backfill(dag_id=DAG, from_date=T0 + timedelta(days=5), to_date=T0 + timedelta(days=7), dag_run_conf={})
        session.add(made)
        session.flush()
        for day in range(5, 8):
            when = T0 + timedelta(days=day)
            session.add(DagRun(dag_id=DAG, run_id=f"night-{day}", run_type=DagRunType.BACKFILL_JOB,
                               logical_date=when, run_after=when, state=DagRunState.SUCCESS, backfill_id=made.id))
        session.add(DagRun(dag_id=DAG, run_id="night-0", run_type=DagRunType.SCHEDULED, logical_date=T0,
                           run_after=T0, state=DagRunState.SUCCESS))
        found = made.id
    yield found
    with create_session() as session:
        session.query(DagRun).filter(DagRun.dag_id == DAG).delete()
        session.query(Backfill).filter(Backfill.id == found).delete()


@pytest.fixture
def client(tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from mxbench.airflow_glue import web, web_auth

    url = f"sqlite:///{tmp_path / 'results.db'}"
    monkeypatch.setenv("MXBENCH_RESULTS_URL", url)
    record_nights(url, tmp_path, ["1.8.0"] * 5 + ["1.9.0", "1.9.0", "1.9.1"])
    monkeypatch.setattr(web_auth, "may_read", lambda user, dag_id: True)
    monkeypatch.setattr(web_auth, "may_edit", lambda user, dag_id: False)
    web.app.dependency_overrides[web_auth.current_user] = Reader
    yield TestClient(web.app, base_url="http://airflow.test")
    web.app.dependency_overrides.clear()


def test_the_history_page_shows_one_backfills_dag_runs_with_its_builds_view_first(client, backfill_id):
    page = client.get("/history", params={"backfill": backfill_id})
    assert page.status_code == 200, page.text
    assert f"Backfill {backfill_id} of {DAG}, 2026-01-06 to 2026-01-08: only its 3 DAG run(s) are shown" in page.text
    first_table = page.text.index("<table")  # the builds view first, over the backfill's builds only
    assert page.text.index("Builds: what each MXNet build did to speed") < first_table
    assert page.text.index("1.9.0") > first_table and page.text.index("1.9.1") > page.text.index("1.9.0")
    assert all(f"night-{day}" in page.text for day in (5, 6, 7))
    assert "night-4" not in page.text and "night-0" not in page.text and "1.8.0" not in page.text
    whole = client.get("/history").text  # without the param: every DAG run, every build, and a link to each backfill
    assert "night-0" in whole and "1.8.0" in whole
    assert f"<a href='history?backfill={backfill_id}'>backfill {backfill_id}</a>" in whole


def test_a_backfill_reports_link_finds_its_backfill(client, backfill_id):
    moved = client.get(f"/history/backfill-of/{DAG}/night-6", follow_redirects=False)
    assert moved.status_code == 303 and moved.headers["location"] == f"../../../history?backfill={backfill_id}"
    assert client.get(f"/history/backfill-of/{DAG}/night-0", follow_redirects=False).status_code == 404  # scheduled
    assert client.get("/history/backfill-of/other_dag/night-6", follow_redirects=False).status_code == 403


def test_the_backfill_param_is_a_whole_number_checked_before_any_query(client, backfill_id, monkeypatch):
    from mxbench.airflow_glue import web_auth

    for bad in ("<script>alert(1)</script>", "1 OR 1=1", "1.5", "0", "-3", str(2**31)):
        answer = client.get("/history", params={"backfill": bad})
        assert answer.status_code == 422, bad
        assert "<script>" not in answer.text and "alert(1)" not in answer.text and "Refused: backfill" in answer.text
    assert client.get("/history", params={"backfill": backfill_id + 1000}).status_code == 404
    monkeypatch.setattr(web_auth, "may_read", lambda user, dag_id: dag_id != DAG)  # may read the benchmark DAG only
    assert client.get("/history", params={"backfill": backfill_id}).status_code == 403
