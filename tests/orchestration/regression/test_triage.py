"""Alert triage: the states and their changes (``mxbench.regression.triage``), the store's record of them,
what they do to the regression check and the DAG run's failure, and the history page's write
route: who may set a state, and that a cookie-authenticated write needs the page's own token."""
from datetime import timedelta

import pandas as pd
import pytest

from mxbench import store
from mxbench.regression import triage
from mxbench.report import history_page
from mxbench.run_folder import DagRunFolder
from mxbench.stages import dag_run_failures, regression_check
from support.stored_runs import CPU_FP, SETUP, T0, make_dag_dir, ok_runs

DAG = "mxbench_regression"
BASE = (100.0, 101.0, 99.0, 100.5)  # samples/s of each repeat of a DAG run before the drop
DROPPED = tuple(s * 0.8 for s in BASE)  # 20% slower: a regression against BASE
WORSE = tuple(s * 0.6 for s in BASE)  # 25% slower again than DROPPED


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'results.db'}"


def record(url, tmp_path, day: int, speeds) -> str:
    """DAG run ``day`` of the regression DAG: cpu2-bs32 on local, one repeat per speed."""
    run_id = f"scheduled__day{day}"
    folder = make_dag_dir(tmp_path, run_id, ok_runs(speeds=speeds), started=T0 + timedelta(days=day))
    store.record_dag_run(url, DagRunFolder(folder), dag_id=DAG, run_id=run_id, trigger="scheduled")
    (folder / "report").mkdir()
    (folder / "report" / "report.md").write_text("report")  # check_runs' message needs a report
    return run_id


def check(url, tmp_path, run_id) -> dict:
    """The regression check of stored DAG run ``run_id``: its one finding, and why the DAG run fails."""
    findings = regression_check.check_regressions(DagRunFolder(tmp_path / run_id), url, DAG, run_id, {"local": CPU_FP},
                                                  baseline_runs=5, min_drop=0.05)
    assert len(findings) == 1, findings
    return {**findings[0], "failure": dag_run_failures.failure_message(DagRunFolder(tmp_path / run_id))}


def set_state(url, run_id, state, reason="looked at it", user="alice"):
    return store.set_alert_state(url, DAG, run_id, "cpu2-bs32", "local", CPU_FP, state, user, reason)


# --- the states -----------------------------------------------------------------------------

def test_every_state_but_new_needs_a_reason_and_only_allowed_changes_pass():
    assert triage.check_change("new", "acknowledged", "  known: the new kernel  ") == "known: the new kernel"
    assert triage.check_change("acknowledged", "new", "") == ""  # reopening needs no reason
    with pytest.raises(triage.TriageError, match="say why the alert is expected"):
        triage.check_change("new", "expected", "   ")
    with pytest.raises(triage.TriageError, match="can become new, not acknowledged"):
        triage.check_change("distribution change", "acknowledged", "why not")
    with pytest.raises(triage.TriageError, match="already new"):
        triage.check_change("new", "new", "")
    with pytest.raises(triage.TriageError, match="'fixed' is not an alert state"):
        triage.check_change("new", "fixed", "it is")
    with pytest.raises(triage.TriageError, match="at most"):
        triage.check_change("new", "acknowledged", "x" * (triage.MAX_REASON + 1))


def test_a_regression_is_covered_only_at_or_above_the_accepted_level_and_after_the_last_distribution_change():
    when = pd.Timestamp("2026-11-01", tz="UTC")
    alerts = pd.DataFrame([
        {"dag_id": DAG, "run_id": "a", "state": "acknowledged", "level": 80.0, "changed_by": "alice",
         "reason": "known", "measured_at": when},
        {"dag_id": DAG, "run_id": "b", "state": "new", "level": 70.0, "changed_by": "bob", "reason": "",
         "measured_at": when + timedelta(days=1)}])
    later = when + timedelta(days=2)
    covering = triage.covering_alert(alerts, later, 79.0, min_drop=0.05)
    assert (covering.state, covering.run_id, covering.changed_by) == ("acknowledged", "a", "alice")
    assert triage.covering_alert(alerts, later, 75.0, min_drop=0.05) is None  # more than 5% below its level
    assert triage.covering_alert(alerts, when - timedelta(days=1), 80.0, min_drop=0.05) is None  # before the alert
    assert triage.baseline_start(alerts, later) is None
    changed = alerts.assign(state=["acknowledged", "distribution change"])
    assert triage.baseline_start(changed, later) == when + timedelta(days=1)
    assert triage.covering_alert(changed, later, 80.0, min_drop=0.05) is None  # the series started over


