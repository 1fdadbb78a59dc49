"""The "Benchmark history" page and its pieces, on seeded store rows: each variant, launcher and
kind of machine judged on its own; a planted step is flagged, listed and named by the step finder.
And the report view's guard: a run id maps to a file under $MXBENCH_HOME/runs or to nothing."""
import re
from datetime import timedelta
from html.parser import HTMLParser

import numpy as np
import pandas as pd

from mxbench import store
from mxbench.regression.regression_rule import judge_history
from mxbench.report import history_page
from mxbench.run_folder import DagRunFolder
from support.stored_runs import (
    CPU_FP,
    IMAGE_190,
    T0,
    VENV_190,
    make_dag_dir,
    ok_runs,
    planted_speed,
    record_scaling_series,
    variant,
)

CV = 0.03


def store_rows(rng, variant, launcher, environment, builds):
    """Store history rows (as ``store.history`` gives them): one DAG run a day, 4 repeats each,
    each having run the build it asked for."""
    rows, day = [], 0
    for build, mean, runs in builds:
        for _ in range(runs):
            when = pd.Timestamp("2026-11-01", tz="UTC") + pd.Timedelta(days=day)
            for repeat, value in enumerate(mean * (1 + rng.normal(0, CV, 4))):
                rows.append({"measured_at": when, "when": when, "run_id": f"{variant}-{launcher}-{day}",
                             "dag_id": "mxbench_regression", "trigger": "backfill", "mxnet_version": build,
                             "mxnet_package": f"mxnet=={build}", "mxnet_asked": f"mxnet=={build}",
                             "mxnet_reported": build, "runtime": f"/opt/builds/{build}/bin/python", "build": build,
                             "variant": variant, "launcher": launcher,
                             "repeat": repeat, "environment": environment, "status": "ok", "cause": None,
                             "samples_per_sec": value, "sec_per_epoch": 1000 / value})
            day += 1
    return rows


def seeded():
    rng = np.random.default_rng(11)
    rows = store_rows(rng, "cpu1-bs64", "local", "aaaa", [("1.8.0", 1000, 6), ("1.9.0", 850, 2)])
    # the same variant on other hardware, 40% slower throughout: no regression, judged on its own
    rows += store_rows(rng, "cpu1-bs64", "local", "bbbb", [("1.8.0", 600, 4), ("1.9.0", 600, 4)])
    rows += store_rows(rng, "cpu2w-bs64", "ssh", "aaaa", [("1.8.0", 1500, 6), ("1.9.0", 1500, 2)])
    return pd.DataFrame(rows)


class Tables(HTMLParser):
    """The page's tables as DataFrames, as a reader sees them (no lxml in this env)."""

    def __init__(self, page: str):
        super().__init__()
        self.tables, self.row, self.cell = [], None, None
        self.feed(page)
        self.frames = [pd.DataFrame(rows[1:], columns=rows[0]) for rows in self.tables]

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.row = []
        elif tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.row.append(self.cell)
            self.cell = None
        elif tag == "tr":
            self.tables[-1].append(self.row)

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def test_each_variant_launcher_and_machine_is_judged_on_its_own():
    judged = judge_history(seeded())
    per_run = judged.groupby(["variant", "launcher", "environment", "run_id"])["verdict"].first()
    flagged = per_run[per_run == "regression"]
    assert set(flagged.index.get_level_values("environment")) == {"aaaa"}
    assert set(flagged.index.get_level_values("variant")) == {"cpu1-bs64"}
    assert per_run.loc[("cpu1-bs64", "local", "aaaa")].iloc[0] == "no baseline yet"


