"""The path a UI trigger takes, end to end: a real Airflow stack (api-server, dag-processor,
scheduler with the LocalExecutor, SQLite) that this module starts and stops. The benchmark DAG
is triggered through the REST API, the scheduler runs it in task processes, and the mxbench
plugin serves its report and the history page to allowed users only; headless Chromium logs in
and looks at both in the Airflow UI, and fills in the DAG's trigger form as a person does."""
import json
import os
import shutil
import urllib.parse
from pathlib import Path

import pytest

from conftest import QUIET_WAIT_S, REPO
from standins.airflow_stack import AirflowStack
from support.browser import axe_violations

pytestmark = pytest.mark.slow  # a real Airflow stack and headless Chromium

DAG = "mxbench_benchmark"
CONF = {"preset": "cpu-demo", "only_variants": ["cpu1-bs64"], "launchers": ["local"], "repeats": 2, "epochs": 1,
        "synthetic_images": 500, "notes": ["UI test run"], "quiet_wait_s": QUIET_WAIT_S}
RUN_DEADLINE_S = 10 * 60
# screenshots land here for CI to keep; MXBENCH_TEST_ARTIFACTS moves them
ARTIFACTS = Path(os.environ.get("MXBENCH_TEST_ARTIFACTS", REPO / "test-artifacts"))


@pytest.fixture(scope="module")
def stack(tmp_path_factory, stack_db):
    stack = AirflowStack(tmp_path_factory.mktemp("ui-stack"))
    stack.prepare(template=stack_db)
    with stack.stopped_at_end():
        stack.start()
        yield stack


@pytest.fixture(scope="module")
def admin(stack):
    return stack.token("admin")


@pytest.fixture(scope="module")
def finished_run(stack, admin):
    """One DAG run triggered through the REST API, as the UI's trigger form does, run to its end."""
    assert stack.call("PATCH", f"/api/v2/dags/{DAG}", admin, {"is_paused": False}).status == 200
    answer = stack.call("POST", f"/api/v2/dags/{DAG}/dagRuns", admin, {"logical_date": None, "conf": CONF})
    assert answer.status == 200, answer.text
    run_id = answer.json()["dag_run_id"]

    def state():
        found = stack.call("GET", f"/api/v2/dags/{DAG}/dagRuns/{urllib.parse.quote(run_id, safe='')}", admin).json()
        return found["state"] if found["state"] in ("success", "failed") else None

    return run_id, stack.wait_for(state, RUN_DEADLINE_S, f"DAG run {run_id}", every=3)


def report_path(run_id: str) -> str:
    return f"/mxbench/report/{DAG}/{urllib.parse.quote(run_id, safe='')}"


def test_a_malformed_conf_is_refused_naming_the_param_and_no_run_is_made(stack, admin):
    before = stack.call("GET", f"/api/v2/dags/{DAG}/dagRuns", admin).json()["total_entries"]
    answer = stack.call("POST", f"/api/v2/dags/{DAG}/dagRuns", admin,
                        {"logical_date": None, "conf": {**CONF, "repeats": 0}})
    assert answer.status == 400, answer.text
    assert "repeats" in answer.json()["detail"]
    assert stack.call("GET", f"/api/v2/dags/{DAG}/dagRuns", admin).json()["total_entries"] == before


def test_the_triggered_run_succeeds_under_the_scheduler(stack, finished_run, admin):
    run_id, state = finished_run
    tis = stack.call("GET", f"/api/v2/dags/{DAG}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances",
                     admin).json()["task_instances"]
    runs = [ti for ti in tis if ti["task_id"] == "local.run_variant"]
    assert state == "success", [(ti["task_id"], ti["map_index"], ti["state"]) for ti in tis]
    assert len(runs) == CONF["repeats"] and {ti["state"] for ti in runs} == {"success"}
    assert len({ti["pid"] for ti in runs}) == len(runs)  # each in a task process of its own, not dag.test()'s one