# --- the store ------------------------------------------------------------------------------

def test_each_change_is_kept_with_who_from_to_and_why_and_a_refused_one_changes_nothing(url, tmp_path):
    run_id = record(url, tmp_path, 0, BASE)
    set_state(url, run_id, "acknowledged", "the new allocator, tracked in #12")
    set_state(url, run_id, "new", "", user="bob")
    with pytest.raises(triage.TriageError):
        set_state(url, run_id, "expected", "")
    with pytest.raises(store.NoSuchAlert, match="measured nothing of cpu2-bs32 on ssh"):
        store.set_alert_state(url, DAG, run_id, "cpu2-bs32", "ssh", CPU_FP, "expected", "alice", "why")
    alerts = store.read_alerts(url)
    assert alerts[["run_id", "state", "changed_by", "level"]].values.tolist() == [[run_id, "new", "bob",
                                                                                   pd.Series(BASE).median()]]
    changes = store.alert_history(url)
    assert changes[["from_state", "to_state", "changed_by", "reason"]].values.tolist() == [
        ["new", "acknowledged", "alice", "the new allocator, tracked in #12"], ["acknowledged", "new", "bob", ""]]
    assert changes["changed_at"].notna().all()


def test_reading_alerts_never_makes_the_store(tmp_path):
    missing = tmp_path / "none" / "results.db"
    assert store.read_alerts(f"sqlite:///{missing}").empty and not missing.parent.exists()


def test_baseline_since_leaves_out_what_came_before(url, tmp_path):
    for day in range(3):
        record(url, tmp_path, day, BASE)
    since = T0 + timedelta(days=1)
    runs = store.baseline(url, "cpu2-bs32", "local", CPU_FP, before=(DAG, "scheduled__day2"), since=since,
                          setup=SETUP)
    assert sorted(set(runs["run_id"])) == ["scheduled__day1"]


# --- what the states do to the regression check ----------------------------------------------

def seeded_drop(url, tmp_path) -> str:
    """Three DAG runs at BASE, then one at DROPPED; that one's run id."""
    for day in range(3):
        record(url, tmp_path, day, BASE)
    return record(url, tmp_path, 3, DROPPED)


def test_an_acknowledged_regression_does_not_fail_later_dag_runs_at_its_level(url, tmp_path):
    dropped = seeded_drop(url, tmp_path)
    first = check(url, tmp_path, dropped)
    assert first["status"] == "regression" and first["triage"] == ""
    assert "REGRESSION cpu2-bs32 (local)" in first["failure"]
    set_state(url, dropped, "acknowledged", "slower allocator, known")
    again = check(url, tmp_path, record(url, tmp_path, 4, DROPPED))
    assert again["status"] == "regression" and again["triage"] == "acknowledged"  # reported with its state
    assert f"acknowledged by alice at {DAG}/{dropped}" in again["message"] and "slower allocator" in again["message"]
    assert again["failure"] is None
    # slower again than the acknowledged level: a new regression, which fails
    worse = check(url, tmp_path, record(url, tmp_path, 5, WORSE))
    assert worse["status"] == "regression" and worse["triage"] == "" and "REGRESSION" in worse["failure"]


def test_a_reopened_alert_fails_later_dag_runs_again(url, tmp_path):
    dropped = seeded_drop(url, tmp_path)
    set_state(url, dropped, "expected", "a heavier default model")
    set_state(url, dropped, "new", "")
    later = check(url, tmp_path, record(url, tmp_path, 4, DROPPED))
    assert later["triage"] == "" and "REGRESSION" in later["failure"]


