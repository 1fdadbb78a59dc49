"""From a failed or contended run to its evidence in one click (issue 33 §6): the report's links
are well formed and quoted (the Airflow task log of the run's try, its record, its logs), and the
plugin's read-only routes that serve a run's record and logs answer only a user who may read the
DAG's runs, only for a run of that DAG run, only its record and logs, nothing outside its folder.
The app runs under FastAPI's test client with Airflow's auth stood in for (``may_read``,
``dag_run_state``), as the history page's tests run it."""
import json
import os
from urllib.parse import parse_qs, urlsplit

import pytest

from mxbench import config
from mxbench.report import links
from mxbench.run_folder import DagRunFolder

DAG = "mxbench_benchmark"
RUN_ID = "manual__2026-12-04T20:21:41+00:00"
KEY = "cpu2-bs32__local__r2"


def request(**more):
    runs = [{"key": f"cpu2-bs32__{launcher}__r{r}", "launcher": launcher, "repeat": r}
            for r in (1, 2) for launcher in ("local", "ssh")] + [{"key": "cpu1__kubernetes__r1",
                                                                   "launcher": "kubernetes", "repeat": 1}]
    return {"dag_id": DAG, "run_id": RUN_ID, "runs": runs,
            "machine_sets": {"local": ["local", "ssh"], "k8s": ["kubernetes"]}, **more}


def test_a_run_maps_to_its_machine_sets_mapped_task_and_index():
    assert links.run_task(request(), "cpu2-bs32__local__r1") == ("local.run_variant", 0)
    assert links.run_task(request(), "cpu2-bs32__ssh__r2") == ("local.run_variant", 3)
    assert links.run_task(request(), "cpu1__kubernetes__r1") == ("k8s.run_variant", 0)
    assert links.run_task(request(), "nobody") is None


def test_evidence_links_are_well_formed_and_quote_every_id():
    evidence = links.run_evidence(request(), KEY, 2.0)
    (log_text, log), (record_text, record), (logs_text, files) = evidence.anchors
    assert (log_text, record_text, logs_text) == ("task log (try 2)", "record", "logs")
    assert log == ("../../../dags/mxbench_benchmark/runs/manual__2026-12-04T20%3A21%3A41%2B00%3A00/tasks/"
                   "local.run_variant/mapped/2?try_number=2")
    query = parse_qs(urlsplit(record).query)
    assert urlsplit(record).path == "../../run-file" and query == {
        "dag_id": [DAG], "run_id": [RUN_ID], "run": [KEY], "file": ["meta.json"]}
    assert urlsplit(files).path == "../../run-files" and "file" not in parse_qs(urlsplit(files).query)
    assert "+00" not in files and "%2B00%3A00" in files  # a "+" would read back as a space
    assert str(evidence) == f"task log: local.run_variant[2] try 2; record: {KEY}/meta.json; logs: {KEY}/"
    # a run id chosen to break out of its segment or its attribute stays one quoted value
    sneaky = links.run_evidence(request(run_id="x/../../y?a#'<b>"), KEY)
    assert "/tasks/" in sneaky.anchors[0][1] and "x%2F..%2F..%2Fy%3Fa%23%27%3Cb%3E" in sneaky.anchors[0][1]
    assert "'<b>" not in sneaky.html() and sneaky.anchors[0][0] == "task log"  # no try known: the latest
    # a folder whose request does not name its DAG run: where the evidence is, as text
    assert links.run_evidence({"runs": request()["runs"]}, KEY).anchors == []


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A DAG run's folder under a private MXBENCH_HOME: run KEY with its record and logs."""
    monkeypatch.setenv("MXBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MXBENCH_ARTIFACTS", raising=False)
    folder = config.dag_run_dir(DAG, RUN_ID)
    (folder / KEY / "roles").mkdir(parents=True)
    (folder / "request.json").write_text(json.dumps(request()))
    (folder / KEY / "meta.json").write_text('{"status": "failed", "cause": "boom"}')
    (folder / KEY / "rank0.log").write_text("Node[0] Epoch[0] <script>alert(1)</script>\n")
    (folder / KEY / "roles" / "server-0.log").write_text("server says hello\n")
    (folder / KEY / "plan.json").write_text("{}")  # not evidence: not served
    (tmp_path / "secret.log").write_text("not the run's")
    os.symlink(tmp_path / "secret.log", folder / KEY / "roles" / "linked.log")
    return folder


@pytest.fixture
def client(monkeypatch):
    from fastapi.testclient import TestClient

    from mxbench.airflow_glue import web, web_auth

    monkeypatch.setattr(web_auth, "may_read", lambda user, dag_id: user == "viewer" and dag_id == DAG)
    monkeypatch.setattr(web, "dag_run_state", lambda dag_id, run_id: "failed" if run_id == RUN_ID else None)
    test_client = TestClient(web.app, base_url="http://airflow.test")
    test_client.user = "viewer"
    web.app.dependency_overrides[web_auth.current_user] = lambda: test_client.user
    yield test_client
    web.app.dependency_overrides.clear()


def get(client, route, **query):
    return client.get(f"/{route}", params={"dag_id": DAG, "run_id": RUN_ID, "run": KEY, **query})


