"""Alert triage on a real Airflow api-server: its auth manager decides who may set an alert's
state (the viewer may read the history, not write it), a cross-site POST riding the login cookie
is refused, an editor's change shows on the page, and in headless Chromium a person sets a state
with the page's form inside the Airflow UI. The results store is seeded with a regression
beforehand (no DAG run needed: only the api-server runs)."""
import re
import urllib.error
import urllib.parse
import urllib.request
from datetime import timedelta

import pytest
from test_ui_stack import browser, framed_page, log_in, screenshot  # noqa: F401 (browser: a fixture)

from mxbench.run_folder import DagRunFolder
from standins.airflow_stack import AirflowStack, Response
from support.stored_runs import CPU_FP, T0, make_dag_dir, ok_runs, variant  # noqa: E402

pytestmark = pytest.mark.slow  # a real Airflow api-server and headless Chromium

DAG = "mxbench_regression"
BASE = (100.0, 101.0, 99.0, 100.5)
# two series, each with a 20% drop on its last DAG run: one triaged over HTTP, one in the browser
SERIES = {"cpu2-bs32": "scheduled__day3", "cpu4-bs32": "scheduled__day3"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory, stack_db):
    from mxbench import store

    home = tmp_path_factory.mktemp("triage-stack")
    url = f"sqlite:///{home / 'results.db'}"  # the stack's MXBENCH_HOME: the api-server's default store
    for day in range(4):
        speeds = BASE if day < 3 else tuple(s * 0.8 for s in BASE)
        runs = [run for name in SERIES for run in ok_runs(variant(name), speeds=speeds)]
        folder = make_dag_dir(home / "seed", f"day{day}", runs, started=T0 + timedelta(days=day))
        store.record_dag_run(url, DagRunFolder(folder), dag_id=DAG, run_id=f"scheduled__day{day}", trigger="scheduled")
    stack = AirflowStack(home)
    stack.url_of_store = url
    stack.copy_db(stack_db)
    with stack.stopped_at_end():
        stack.start(processes=("api-server",))
        yield stack


def post(stack, form: dict, token=None, cookie=None, headers=None) -> Response:
    """A form POST to the triage route, not following its redirect."""
    request = urllib.request.Request(stack.url + "/mxbench/history/alerts", method="POST",
                                     data=urllib.parse.urlencode(form).encode(),
                                     headers={"Content-Type": "application/x-www-form-urlencoded", **(headers or {})})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if cookie:
        request.add_header("Cookie", f"_token={cookie}")

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=60) as answer:
            return Response(answer.status, answer.read(), answer.headers)
    except urllib.error.HTTPError as error:
        return Response(error.code, error.read(), error.headers)


def alert_form(name: str, state: str, reason: str, token: str = "") -> dict:
    return {"dag_id": DAG, "run_id": SERIES[name], "variant": name, "launcher": "local", "environment": CPU_FP,
            "state": state, "reason": reason, "token": token}


def form_token(page: str) -> str:
    return page.split("name='token' value='")[1].split("'")[0]


def states(stack) -> dict:
    from mxbench import store

    alerts = store.read_alerts(stack.url_of_store)
    return {row["variant"]: (row["state"], row["changed_by"], row["reason"]) for row in alerts.to_dict("records")}


def test_the_viewer_sees_the_alerts_without_forms_and_gets_403_on_the_write(stack):
    viewer = stack.token("viewer")
    page = stack.call("GET", "/mxbench/history", viewer)
    assert page.status == 200 and "cpu2-bs32" in page.text and "<form" not in page.text
    refused = post(stack, alert_form("cpu2-bs32", "acknowledged", "not mine to say"), token=viewer)
    assert refused.status == 403 and "may not change the runs of mxbench_regression" in refused.text
    assert stack.call("POST", "/mxbench/history/alerts").status == 401  # nobody logged in
    assert states(stack) == {}


def test_a_forged_cross_site_post_with_the_editors_cookie_is_refused(stack):
    admin = stack.token("admin")
    page = stack.call("GET", "/mxbench/history", cookie=admin)
    assert page.status == 200 and page.text.count("<form method='post'") == len(SERIES)
    assert "form-action 'self'" in page.headers["Content-Security-Policy"]
    token = form_token(page.text)
    # what another site's page makes the browser send: the cookie rides along, the token cannot
    forged = post(stack, alert_form("cpu2-bs32", "expected", "forged"), cookie=admin,
                  headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
    assert forged.status == 403 and "from another site" in forged.text
    # even with the page's token (were it to leak), the browser's word that it is cross-site stands
    leaked = post(stack, alert_form("cpu2-bs32", "expected", "forged", token), cookie=admin,
                  headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
    assert leaked.status == 403
    # a client that says nothing about its origin still needs the token with a cookie
    untokened = post(stack, alert_form("cpu2-bs32", "expected", "forged"), cookie=admin)
    assert untokened.status == 403 and "token is missing" in untokened.text
    assert states(stack) == {}


def test_an_editors_change_over_the_api_shows_on_the_page(stack):
    admin = stack.token("admin")
    answer = post(stack, alert_form("cpu2-bs32", "expected", "heavier default model <on purpose>"), token=admin)
    assert answer.status == 303 and answer.headers["Location"] == "../history", answer.text
    assert states(stack)["cpu2-bs32"] == ("expected", "admin", "heavier default model <on purpose>")
    page = re.sub(r">\s+<", "><", stack.call("GET", "/mxbench/history", stack.token("viewer")).text)
    assert "<td>expected</td><td>admin</td><td>heavier default model &lt;on purpose&gt;</td>" in page
    assert "mxbench triage: admin set cpu2-bs32" in (stack.logs / "api-server.log").read_text(errors="replace")


def test_a_person_acknowledges_a_regression_in_the_airflow_ui(stack, browser):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    browser.delete_all_cookies()
    log_in(browser, stack, "admin")
    framed_page(browser, stack, "/plugin/benchmark-history", "Benchmark history")
    row = browser.find_element(By.XPATH, "//tr[td[text()='cpu4-bs32']][.//form]")
    assert "new" in [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    Select(row.find_element(By.NAME, "state")).select_by_visible_text("acknowledged")
    row.find_element(By.NAME, "reason").send_keys("slower allocator, tracked upstream")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", row)
    row.find_element(By.CSS_SELECTOR, "button[type=submit]").click()

    # the form posts, the route sends the frame back to the history page, which shows the new state
    def shown(b):
        rows = b.find_elements(By.XPATH, "//tr[td[text()='cpu4-bs32']][td[text()='acknowledged']]")
        return rows[0] if rows else None

    row = WebDriverWait(browser, 60).until(shown)
    cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    assert "admin" in cells and "slower allocator, tracked upstream" in cells
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", row)
    screenshot(browser, "benchmark-history-triage.png")
    assert states(stack)["cpu4-bs32"] == ("acknowledged", "admin", "slower allocator, tracked upstream")