def test_the_history_page_lists_regressions_and_names_the_first_slower_build():
    page = history_page(judge_history(seeded()), "sqlite:///results.db")
    builds, by_build, flagged, steps = Tables(page).frames
    assert set(by_build["MXNet build"]) == {"1.8.0", "1.9.0"}
    # the builds view first: per series each build and its change from the one before
    step = builds.assign(**{"MXNet build": builds["MXNet build"].str.split(" ").str[0]}).set_index(
        ["series", "machine", "MXNet build"])
    first = "unnamed machine aaaa"  # the seeded machines have no name: "unnamed machine" and the fingerprint's start
    assert step.loc[("cpu1-bs64 (local)", first, "1.9.0"), "change [95% CI], verdict"].endswith(", slower")
    assert step.loc[("cpu1-bs64 (local)", first, "1.9.0"), "level change starts"].startswith("here (-1")
    assert step.loc[("cpu1-bs64 (local)", first, "1.8.0"), "change [95% CI], verdict"] == "first build"
    assert not step.loc[("cpu1-bs64 (local)", "unnamed machine bbbb", "1.9.0"), "change [95% CI], verdict"].endswith(
        (", slower", ", faster"))
    assert set(flagged["variant"]) == {"cpu1-bs64"} and set(flagged["MXNet build"]) == {"1.9.0"}
    assert set(flagged["runtime"]) == {"/opt/builds/1.9.0/bin/python"}
    step = steps.set_index(["variant", "launcher", "machine"])
    assert step.loc[("cpu1-bs64", "local", "unnamed machine aaaa"), "first build after"] == "1.9.0"
    assert step.loc[("cpu1-bs64", "local", "unnamed machine bbbb"), "first build after"] == "none"  # its own hardware
    assert step.loc[("cpu2w-bs64", "ssh", "unnamed machine aaaa"), "first build after"] == "none"
    assert page.count("data:image/png;base64,") == 1


def test_the_page_groups_by_what_ran_and_shows_what_was_asked_and_the_runtime(tmp_path):
    """Stored DAG runs that all asked for mxnet==1.9.0: the local ones ran 1.9.1 from a venv, the
    Kubernetes ones 1.9.0 in an image; the page reads them as the history route does."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    ran = {"local": {"mxnet_asked": "mxnet==1.9.0", "mxnet_reported": "1.9.1", "runtime": VENV_190},
           "kubernetes": {"mxnet_asked": "mxnet==1.9.0", "mxnet_reported": "1.9.0", "runtime": IMAGE_190}}
    for day in range(2):
        folder = make_dag_dir(tmp_path, f"day{day}", ok_runs(launchers=("local", "kubernetes")), ran=ran,
                              started=pd.Timestamp("2026-11-01", tz="UTC") + pd.Timedelta(days=day))
        store.record_dag_run(url, DagRunFolder(folder), dag_id="mxbench_regression", run_id=f"scheduled__day{day}",
                             trigger="scheduled", build={"package": "mxnet==1.9.0", "commit": None})
    rows = store.read_history(url)
    page = history_page(judge_history(rows.assign(when=pd.to_datetime(rows["measured_at"], utc=True))), "test")
    by_build = Tables(page).frames[1].set_index("launcher")
    assert by_build.loc["local", ["MXNet build", "asked for", "runtime", "DAG runs"]].tolist() == [
        "1.9.1", "mxnet==1.9.0", VENV_190, "2"]
    assert by_build.loc["kubernetes", ["MXNet build", "asked for", "runtime"]].tolist() == [
        "1.9.0", "mxnet==1.9.0", IMAGE_190]


def stored_page(url):
    """The history page as the history route makes it, sizes and machine names included."""
    rows = store.read_history(url)
    judged = judge_history(rows.assign(when=pd.to_datetime(rows["measured_at"], utc=True)))
    return history_page(judged, "test", sizes=store.read_sizes(url), names=store.machine_names(url))


def efficiency_table(page):
    return next((frame for frame in Tables(page).frames if "efficiency vs 1 device" in frame), None)


def test_the_page_shows_scaling_efficiency_and_cost_by_build(tmp_path, monkeypatch):
    """1-, 2- and 4-worker variants, two DAG runs of each of two builds, planted speeds (no noise):
    build 1.9.1 spends twice 1.9.0's time on the device link. Efficiency against the same build's
    1-worker speed; a cost only where the launcher has a price."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    monkeypatch.delenv("MXBENCH_PRICES", raising=False)
    for first, build, link in ((0, "1.9.0", 0.2), (2, "1.9.1", 0.4)):
        record_scaling_series(url, tmp_path, dag_runs=2, noise=0, first=first, link=link,
                              ran={"local": {"mxnet_asked": f"mxnet=={build}", "mxnet_reported": build}})
    page = stored_page(url)
    assert "Scaling efficiency and cost by MXNet build" in page
    assert "No prices set (MXBENCH_PRICES): every cost is not set." in page
    table = efficiency_table(page)
    assert list(table["MXNet build"]) == ["1.9.0"] * 3 + ["1.9.1"] * 3
    assert list(table["devices"]) == ["1", "2", "4"] * 2 and set(table["DAG runs"]) == {"2"}
    assert set(table["ResNet depth"]) == {"8"} and set(table["images per device"]) == {"32"}
    assert set(table["launcher"]) == {"local"} and set(table["machine"]) == {"cpu: AMD EPYC 7B13 x2"}
    assert list(table["efficiency vs 1 device"]) == ["100.0%", "83.3%", "76.9%", "100.0%", "71.4%", "62.5%"]
    assert list(table["samples/s (median of runs)"]) == [f"{planted_speed(w, link=link):,.1f}"
                                                         for link in (0.2, 0.4) for w in (1, 2, 4)]
    assert set(table["cost / million images"]) == {"not set"}

    monkeypatch.setenv("MXBENCH_PRICES", '{"local": {"per_device_hour": 2.0, "currency": "EUR"}}')
    table = efficiency_table(stored_page(url))
    assert list(table["cost / million images"]) == [
        f"{2.0 * w / (planted_speed(w, link=link) * 3600) * 1e6:,.2f} EUR" for link in (0.2, 0.4) for w in (1, 2, 4)]
    assert table["cost / million images"].iloc[0] == "8.68 EUR"  # 2 EUR an hour at 64 images/s