def test_a_runs_record_and_logs_are_listed_and_served_as_plain_text(home, client):
    from mxbench.airflow_glue import web

    listing = get(client, "run-files")
    assert listing.status_code == 200 and listing.headers["content-security-policy"] == web.POLICY
    hrefs = [href.replace("&amp;", "&") for href in listing.text.split("href='")[1:]]
    files = [parse_qs(urlsplit(href.split("'", 1)[0]).query)["file"][0] for href in hrefs]
    assert files == ["meta.json", "rank0.log", "roles/server-0.log"]  # no plan.json, no link out
    assert all(href.startswith("run-file?") for href in hrefs)
    log = get(client, "run-file", file="rank0.log")
    assert log.status_code == 200 and log.headers["content-type"] == "text/plain; charset=utf-8"
    assert log.headers["x-content-type-options"] == "nosniff" and "<script>" in log.text  # shown, never run
    assert get(client, "run-file", file="roles/server-0.log").text == "server says hello\n"
    assert json.loads(get(client, "run-file", file="meta.json").text)["cause"] == "boom"


@pytest.mark.parametrize("file", ["plan.json", "../request.json", "roles/../meta.json", "roles/linked.log",
                                  "/etc/passwd", "roles", "rank0.log/..", "..", ""])
def test_no_path_outside_the_runs_record_and_logs_is_served(home, client, file):
    answer = get(client, "run-file", file=file)
    assert answer.status_code in (404, 422) and "not the run's" not in answer.text


@pytest.mark.parametrize("run", ["..", ".", "../" + KEY, "cpu2-bs32__local__r9", "tables", "report"])
def test_only_a_run_its_request_lists_is_served(home, client, run):
    (home / "tables").mkdir()
    answer = get(client, "run-files", run=run)
    assert answer.status_code == 404 and "request.json" not in answer.text


def test_a_user_who_may_not_read_the_dag_gets_403_and_another_dag_404(home, client):
    client.user = "stranger"
    for route, query in (("run-files", {}), ("run-file", {"file": "meta.json"})):
        refused = get(client, route, **query)
        assert refused.status_code == 403 and "boom" not in refused.text
    client.user = "viewer"
    assert get(client, "run-files", run_id="manual__unknown").status_code == 404  # no such DAG run in Airflow
    other = client.get("/run-files", params={"dag_id": "some_other_dag", "run_id": RUN_ID, "run": KEY})
    assert other.status_code == 403  # may_read says no: the auth manager decides first


def test_a_dag_run_folder_that_is_another_dags_is_not_served(home, client):
    (home / "request.json").write_text(json.dumps(request(dag_id="mxbench_regression")))
    assert get(client, "run-files").status_code == 404


def test_with_object_storage_the_files_are_not_served_and_it_says_how_to_get_them(home, client, monkeypatch,
                                                                                    tmp_path):
    monkeypatch.setenv("MXBENCH_ARTIFACTS", f"file://{tmp_path / 'bucket'}")
    answer = get(client, "run-files")
    assert answer.status_code == 404 and "mxbench fetch" in answer.text


def test_the_reports_run_tables_link_each_failed_or_contended_run_and_only_those(tmp_path):
    import pandas as pd

    from mxbench import report
    from support.stored_runs import make_dag_dir, ok_runs, variant

    runs = ok_runs(speeds=(100.0, 60.0, 101.0)) + [(variant(), "local", 4, "failed", None, "boom")]
    dag_dir = make_dag_dir(tmp_path, "busy", runs, run_id=RUN_ID)
    request = json.loads((dag_dir / "request.json").read_text())
    (dag_dir / "request.json").write_text(json.dumps({**request, "dag_id": DAG}))
    table = pd.read_csv(dag_dir / "tables" / "runs.csv").assign(
        contended=[False, True, False, False], contention=[None, "other processes used 0.93 cores", None, None],
        try_number=[1, 1, 1, 3], earlier_attempts=[0, 0, 0, 2], worker="w1")
    table.to_csv(dag_dir / "tables" / "runs.csv", index=False)
    report.build_report(DagRunFolder(dag_dir))
    page = (dag_dir / "report" / "report.html").read_text()
    order = page.split("<h2>Every run in the order it ran</h2>", 1)[1].split("<h2>", 1)[0]
    linked = [row.split("</td>", 1)[0].strip() for row in order.split("<tr>")[2:] if "href=" in row]
    assert linked == ["<td>cpu2-bs32__local__r2", "<td>cpu2-bs32__local__r4"]  # the contended and the failed
    failed = page.split("<h2>Failed runs</h2>", 1)[1].split("<h2>", 1)[0]
    assert ("href='../../../dags/mxbench_benchmark/runs/manual__2026-12-04T20%3A21%3A41%2B00%3A00/tasks/"
            "local.run_variant/mapped/3?try_number=3'>task log (try 3)</a>") in failed
    assert "run=cpu2-bs32__local__r4&amp;file=meta.json'>record</a>" in failed
    # out of the first screen: nothing links before the run tables but the DAG runs compared
    assert "run-file" not in page.split("<h2>Results</h2>", 1)[0]
    md = (dag_dir / "report" / "report.md").read_text()
    assert "task log: local.run_variant[3] try 3; record: cpu2-bs32__local__r4/meta.json" in md