def test_the_plugin_serves_the_report_to_readers_only(stack, finished_run):
    run_id, _ = finished_run
    assert stack.call("GET", report_path(run_id)).status == 401
    assert stack.call("GET", report_path(run_id), token="not-a-token").status == 403  # Airflow's rule for a bad token
    assert stack.call("GET", report_path(run_id), stack.token("outsider")).status == 403
    page = stack.call("GET", report_path(run_id), stack.token("viewer"))
    assert page.status == 200, page.text
    assert "cpu1-bs64" in page.text and "UI test run" in page.text and "data:image/png;base64," in page.text
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]  # no script runs as the viewer
    # the same page as the report task wrote: one renderer
    from mxbench import config

    folder = stack.home / "runs" / config.dag_run_dir(DAG, run_id).name
    assert page.text == (folder / "report" / "report.html").read_text(encoding="utf-8")
    assert json.loads((folder / "request.json").read_text())["dag_id"] == DAG  # whose folder it is
    # the UI's login cookie is as good as a bearer token
    assert stack.call("GET", report_path(run_id), cookie=stack.token("viewer")).status == 200


def test_the_plugin_answers_404_for_what_is_not_a_report(stack, finished_run):
    viewer = stack.token("viewer")
    run_id, _ = finished_run
    missing = stack.call("GET", report_path("manual__no-such-run"), viewer)
    assert missing.status == 404 and "no DAG run" in missing.text
    # run ids that are paths: no such DAG run, so nothing is looked up on disk (report_file's own
    # guard is tested in tests/orchestration/report/test_history_page.py)
    for sneaky in ("..%2F..%2F..%2Fetc%2Fpasswd", "..%2F" * 8 + "etc%2Fpasswd"):
        answer = stack.call("GET", f"/mxbench/report/{DAG}/{sneaky}", viewer)
        assert answer.status == 404 and "root:" not in answer.text
    other = stack.call("GET", f"/mxbench/report/some_other_dag/{urllib.parse.quote(run_id, safe='')}", viewer)
    assert other.status == 404 and "not an mxbench DAG" in other.text


def test_the_history_page_is_for_readers_only_and_shows_the_stored_runs(stack, finished_run):
    assert stack.call("GET", "/mxbench/history").status == 401
    assert stack.call("GET", "/mxbench/history", stack.token("outsider")).status == 403
    page = stack.call("GET", "/mxbench/history", stack.token("viewer"))
    assert page.status == 200, page.text
    assert "cpu1-bs64" in page.text and "data:image/png;base64," in page.text
    assert "<td>1.9.1</td>" in page.text  # the MXNet build: the version the trainer reported


def test_the_ui_lists_the_views(stack, admin):
    plugins = stack.call("GET", "/api/v2/plugins", admin).json()["plugins"]
    views = {v["name"]: v for p in plugins for v in p["external_views"]}
    assert views["Benchmark report"]["destination"] == "dag_run"
    assert views["Benchmark history"]["destination"] == "nav"