def test_a_distribution_change_starts_the_baseline_at_its_dag_run(url, tmp_path):
    dropped = seeded_drop(url, tmp_path)
    set_state(url, dropped, "distribution change", "new data loader: this is the level now")
    next_run = record(url, tmp_path, 4, DROPPED)
    after = check(url, tmp_path, next_run)
    assert after["baseline_runs"] == dropped and after["status"] == "no baseline yet" and after["failure"] is None
    settled = check(url, tmp_path, record(url, tmp_path, 5, DROPPED))
    assert settled["baseline_runs"].split() == [dropped, next_run] and settled["status"] == "ok"
    assert settled["failure"] is None


def test_another_dags_triage_does_not_silence_or_reset_this_dags_check(url, tmp_path):
    """Who may edit the benchmark DAG's runs must not decide for the regression DAG: its runs pool
    into the baseline, its alerts do not."""
    for day in range(3):
        record(url, tmp_path, day, BASE)
    manual = "manual__dropped"
    folder = make_dag_dir(tmp_path, manual, ok_runs(speeds=DROPPED), started=T0 + timedelta(days=3))
    store.record_dag_run(url, DagRunFolder(folder), dag_id="mxbench_benchmark", run_id=manual, trigger="manual")
    store.set_alert_state(url, "mxbench_benchmark", manual, "cpu2-bs32", "local", CPU_FP, "distribution change",
                          "bob", "only I say so")
    store.set_alert_state(url, "mxbench_benchmark", manual, "cpu2-bs32", "local", CPU_FP, "new", "bob")
    store.set_alert_state(url, "mxbench_benchmark", manual, "cpu2-bs32", "local", CPU_FP, "acknowledged", "bob",
                          "fine by me")
    later = check(url, tmp_path, record(url, tmp_path, 4, DROPPED))
    assert later["status"] == "regression" and later["triage"] == "" and "REGRESSION" in later["failure"]


# --- the history page -------------------------------------------------------------------------

def judged(url):
    from mxbench.regression.regression_rule import judge_history

    rows = store.read_history(url)
    return judge_history(rows.assign(when=pd.to_datetime(rows["measured_at"], utc=True)))


def test_the_page_shows_each_alerts_state_and_forms_only_on_the_dags_one_may_edit(url, tmp_path):
    dropped = seeded_drop(url, tmp_path)
    set_state(url, dropped, "acknowledged", "known <b>slow</b> allocator")
    rows, alerts = judged(url), store.read_alerts(url)
    read_only = history_page(rows, "test", alerts=alerts)
    assert "<form" not in read_only and "acknowledged" in read_only and "alice" in read_only
    assert "known &lt;b&gt;slow&lt;/b&gt; allocator" in read_only  # a reason is text, never markup
    other = history_page(rows, "test", alerts=alerts, editable=["mxbench_benchmark"], form_token="t0k")
    assert "<form" not in other
    page = history_page(rows, "test", alerts=alerts, editable=[DAG], form_token="t0k")
    assert page.count("<form method='post' action='history/alerts'>") == 1
    assert "name='token' value='t0k'" in page and f"name='run_id' value='{dropped}'" in page
    assert "<option>new</option><option>expected</option><option>distribution change</option>" in page
    assert "known &lt;b&gt;slow&lt;/b&gt; allocator" in page


# --- the write route --------------------------------------------------------------------------

class User:
    def __init__(self, name):
        self.name = name

    def get_id(self):
        return self.name

    def get_name(self):
        return self.name