def test_no_efficiency_section_without_two_device_counts_or_a_one_device_run(tmp_path):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    store.record_dag_run(url, DagRunFolder(make_dag_dir(tmp_path, "one", ok_runs())), dag_id="mxbench_benchmark",
                         run_id="one",
                         trigger="manual")
    page = stored_page(url)
    assert "Scaling efficiency" not in page and efficiency_table(page) is None
    store.record_dag_run(url, DagRunFolder(make_dag_dir(tmp_path, "two", ok_runs(variant("cpu4-bs32", workers=4)),
                                           started=pd.Timestamp("2026-01-02", tz="UTC"))),
                         dag_id="mxbench_benchmark", run_id="two", trigger="manual")
    table = efficiency_table(stored_page(url))
    assert list(table["devices"]) == ["2", "4"]
    assert set(table["efficiency vs 1 device"]) == {"no 1-device run of this build"}
    assert "Scaling efficiency" not in history_page(judge_history(seeded()), "test")  # no sizes: none


def test_rows_without_a_machine_are_shown_not_dropped():
    rows = seeded().assign(environment=None)
    builds, by_build = Tables(history_page(judge_history(rows), "the results store (sqlite)")).frames[:2]
    assert set(builds["series"]) == {"cpu1-bs64 (local)", "cpu2w-bs64 (ssh)"}
    assert set(by_build["variant"]) == {"cpu1-bs64", "cpu2w-bs64"}


def test_an_empty_store_says_so():
    page = history_page(judge_history(pd.DataFrame(columns=seeded().columns)), "sqlite:///results.db")
    assert "No runs are stored yet." in page and "<img" not in page


