"""The console in a real browser: Debian's chromium, headless, driven by
Selenium through chromedriver (`make console-test` installs both when missing). Against a real
proxy process and the simulator: the pages load without console errors and show no data
before the admin key is given; then a key created through the admin API is listed, a response
looked up by id shows with its replayed stream, and a running background job is cancelled from
the page. Screenshots go to tests/artifacts/ (gitignored)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.servers import ServerProcess, start_proxy

pytestmark = [pytest.mark.e2e, pytest.mark.console]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
ADMIN = "adm-console-" + "0123456789abcdef" * 2
WAIT = 15.0  # seconds any one thing may take to show (a bound, not a speed claim)

webdriver = pytest.importorskip("selenium.webdriver")
if not (Path(CHROMIUM).exists() and Path(DRIVER).exists()):
    pytest.skip("chromium and chromedriver are needed: `make console-test` installs them",
                allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def proxy(simulator: ServerProcess) -> Iterator[ServerProcess]:
    server = start_proxy(simulator.url, "--admin-key", ADMIN)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(DRIVER))
    driver.set_page_load_timeout(WAIT)
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


def admin_api(proxy: ServerProcess, method: str, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(method, proxy.url + path, timeout=30,
                         headers={"authorization": f"Bearer {ADMIN}"}, **kwargs)


def shot(driver: Any, name: str) -> None:
    driver.save_screenshot(str(ARTIFACTS / f"console-{name}.png"))


def errors(driver: Any) -> list[dict[str, Any]]:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def until(driver: Any, condition: Any) -> Any:
    return WebDriverWait(driver, WAIT).until(condition)


def text_in(element_id: str, text: str) -> Any:
    return ec.text_to_be_present_in_element((By.ID, element_id), text)


def tab(driver: Any, name: str) -> None:
    driver.find_element(By.CSS_SELECTOR, f"nav button[data-tab='{name}']").click()


def test_the_console_end_to_end(proxy: ServerProcess, browser: Any) -> None:
    made = admin_api(proxy, "POST", "/admin/keys", json={"name": "browser-team",
                                                          "token_budget": 100000})
    assert made.status_code == 201, made.text
    client = {"authorization": f"Bearer {made.json()['key']}"}
    stored = httpx.post(proxy.url + "/v1/responses", headers=client, timeout=30,
                        json={"model": "sim-model", "input": "inspect me", "stream": False})
    assert stored.status_code == 200, stored.text
    job = httpx.post(proxy.url + "/v1/responses", headers=client, timeout=30,
                     json={"model": "sim-model", "background": True,
                           "input": "cancel me [[sim tokens=3000 delay_ms=20]]"}).json()

    # Without the key: the page loads, shows no data, and says what to do.
    browser.get(proxy.url + "/console")
    until(browser, text_in("error", "admin key"))
    assert browser.find_elements(By.CSS_SELECTOR, "#fleet-rows tr") == []
    shot(browser, "0-locked")

    browser.find_element(By.ID, "admin-key").send_keys(ADMIN)
    browser.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()
    until(browser, text_in("fleet-rows", "replica-1"))
    shot(browser, "1-fleet")

    tab(browser, "keys")
    until(browser, text_in("key-rows", "browser-team"))
    shot(browser, "2-keys")

    tab(browser, "inspect")
    browser.find_element(By.ID, "lookup-id").send_keys(stored.json()["id"])
    browser.find_element(By.CSS_SELECTOR, "#lookup button").click()
    until(browser, text_in("r-status", "completed"))
    assert "inspect me" in browser.find_element(By.ID, "r-input").text
    browser.find_element(By.ID, "replay").click()
    until(browser, text_in("r-events", "response.completed"))
    assert "response.created" in browser.find_element(By.ID, "r-events").text
    shot(browser, "3-inspector")

    tab(browser, "jobs")
    until(browser, text_in("job-rows", job["id"]))
    shot(browser, "4-jobs")
    browser.find_element(By.CSS_SELECTOR, f"button.cancel[data-id='{job['id']}']").click()
    deadline = time.monotonic() + WAIT
    status = None
    while time.monotonic() < deadline:
        status = httpx.get(f"{proxy.url}/v1/responses/{job['id']}", headers=client,
                           timeout=10).json()["status"]
        if status == "cancelled":
            break
        time.sleep(0.2)
    assert status == "cancelled"
    shot(browser, "5-cancelled")

    assert errors(browser) == []