@pytest.fixture
def client(airflow_db, url, tmp_path, monkeypatch):
    """The mxbench app (Airflow's metadata DB: the history page lists its backfills) with a stand-in
    for Airflow's auth: user "editor" may edit the regression DAG, anyone may read;
    ``client.via_header`` says whether the request came with a bearer token."""
    from fastapi.testclient import TestClient

    from mxbench.airflow_glue import web, web_auth, web_form_tokens

    monkeypatch.setenv("MXBENCH_RESULTS_URL", url)
    monkeypatch.setattr(web_form_tokens, "form_secret", lambda: b"test secret")
    monkeypatch.setattr(web_auth, "may_read", lambda user, dag_id: True)
    monkeypatch.setattr(web_auth, "may_edit", lambda user, dag_id: user.name == "editor" and dag_id == DAG)
    test_client = TestClient(web.app, base_url="http://airflow.test")
    test_client.user, test_client.via_header = User("editor"), False
    web.app.dependency_overrides[web_auth.writer] = lambda: (test_client.user, test_client.via_header)
    web.app.dependency_overrides[web_auth.current_user] = lambda: test_client.user
    yield test_client
    web.app.dependency_overrides.clear()


def alert_form(run_id, state="acknowledged", **more):
    return {"dag_id": DAG, "run_id": run_id, "variant": "cpu2-bs32", "launcher": "local", "environment": CPU_FP,
            "state": state, "reason": "known", **more}


def test_a_form_token_is_the_users_own_and_expires():
    from mxbench.airflow_glue.web_form_tokens import FORM_TOKEN_LIFETIME_S, form_token, valid_form_token

    token = form_token("editor", b"k", now=1000)
    assert valid_form_token(token, "editor", b"k", now=1000 + FORM_TOKEN_LIFETIME_S)
    assert not valid_form_token(token, "viewer", b"k", now=1000)
    assert not valid_form_token(token, "editor", b"other key", now=1000)
    assert not valid_form_token(token, "editor", b"k", now=1001 + FORM_TOKEN_LIFETIME_S)
    assert not valid_form_token("", "editor", b"k") and not valid_form_token("x.y", "editor", b"k")
    # forged shapes are refused, not errors: a non-ASCII digit, a non-ASCII signature
    assert not valid_form_token("\u00b2.x", "editor", b"k")
    assert not valid_form_token(token.split(".")[0] + ".\u00e9", "editor", b"k", now=1000)


def test_an_editor_sets_a_state_from_the_page_and_is_sent_back_to_it(client, url, tmp_path):
    from mxbench.airflow_glue.web_form_tokens import FORM_TOKEN_LIFETIME_S, form_token

    dropped = seeded_drop(url, tmp_path)
    page = client.get("/history")
    assert "form-action 'self'" in page.headers["content-security-policy"]
    token = page.text.split("name='token' value='")[1].split("'")[0]
    answer = client.post("/history/alerts", data=alert_form(dropped, token=token), follow_redirects=False,
                         headers={"Origin": "http://airflow.test", "Sec-Fetch-Site": "same-origin"})
    assert answer.status_code == 303 and answer.headers["location"] == "../history"
    assert store.read_alerts(url)[["state", "changed_by"]].values.tolist() == [["acknowledged", "editor"]]
    assert token == form_token("editor", b"test secret", now=int(token.split(".")[0]) - FORM_TOKEN_LIFETIME_S)