@pytest.fixture(scope="module")
def team_stack(tmp_path_factory, stack_db):
    """An api-server in Airflow's multi-team mode: the DAGs' bundle belongs to team "bench";
    "member" is a viewer in that team, "rival" a viewer in another."""
    bundles = [{"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                "kwargs": {"path": str(REPO / "dags")}, "team_name": "bench"}]
    stack = AirflowStack(tmp_path_factory.mktemp("team-stack"),
                         users={"admin": "admin", "member": "viewer:bench", "rival": "viewer:rivals"},
                         env={"AIRFLOW__CORE__MULTI_TEAM": "True",
                              "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles)})
    stack.copy_db(stack_db)
    for team in ("bench", "rivals"):  # a bundle's team must exist before the bundle is synced
        stack.airflow("teams", "create", team)
    # the rest of prepare(): the DAGs serialized (the copied DB has the pools already)
    stack.airflow("dags", "reserialize")
    with stack.stopped_at_end():
        stack.start(["api-server"])
        yield stack


def test_a_viewer_of_another_team_is_refused_the_pages_of_these_dags(team_stack):
    member, rival = team_stack.token("member"), team_stack.token("rival")
    assert team_stack.call("GET", f"/api/v2/dags/{DAG}", rival).status == 403  # Airflow's own verdict, too
    assert team_stack.call("GET", report_path("manual__any"), rival).status == 403
    assert team_stack.call("GET", "/mxbench/history", rival).status == 403
    missing = team_stack.call("GET", report_path("manual__any"), member)  # let in; there is no such run
    assert missing.status == 404 and "no DAG run" in missing.text
    assert team_stack.call("GET", "/mxbench/history", member).status == 200


# --- what a person sees, in headless Chromium -----------------------------------------------

@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver_path, "chromium and chromium-driver are missing: run scripts/setup.sh --tests as root"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--disable-dev-shm-usage", "--window-size=1400,1100", "--disable-gpu"):
        options.add_argument(arg)
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # Chromium refuses to run as root inside its sandbox
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def log_in(browser, stack, user):
    from selenium.common.exceptions import NoSuchElementException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def login_form(b):
        try:
            return b.find_element(By.NAME, "username")
        except NoSuchElementException:
            return False
        except WebDriverException as exc:  # the UI sends "/" on to the login page while it is looked at
            if "aborted by navigation" in (exc.msg or ""):
                return False
            raise

    browser.get(stack.url + "/")
    wait = WebDriverWait(browser, 60)
    wait.until(login_form).send_keys(user)
    browser.find_element(By.NAME, "password").send_keys(stack.passwords[user])
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(lambda b: "/auth/login" not in b.current_url and b.get_cookie("_token"))


def framed_page(browser, stack, path: str, title: str):
    """Open ``path`` of the UI, wait for its plugin frame named ``title`` to load its tables and
    plots; switched into that frame."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as seen
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(stack.url + path)
    wait = WebDriverWait(browser, 60)
    wait.until(seen.frame_to_be_available_and_switch_to_it((By.CSS_SELECTOR, f"iframe[title='{title}']")))
    wait.until(lambda b: b.find_elements(By.TAG_NAME, "table") and b.execute_script(
        "const imgs = [...document.images]; "
        "return imgs.length > 0 && imgs.every(i => i.complete && i.naturalWidth > 0)"))


def screenshot(browser, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.switch_to.default_content()
    path = ARTIFACTS / name
    assert browser.save_screenshot(str(path)) and path.stat().st_size > 10_000
    return path


def test_a_person_sees_the_report_and_the_history_in_the_airflow_ui(stack, finished_run, browser):
    from selenium.webdriver.common.by import By

    run_id, _ = finished_run
    log_in(browser, stack, "viewer")

    framed_page(browser, stack, f"/dags/{DAG}/runs/{urllib.parse.quote(run_id, safe='')}/plugin/benchmark-report",
                "Benchmark report")
    title = browser.find_element(By.TAG_NAME, "h1").text
    assert title.startswith(f"{DAG} · ") and title.endswith("cpu-demo: cpu1-bs64"), title  # no hash
    # the UI tab shows the page in its frame: the answer first, and what axe-core checks there holds
    answer = browser.find_element(By.ID, "answer")
    conditions = browser.find_element(By.CSS_SELECTOR, ".conditions")
    assert answer.location["y"] + answer.size["height"] <= conditions.location["y"]
    assert "cpu1-bs64" in answer.text and "samples/s" in answer.text
    assert axe_violations(browser) == []
    results = browser.find_element(By.XPATH, "//h2[text()='Results']/following-sibling::table[1]")
    headers = [th.text for th in results.find_elements(By.TAG_NAME, "th")]
    cells = [td.text for td in results.find_elements(By.TAG_NAME, "td")]
    assert "cpu1-bs64" in " ".join(cells), cells
    samples = cells[next(i for i, h in enumerate(headers) if "samples/s" in h)]
    assert float(samples.split()[0].replace(",", "")) > 0, (headers, cells)  # a measured number, not n/a
    plots = browser.find_elements(By.TAG_NAME, "img")
    # one variant, one launcher, synthetic data: no one-point scaling plot, no accuracy plot; what is
    # drawn loads and says in words what it shows
    assert plots and all(p.get_property("naturalWidth") > 300 and p.get_attribute("alt") for p in plots)
    screenshot(browser, "benchmark-report.png")

    framed_page(browser, stack, "/plugin/benchmark-history", "Benchmark history")
    table = browser.find_element(
        By.XPATH, "//h2[starts-with(text(), 'Throughput by variant')]/following-sibling::table[1]")
    assert "cpu1-bs64" in table.text and "1.9.1" in table.text
    assert browser.find_element(By.TAG_NAME, "img").get_property("naturalWidth") > 300
    screenshot(browser, "benchmark-history.png")


def test_a_person_without_access_sees_no_report(stack, finished_run, browser):
    from selenium.webdriver.common.by import By

    run_id, _ = finished_run
    browser.delete_all_cookies()
    log_in(browser, stack, "outsider")
    browser.get(stack.url + report_path(run_id))
    assert "403" in browser.find_element(By.TAG_NAME, "h1").text
    assert not browser.find_elements(By.TAG_NAME, "img")


# The trigger form as a person fills it in: a small matrix with a budget of rounds beyond Repeats, and
# the tests' short quiet check (the form's 60 s default made each round wait a minute beside the stack)
FORM_CHOICES = {"preset": "cpu-demo", "only_variants": ["cpu1-bs64"], "launchers": ["local"],
                "notes": ["trigger form test"], "repeats": 2, "max_repeats": 3, "contended_replacements": 0,
                "target_gap": 0.1, "run_timeout_minutes": 30, "epochs": 1, "synthetic_images": 500,
                "quiet_wait_s": QUIET_WAIT_S}


def trigger_form(browser, stack):
    """Open the benchmark DAG's page, press Trigger; the form's dialog once its fields are shown."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as seen
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{stack.url}/dags/{DAG}")
    wait = WebDriverWait(browser, 60)
    wait.until(seen.element_to_be_clickable((By.CSS_SELECTOR, "button[aria-label='Trigger Dag']"))).click()
    dialog = wait.until(seen.visibility_of_element_located(
        (By.CSS_SELECTOR, "[role=dialog][data-scope=dialog][data-part=content]")))
    wait.until(lambda _: dialog.find_elements(By.CSS_SELECTOR, "[data-testid=config-form] input[name=element_repeats]"))
    return dialog


def form_section(browser, dialog, title: str):
    """Open the form's section ``title`` (one section is open at a time; the others keep their values)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    item = dialog.find_element(By.XPATH, f".//*[@data-part='item'][./button[normalize-space()='{title}']]")
    if item.get_attribute("data-state") != "open":
        item.find_element(By.XPATH, "./button").click()
    sections = dialog.find_element(By.CSS_SELECTOR, "[data-testid=config-form]")
    # open, and done sliding: a click meant for a field would otherwise land where it used to be
    WebDriverWait(browser, 10).until(lambda b: item.get_attribute("data-state") == "open" and b.execute_script(
        "return arguments[0].getAnimations({subtree: true}).length === 0", sections))


def type_into(field, text: str):
    """Replace what ``field`` holds by ``text``, keystroke by keystroke (React sees each change)."""
    from selenium.webdriver.common.keys import Keys

    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(Keys.DELETE)
    field.send_keys(text)


def dag_runs(stack, admin) -> int:
    return stack.call("GET", f"/api/v2/dags/{DAG}/dagRuns", admin).json()["total_entries"]


def test_the_trigger_form_starts_the_run_it_shows(stack, admin, browser):
    """Preset, variant, launcher, repeats, the budget fields and the quiet check, chosen in the form: the DAG
    run's conf holds exactly those (and the other params' defaults), and the run task is mapped
    over one run per round, the rounds beyond Repeats optional."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from mxbench.matrix.params import PARAMS_SCHEMA
    from mxbench.matrix.variants import PRESETS

    run_id = "trigger_form_choices"
    browser.delete_all_cookies()
    log_in(browser, stack, "admin")
    dialog = trigger_form(browser, stack)

    form_section(browser, dialog, "What to run")
    dialog.find_element(By.CSS_SELECTOR, "#element_preset input[role=combobox]").click()
    options = WebDriverWait(browser, 10).until(
        lambda _: dialog.find_elements(By.CSS_SELECTOR, "#element_preset [role=option]"))
    assert [o.text for o in options] == list(PRESETS)
    next(o for o in options if o.text == FORM_CHOICES["preset"]).click()
    for name in ("only_variants", "launchers", "notes"):  # arrays: one item a line
        type_into(dialog.find_element(By.ID, f"element_{name}"), "\n".join(FORM_CHOICES[name]))
    for name in ("repeats", "max_repeats", "contended_replacements", "target_gap", "run_timeout_minutes"):
        type_into(dialog.find_element(By.NAME, f"element_{name}"), str(FORM_CHOICES[name]))
    form_section(browser, dialog, "Model")
    type_into(dialog.find_element(By.NAME, "element_epochs"), str(FORM_CHOICES["epochs"]))
    form_section(browser, dialog, "Data")
    type_into(dialog.find_element(By.NAME, "element_synthetic_images"), str(FORM_CHOICES["synthetic_images"]))
    form_section(browser, dialog, "Machines")
    type_into(dialog.find_element(By.NAME, "element_quiet_wait_s"), str(FORM_CHOICES["quiet_wait_s"]))
    form_section(browser, dialog, "Advanced Options")
    type_into(dialog.find_element(By.NAME, "dagRunId"), run_id)
    form_section(browser, dialog, "What to run")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})",
                           dialog.find_element(By.NAME, "element_max_repeats"))
    screenshot(browser, "trigger-form.png")
    dialog.find_element(By.CSS_SELECTOR, "[data-testid=trigger-dag-submit]").click()
    # the UI goes to the new run's page
    WebDriverWait(browser, 60).until(lambda b: b.current_url.endswith(f"/dags/{DAG}/runs/{run_id}"))

    dag_run = stack.call("GET", f"/api/v2/dags/{DAG}/dagRuns/{run_id}", admin).json()
    assert dag_run["conf"] == {**{name: spec["default"] for name, spec in PARAMS_SCHEMA.items()}, **FORM_CHOICES}
    assert (dag_run["triggered_by"], dag_run["triggering_user_name"]) == ("ui", "admin")
    assert not stack.call("GET", f"/api/v2/dags/{DAG}", admin).json()["is_paused"]  # the form unpaused it

    def state():
        found = stack.call("GET", f"/api/v2/dags/{DAG}/dagRuns/{run_id}", admin).json()
        return found["state"] if found["state"] in ("success", "failed") else None

    # one launcher: no pair to settle, so every round of the budget runs (a few seconds each)
    assert stack.wait_for(state, RUN_DEADLINE_S, f"DAG run {run_id}", every=3) == "success"
    picked = stack.call("GET", f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances/local.pick/xcomEntries/"
                               "return_value", admin).json()["value"]
    keys = [f"cpu1-bs64__local__r{r}" for r in (1, 2, 3)]
    assert [(run["key"], run["round"], run["optional"]) for run in picked] == [
        (keys[0], 1, False), (keys[1], 2, False), (keys[2], 3, True)]
    mapped = stack.call("GET", f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances?task_id=local.run_variant",
                        admin).json()["task_instances"]
    assert sorted((ti["map_index"], ti["rendered_map_index"], ti["state"]) for ti in mapped) == [
        (i, key, "success") for i, key in enumerate(keys)]