def test_a_report_is_found_only_inside_the_runs_folder(tmp_path, monkeypatch):
    from mxbench import config
    from mxbench.airflow_glue.web_folders import report_file

    monkeypatch.setenv("MXBENCH_HOME", str(tmp_path / "home"))
    run_id = "manual__2026-12-03T00:00:00+00:00"
    assert report_file("mxbench_benchmark", run_id) is None  # no report yet
    report = config.dag_run_dir("mxbench_benchmark", run_id) / "report" / "report.html"
    report.parent.mkdir(parents=True)
    report.write_text("<html>report</html>")
    assert report_file("mxbench_benchmark", run_id) == report.resolve()
    assert report_file("mxbench_regression", run_id) is None  # the same run id, the other DAG: its own folder
    (config.dag_run_dir("mxbench_benchmark", run_id) / "request.json").write_text('{"dag_id": "mxbench_regression"}')
    assert report_file("mxbench_benchmark", run_id) is None  # a folder whose request.json gives it to another DAG
    assert report_file("mxbench_benchmark", "../../../etc/passwd") is None
    outside = tmp_path / "elsewhere"
    (outside / "report").mkdir(parents=True)
    (outside / "report" / "report.html").write_text("secret")
    other = config.dag_run_dir("mxbench_benchmark", "manual__other")
    other.symlink_to(outside, target_is_directory=True)  # a run folder swapped for a link out of MXBENCH_HOME
    assert report_file("mxbench_benchmark", "manual__other") is None


def test_each_dag_gets_its_own_report_for_a_shared_run_id(tmp_path, monkeypatch):
    """A manual run of the benchmark DAG may take the regression DAG's scheduled run id."""
    from mxbench import config
    from mxbench.airflow_glue.web_folders import report_file

    monkeypatch.setenv("MXBENCH_HOME", str(tmp_path / "home"))
    run_id = "scheduled__2026-11-08T00:00:00+00:00"
    for dag_id in ("mxbench_regression", "mxbench_benchmark"):
        folder = config.dag_run_dir(dag_id, run_id)
        (folder / "report").mkdir(parents=True)
        (folder / "request.json").write_text(f'{{"dag_id": "{dag_id}"}}')
        (folder / "report" / "report.html").write_text(f"<html>{dag_id}</html>")
    for dag_id in ("mxbench_regression", "mxbench_benchmark"):
        assert report_file(dag_id, run_id).read_text() == f"<html>{dag_id}</html>"


def test_a_report_under_the_old_folder_name_is_still_served(tmp_path, monkeypatch):
    from mxbench import config
    from mxbench.airflow_glue.web_folders import report_file

    monkeypatch.setenv("MXBENCH_HOME", str(tmp_path / "home"))
    run_id = "manual__2026-10-01T00:00:00+00:00"
    old = config.legacy_dag_run_dir(run_id)  # written before folders were keyed by DAG
    (old / "report").mkdir(parents=True)
    (old / "report" / "report.html").write_text("<html>old</html>")
    assert report_file("mxbench_benchmark", run_id) is None  # names no DAG: served to none
    (old / "request.json").write_text('{"dag_id": "mxbench_benchmark"}')
    assert report_file("mxbench_regression", run_id) is None  # the old folder is the other DAG's
    assert report_file("mxbench_benchmark", run_id).read_text() == "<html>old</html>"


def test_the_plugin_serves_no_api_docs(monkeypatch):
    """/openapi.json, /docs and /redoc would answer without Airflow's auth: there are none."""
    from fastapi.testclient import TestClient

    from mxbench.airflow_glue import web

    client = TestClient(web.app)
    for path in ("/openapi.json", "/docs", "/redoc", "/docs/oauth2-redirect"):
        answer = client.get(path)
        assert answer.status_code == 404, path
        assert "swagger" not in answer.text.lower() and "openapi" not in answer.text.lower()