def test_cross_site_untokened_and_unauthorized_writes_are_refused_and_change_nothing(client, url, tmp_path):
    from mxbench.airflow_glue.web_form_tokens import form_token

    dropped = seeded_drop(url, tmp_path)
    token = form_token("editor", b"test secret")
    forged = client.post("/history/alerts", data=alert_form(dropped, token=token),
                         headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
    assert forged.status_code == 403 and "from another site" in forged.text
    no_token = client.post("/history/alerts", data=alert_form(dropped))
    assert no_token.status_code == 403 and "token is missing" in no_token.text
    client.user = User("viewer")  # may read, not edit; even with its own token
    refused = client.post("/history/alerts", data=alert_form(dropped, token=form_token("viewer", b"test secret")))
    assert refused.status_code == 403 and "may not change the runs of mxbench_regression" in refused.text
    assert store.read_alerts(url).empty and store.alert_history(url).empty


def test_an_api_client_with_a_bearer_token_needs_no_form_token_and_bad_changes_are_named(client, url, tmp_path):
    dropped = seeded_drop(url, tmp_path)
    client.via_header = True
    ok = client.post("/history/alerts", data=alert_form(dropped, state="expected"), follow_redirects=False)
    assert ok.status_code == 303
    bad = client.post("/history/alerts", data=alert_form(dropped, state="acknowledged", reason=""))
    assert bad.status_code == 400 and f"cpu2-bs32 (local) in DAG run {dropped}: say why" in bad.text
    missing = client.post("/history/alerts", data=alert_form("scheduled__no-such-run"))
    assert missing.status_code == 404 and "measured nothing" in missing.text
    assert store.read_alerts(url)["state"].tolist() == ["expected"]


@pytest.mark.parametrize("reason", ["known\nINFO mxbench triage: admin set cpu2-bs32 to expected: forged",
                                    "known\rforged", "known\u2028forged", "known\x1b[2Kforged", "known\x85forged"])
def test_a_reason_with_a_line_break_or_control_character_is_refused_by_name(client, url, tmp_path, caplog, reason):
    """On main a newline in a reason went raw into the api-server's log: a forged line of its own."""
    dropped = seeded_drop(url, tmp_path)
    client.via_header = True
    with caplog.at_level("INFO"):
        bad = client.post("/history/alerts", data=alert_form(dropped, reason=reason))
    assert bad.status_code == 400 and "the reason holds a control character or line break (U+" in bad.text
    assert "give it as one line of text" in bad.text
    assert store.read_alerts(url).empty and store.alert_history(url).empty
    assert "forged" not in caplog.text


def test_what_a_triage_change_logs_is_one_line(client, url, tmp_path, caplog):
    from mxbench.airflow_glue import web

    dropped = seeded_drop(url, tmp_path)
    client.via_header = True
    with caplog.at_level("INFO", logger=web.log.name):
        ok = client.post("/history/alerts", data=alert_form(dropped, reason="known  \u00a0slow"),
                         follow_redirects=False)
    assert ok.status_code == 303
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("mxbench triage:")]
    assert logged == [f"mxbench triage: editor set cpu2-bs32 (local, machine {CPU_FP}) of {DAG}/{dropped} to "
                      "acknowledged: known  \\xa0slow"]
    assert web.one_line("a\nb\r\x1b[0m\u2028") == "a\\nb\\r\\x1b[0m\\u2028"


def test_cross_site_reads_the_browsers_word():
    from mxbench.airflow_glue import web_form_tokens

    hosts = {"airflow.test"}
    assert web_form_tokens.cross_site({}, hosts) is None  # an API client says nothing
    assert web_form_tokens.cross_site({"sec-fetch-site": "same-origin", "origin": "http://airflow.test"}, hosts) is None
    assert "same-site" in web_form_tokens.cross_site({"sec-fetch-site": "same-site"}, hosts)
    assert "http://evil.example" in web_form_tokens.cross_site({"origin": "http://evil.example"}, hosts)
    assert web_form_tokens.cross_site({"origin": "null"}, hosts)  # a sandboxed frame elsewhere


def test_without_a_secret_to_sign_with_there_are_no_forms_and_cookie_writes_are_refused(client, url, tmp_path,
                                                                                        monkeypatch):
    from mxbench.airflow_glue import web_form_tokens

    dropped = seeded_drop(url, tmp_path)
    monkeypatch.setattr(web_form_tokens, "form_secret", lambda: None)
    page = client.get("/history")
    assert page.status_code == 200 and "<td>new</td>" in page.text and "<form" not in page.text
    refused = client.post("/history/alerts", data=alert_form(dropped, token="1.x"))
    assert refused.status_code == 403 and store.read_alerts(url).empty


# --- contended runs and the DAGs a baseline comes from (issue 39 §4, issue 40 §3) ---------------