def test_the_trigger_form_refuses_a_bad_value_and_starts_nothing(stack, admin, browser):
    """A value the schema refuses (a target gap of 0) comes back as the form's error, naming the
    param; a required field left empty keeps the Trigger button disabled. No DAG run either way."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    run_id = "trigger_form_refused"
    before = dag_runs(stack, admin)
    browser.delete_all_cookies()
    log_in(browser, stack, "admin")
    dialog = trigger_form(browser, stack)
    form_section(browser, dialog, "What to run")
    type_into(dialog.find_element(By.NAME, "element_target_gap"), "0")
    form_section(browser, dialog, "Advanced Options")
    type_into(dialog.find_element(By.NAME, "dagRunId"), run_id)
    trigger = dialog.find_element(By.CSS_SELECTOR, "[data-testid=trigger-dag-submit]")
    trigger.click()
    error = WebDriverWait(browser, 60).until(
        lambda _: dialog.find_elements(By.CSS_SELECTOR, "[data-testid=error-alert]"))[0]
    assert "Invalid input for param target_gap: 0 is less than or equal to the minimum of 0" in error.text
    assert dialog.is_displayed()  # the form stays open, with what was typed, to be corrected
    browser.execute_script("arguments[0].scrollIntoView()", error)
    screenshot(browser, "trigger-form-refused.png")

    form_section(browser, dialog, "What to run")
    type_into(dialog.find_element(By.NAME, "element_repeats"), "")
    dialog.find_element(By.ID, "element_notes").click()  # leave the field, as a person would
    WebDriverWait(browser, 10).until(lambda _: not trigger.is_enabled())
    assert "This field is required" in dialog.text

    assert stack.call("GET", f"/api/v2/dags/{DAG}/dagRuns/{run_id}", admin).status == 404
    assert dag_runs(stack, admin) == before


def test_a_hostile_trigger_is_refused_by_name_copying_nothing_and_using_no_unmarked_connection(stack, admin,
                                                                                               tmp_path):
    """Through REST, as the trigger form sends it: a worker file as the dataset, and an SSH
    connection nobody marked for mxbench (pointing at a listener that counts who connects)."""
    import time

    from mxbench import config
    from support.counting_listener import counting_listener

    secret = b"worker-only secret for the REST case 0c4e\n"
    (tmp_path / "credentials").write_bytes(secret)
    (tmp_path / "key").write_text("not used")
    with counting_listener() as (port, seen):
        made = stack.call("POST", "/api/v2/connections", admin, {
            "connection_id": "team_b_host", "conn_type": "ssh", "host": "127.0.0.1", "port": port, "login": "ops",
            "extra": json.dumps({"key_file": str(tmp_path / "key"), "no_host_key_check": True})})
        assert made.status in (200, 201), made.text
        assert stack.call("PATCH", f"/api/v2/dags/{DAG}", admin, {"is_paused": False}).status == 200
        conf = {**CONF, "dataset": str(tmp_path / "credentials"), "allow_unverified": True,
                "launchers": ["local", "ssh"], "ssh_connections": ["team_b_host"]}
        answer = stack.call("POST", f"/api/v2/dags/{DAG}/dagRuns", admin, {"logical_date": None, "conf": conf})
        assert answer.status == 200, answer.text
        run_id = answer.json()["dag_run_id"]
        quoted = urllib.parse.quote(run_id, safe="")

        def state():
            found = stack.call("GET", f"/api/v2/dags/{DAG}/dagRuns/{quoted}", admin).json()
            return found["state"] if found["state"] in ("success", "failed") else None

        assert stack.wait_for(state, RUN_DEADLINE_S, f"DAG run {run_id}", every=3) == "failed"
        time.sleep(0.3)
    assert seen == [], "the unmarked ssh connection was used"
    folder = stack.home / "runs" / config.dag_run_dir(DAG, run_id).name
    stages = json.loads((folder / "stages.json").read_text())
    assert stages["prepare_data"].startswith(f"data preparation failed: CIFAR-10 source {tmp_path / 'credentials'} "
                                             "is not under a folder allowed for data sets")
    request = json.loads((folder / "request.json").read_text())
    assert "ssh connection 'team_b_host' is not marked for mxbench" in request["unavailable"]["ssh"]
    copies = [p for p in stack.home.rglob("*") if p.is_file() and not p.is_symlink() and p.stat().st_size < 1 << 20
              and secret in p.read_bytes()]
    assert not copies, copies
    tis = stack.call("GET", f"/api/v2/dags/{DAG}/dagRuns/{quoted}/taskInstances", admin).json()["task_instances"]
    assert {ti["task_id"]: ti["state"] for ti in tis}["prepare_data"] == "failed"