def test_the_history_route_shows_only_what_the_user_may_read_and_runs_no_script(airflow_db, tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from mxbench.airflow_glue import web, web_auth

    url = f"sqlite:///{tmp_path / 'results.db'}"
    monkeypatch.setenv("MXBENCH_RESULTS_URL", url)
    for dag_id, name in (("mxbench_benchmark", "cpu1-bench"), ("mxbench_regression", "cpu1-nightly")):
        folder = make_dag_dir(tmp_path, dag_id, ok_runs(variant(name)))
        store.record_dag_run(url, DagRunFolder(folder), dag_id=dag_id, run_id=f"manual__{dag_id}", trigger="manual")
    web.app.dependency_overrides[web_auth.current_user] = lambda: "someone"  # the auth manager's part is may_read
    try:
        client = TestClient(web.app)
        monkeypatch.setattr(web_auth, "may_read", lambda user, dag_id: dag_id == "mxbench_regression")
        monkeypatch.setattr(web_auth, "may_edit", lambda user, dag_id: False)
        page = client.get("/history")
        assert page.status_code == 200
        assert "cpu1-nightly" in page.text and "cpu1-bench" not in page.text
        assert str(tmp_path) not in page.text  # where the store is stays on the server
        assert page.headers["content-security-policy"] == web.POLICY and "script-src" not in web.POLICY
        assert page.headers["x-content-type-options"] == "nosniff"
        monkeypatch.setattr(web_auth, "may_read", lambda user, dag_id: False)
        refused = client.get("/history")
        assert refused.status_code == 403 and refused.headers["content-type"].startswith("text/html")
        nowhere = client.get("/no-such-page")
        assert nowhere.status_code == 404 and "<h1>mxbench: 404</h1>" in nowhere.text
        # a store not made yet is an empty history, and a reader's visit does not make it
        monkeypatch.setattr(web_auth, "may_read", lambda user, dag_id: True)
        monkeypatch.setenv("MXBENCH_RESULTS_URL", f"sqlite:///{tmp_path / 'none' / 'results.db'}")
        empty = client.get("/history")
        assert "No runs are stored yet." in empty.text and not (tmp_path / "none").exists()
    finally:
        web.app.dependency_overrides.clear()


def two_teams():
    """One series measured by the regression DAG and, on the same machine and setup, by the
    benchmark DAG (another team's runs, faster, then slower): regression days 0-2 at 1000, the
    benchmark's days 3-7 at 1250, an unchanged regression run (day 8), the benchmark's days 9-13 at
    600, then a real 20% drop of the regression run (day 14); the first regression run after the
    drop also had a busy neighbour on every run (contended) at 500."""
    rng = np.random.default_rng(5)
    rows = []
    for day, dag_id, mean in ([(d, "mxbench_regression", 1000) for d in range(3)]
                              + [(d, "mxbench_benchmark", 1250) for d in range(3, 8)]
                              + [(8, "mxbench_regression", 1000)]
                              + [(d, "mxbench_benchmark", 600) for d in range(9, 14)]
                              + [(14, "mxbench_regression", 800), (15, "mxbench_regression", 500)]):
        when = pd.Timestamp("2026-11-01", tz="UTC") + pd.Timedelta(days=day)
        for repeat, value in enumerate(mean * (1 + rng.normal(0, 0.005, 4))):
            rows.append({"measured_at": when, "when": when, "run_id": f"day{day}", "dag_id": dag_id,
                         "mxnet_reported": "1.9.0", "build": "1.9.0", "runtime": "venv", "mxnet_asked": None,
                         "mxnet_package": "mxnet==1.9.0", "variant": "cpu1-bs64", "launcher": "local",
                         "repeat": repeat, "environment": "aaaa", "setup_key": "s1", "status": "ok",
                         "samples_per_sec": value, "contended": day == 15})
    return pd.DataFrame(rows)


def test_the_page_judges_each_series_over_the_baseline_dags_only_and_leaves_contended_runs_out(monkeypatch):
    """Issue 40 §3: the judgement pooled the benchmark DAG's runs into the regression DAG's
    baselines, flagging the unchanged run and calling the real drop "improved". Judged over
    MXBENCH_BASELINE_DAGS as the regression check is: the drop is flagged, the unchanged run is not,
    the benchmark's runs are not judged, and the contended DAG run is not compared."""
    monkeypatch.delenv("MXBENCH_BASELINE_DAGS", raising=False)
    judged = judge_history(two_teams())
    per_run = judged.groupby("run_id")["verdict"].first()
    assert per_run["day8"] == "ok" and per_run["day14"] == "regression"
    assert set(per_run[[f"day{d}" for d in range(3, 8)]]) == {"not judged"}
    assert per_run["day15"] == "contended: not compared"
    flagged = Tables(history_page(judged, "test")).frames[2]  # after the builds view and the table by build
    assert list(flagged["DAG run"]) == ["day14"]
    # a deployer who lets the benchmark DAG feed baselines gets its runs judged, as the check would
    monkeypatch.setenv("MXBENCH_BASELINE_DAGS", "mxbench_regression,mxbench_benchmark")
    pooled = judge_history(two_teams()).groupby("run_id")["verdict"].first()
    assert pooled["day8"] == "regression" and pooled["day3"] == "improved"


FINGERPRINT = re.compile(r"[0-9a-f]{16}")


class Editor:
    """A stand-in for Airflow's user: the history page takes its id for the triage forms' token."""

    def get_id(self):
        return "editor"


def record_a_step(url, root, dag_runs=8, step_at=6):
    """Nightly DAG runs of the regression DAG on one machine, 20% slower from DAG run ``step_at`` on."""
    for day in range(dag_runs):
        speed = 100.0 if day < step_at else 80.0
        folder = make_dag_dir(root, f"night-{day}", ok_runs(variant("cpu1-nightly"), speeds=(speed, speed * 1.01,
                                                                                               speed * 0.99)),
                              started=T0 + timedelta(days=day))
        store.record_dag_run(url, DagRunFolder(folder), dag_id="mxbench_regression", run_id=f"night-{day}",
                             trigger="scheduled")


def test_no_page_or_command_shows_a_machine_as_a_bare_fingerprint(airflow_db, tmp_path, monkeypatch, capsys):
    """Issue 43: every table of the history page (the builds view, by build, scaling by build, the
    flagged regressions with their triage forms, the step finder) names the machine, its
    fingerprint a hover away; the command line's history and builds say "name [fingerprint]"."""
    from fastapi.testclient import TestClient

    from mxbench import cli
    from mxbench.airflow_glue import web, web_auth, web_form_tokens

    url = f"sqlite:///{tmp_path / 'results.db'}"
    monkeypatch.setenv("MXBENCH_RESULTS_URL", url)
    record_a_step(url, tmp_path)
    record_scaling_series(url, tmp_path, dag_runs=2, dag_id="mxbench_regression")
    web.app.dependency_overrides[web_auth.current_user] = Editor
    monkeypatch.setattr(web_auth, "may_read", lambda user, dag_id: True)
    monkeypatch.setattr(web_auth, "may_edit", lambda user, dag_id: True)
    monkeypatch.setattr(web_form_tokens, "form_secret", lambda: b"test secret")
    try:
        page = TestClient(web.app).get("/history").text
    finally:
        web.app.dependency_overrides.clear()
    tables = Tables(page).frames
    headings = re.findall(r"<h2>(.*?)</h2>", page)
    assert any("Regressions flagged" in h for h in headings) and any("Scaling efficiency" in h for h in headings)
    flagged = next(frame for frame in tables if "DAG run" in frame.columns and "state" in frame.columns)
    assert list(flagged["DAG run"]) == ["night-6", "night-7"]  # both slower than the 6 before: flagged, with forms
    cells = [str(cell) for frame in tables for column in frame.columns for cell in frame[column]]
    assert "cpu: AMD EPYC 7B13 x2" in cells and not [cell for cell in cells if FINGERPRINT.fullmatch(cell.strip())]
    assert f"<abbr title='{CPU_FP}'>cpu: AMD EPYC 7B13 x2</abbr>" in page
    # the triage form still posts the store's key of the machine, the fingerprint
    assert f"name='environment' value='{CPU_FP}'" in page

    for command in (["history", "cpu1-nightly", "--url", url], ["builds", "cpu1-nightly", "--url", url]):
        assert cli.main(command) == 0
        out = capsys.readouterr().out
        assert f"cpu: AMD EPYC 7B13 x2 [{CPU_FP}]" in out, command
        assert out.count(CPU_FP) == out.count(f"[{CPU_FP}]"), command