def record_as(url, tmp_path, day: int, speeds, dag_id=DAG, contended=None) -> str:
    """DAG run ``day`` of ``dag_id``: cpu2-bs32 on local, one repeat per speed; ``contended``: the
    repeats that had other work on their hosts (runs.csv's column, as parse_logs writes it)."""
    run_id = f"{'scheduled' if dag_id == DAG else 'manual'}__day{day}"
    folder = make_dag_dir(tmp_path, run_id, ok_runs(speeds=speeds), started=T0 + timedelta(days=day),
                          contended=contended)
    store.record_dag_run(url, DagRunFolder(folder), dag_id=dag_id, run_id=run_id, trigger="scheduled")
    (folder / "report").mkdir()
    (folder / "report" / "report.md").write_text("report")
    return run_id


def verdicts(url):
    """Each stored DAG run's verdict on the history page, as the history route judges them."""
    rows = judged(url)
    return dict(zip(rows["run_id"], rows["verdict"]))


def test_a_contended_dag_run_opens_no_alert_and_feeds_no_baseline(url, tmp_path):
    """A busy DAG run 20% slower, every repeat contended: no alert (nothing quiet to confirm it), and
    "contended: not compared"; it is no baseline for the next, whose message counts what was left
    out; a partly contended DAG run is judged on its quiet repeats only."""
    for day in range(3):
        record_as(url, tmp_path, day, BASE, contended=())
    busy = record_as(url, tmp_path, 3, DROPPED, contended=(1, 2, 3, 4))
    found = check(url, tmp_path, busy)
    assert found["status"] == "no result" and found["failure"] is None
    assert "contended: not compared (4 contended runs left out (other work on their hosts))" in found["message"]
    assert verdicts(url)[busy] == "contended: not compared"
    quiet = record_as(url, tmp_path, 4, BASE, contended=())
    found = check(url, tmp_path, quiet)
    assert found["status"] == "ok" and busy not in found["baseline_runs"].split()
    assert "4 contended runs of the baseline left out (other work on their hosts)" in found["message"]
    # two of six repeats slowed by a neighbour: left out, said so, and nothing slower
    mixed = record_as(url, tmp_path, 5, (60.0, 61.0, 100.2, 99.6, 100.4, 99.9), contended=(1, 2))
    found = check(url, tmp_path, mixed)
    assert found["status"] == "ok" and found["n"] == 4 and found["failure"] is None
    assert "2 contended runs of this DAG run left out (other work on their hosts)" in found["message"]
    assert verdicts(url)[mixed] == "ok"


def test_the_history_page_judges_over_the_regression_checks_dags_and_flags_what_it_flags(url, tmp_path):
    """Benchmark-DAG runs of the same setup beside the regression DAG's (a faster team's machine
    time, then a slower one): the history page's judgement takes its baselines from
    MXBENCH_BASELINE_DAGS (by default the regression DAG's) as the check does, so the unchanged
    regression run is not flagged and the real 20% drop is, in the verdicts and the triage list."""
    for day in range(3):
        record_as(url, tmp_path, day, BASE)
    for day in range(3, 8):
        record_as(url, tmp_path, day, tuple(s * 1.25 for s in BASE), dag_id="mxbench_benchmark")
    unchanged = record_as(url, tmp_path, 8, BASE)
    for day in range(9, 14):
        record_as(url, tmp_path, day, tuple(s * 0.6 for s in BASE), dag_id="mxbench_benchmark")
    dropped = record_as(url, tmp_path, 14, DROPPED)
    judged_now = verdicts(url)
    assert judged_now[unchanged] == "ok" and judged_now[dropped] == "regression"
    assert {judged_now[f"manual__day{d}"] for d in (3, 9)} == {"not judged"}  # the check never judges them
    # the same flags the regression check raises
    assert check(url, tmp_path, unchanged)["status"] == "ok"
    assert check(url, tmp_path, dropped)["status"] == "regression"
    page = history_page(judged(url), "test", alerts=store.read_alerts(url))
    triage_list = page.split("Regressions flagged", 1)[1].split("</table>", 1)[0]
    assert dropped in triage_list and unchanged not in triage_list and "manual__day" not in triage_list
