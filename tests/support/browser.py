"""Headless Chromium as a reader's screen (1366x768, the commonest laptop size), and what the
report tests ask of a page there: where the answer and the conditions box sit, the forest plot's
rows, axe-core's accessibility findings, and a screenshot for review."""
import contextlib
import os
import shutil
from pathlib import Path

from conftest import REPO

SCREEN = (1366, 768)
AXE = REPO / ".venv" / "axe" / "axe.min.js"  # scripts/setup.sh --tests fetches it (scripts/fetch_axe.py)
# screenshots land here for CI to keep; MXBENCH_TEST_ARTIFACTS moves them
ARTIFACTS = Path(os.environ.get("MXBENCH_TEST_ARTIFACTS", REPO / "test-artifacts"))


@contextlib.contextmanager
def chromium(width: int = SCREEN[0], height: int = SCREEN[1]):
    """A Selenium driver whose page viewport is exactly width x height."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    assert binary and driver_path, "chromium and chromium-driver are missing: run scripts/setup.sh --tests as root"
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--disable-dev-shm-usage", f"--window-size={width},{height + 200}",
                "--disable-gpu"):
        options.add_argument(arg)
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # Chromium refuses to run as root inside its sandbox
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    driver.set_page_load_timeout(60)
    # the window's own bars would eat into the page: the viewport itself is the reader's screen
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    try:
        yield driver
    finally:
        driver.quit()


def layout(driver) -> dict:
    """Where the answer block and the conditions box lie on the page (CSS pixels from its top), the
    viewport's height, the forest plot's rows and the page title."""
    return driver.execute_script("""
        const box = (el) => el ? {top: el.getBoundingClientRect().top + window.scrollY,
                                    bottom: el.getBoundingClientRect().bottom + window.scrollY} : null;
        return {answer: box(document.getElementById('answer')),
                conditions: box(document.querySelector('.conditions')),
                viewport: window.innerHeight,
                rows: [...document.querySelectorAll('svg.forest g.forest-row')].map(
                    g => [g.dataset.variant, g.dataset.pair, g.dataset.verdict]),
                title: document.querySelector('h1').textContent};""")


def axe_violations(driver, impacts=("serious", "critical")) -> list:
    """axe-core's violations of the page in the driver's current frame, of the given impacts:
    [(rule id, impact, how many nodes, help)]."""
    assert AXE.is_file(), f"{AXE} is missing: run scripts/setup.sh --tests (it fetches axe-core)"
    driver.set_script_timeout(120)
    driver.execute_script(AXE.read_text(encoding="utf-8"))
    found = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations.map("
        "  v => [v.id, v.impact, v.nodes.length, v.help])))"
        ".catch(e => done([['axe-error', 'critical', 0, String(e)]]));")
    return [v for v in found if v[1] in impacts]


def screenshot(driver, name: str) -> Path:
    """The whole first screen, saved under ARTIFACTS for review."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    assert driver.save_screenshot(str(path)) and path.stat().st_size > 10_000
    return path
