"""The web UI in a real browser: headless Chromium against a real `main.py serve`, which
delivers to a real HTTP receiver. One server and one browser for the whole file."""

from __future__ import annotations

import pytest

from tests.e2e.support import Receiver, Server, wait_until
from tests.ui import browser

pytestmark = pytest.mark.skipif(bool(browser.unavailable()), reason=browser.unavailable() or "ok")

CONFIG = """\
jobs:
  - id: nightly-export
    schedule: "0 0 3 * * ?"
    timezone: America/Los_Angeles
    target: {{http: {{url: "{url}/export"}}}}
  - id: on-demand
    schedule: triggered
    target: {{http: {{url: "{url}/on-demand", body: 'run ${{invocationId}}'}}}}
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui")
    receiver = Receiver()
    configs = tmp / "configs"
    configs.mkdir()
    (configs / "shop.yaml").write_text(CONFIG.format(url=receiver.url))
    server = Server(configs, tmp / "sundial.db", tmp / "server.log").start()
    driver = browser.start_browser()
    driver.implicitly_wait(5)  # find_element waits this long for an element to appear
    try:
        yield server, driver, receiver
    finally:
        driver.quit()
        server.stop()
        receiver.close()


def body_text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def test_from_the_project_list_to_a_job_trigger_it_and_read_the_log(site):
    from selenium.webdriver.common.by import By

    server, driver, receiver = site
    driver.get(server.url + "/")
    driver.find_element(By.LINK_TEXT, "shop").click()
    listing = body_text(driver)
    assert "nightly-export" in listing and "at 03:00 every day, America/Los_Angeles" in listing
    assert "on-demand" in listing and "never run" in listing

    driver.find_element(By.LINK_TEXT, "on-demand").click()
    assert "No invocations" in body_text(driver)  # nothing yet
    driver.find_element(By.ID, "trigger").click()
    assert "Triggered: invocation" in driver.find_element(By.CLASS_NAME, "flash").text
    first = driver.find_element(By.CSS_SELECTOR, "#history tbody tr")
    assert "manual" in first.text
    invocation = first.find_element(By.TAG_NAME, "a").text
    assert wait_until(lambda: receiver.at_path("/on-demand"), 10)

    first.find_element(By.TAG_NAME, "a").click()

    def finished() -> bool:
        driver.refresh()
        return "finished: SUCCEEDED" in driver.find_element(By.ID, "timeline").text

    assert wait_until(finished, 10, interval=0.3)
    assert f"run {invocation}" in driver.find_element(By.ID, "request").text  # the body, rendered
    assert "attempt 1: succeeded" in driver.find_element(By.ID, "timeline").text
    assert "HTTP 200" in driver.find_element(By.ID, "attempts").text


def test_pause_with_a_reason_and_see_it_shown(site):
    from selenium.webdriver.common.by import By

    server, driver, _ = site
    driver.get(server.url + "/p/shop/nightly-export")
    driver.find_element(By.ID, "pause-reason").send_keys("warehouse DB migration <tonight>")
    driver.find_element(By.ID, "pause").click()
    assert driver.find_element(By.ID, "pause-reason-shown").text == "warehouse DB migration <tonight>"
    assert "PAUSED" in body_text(driver) and driver.find_elements(By.ID, "resume")
    driver.get(server.url + "/p/shop")
    assert "warehouse DB migration <tonight>" in body_text(driver)
    assert server.get("/api/v1/projects/shop/jobs/nightly-export")["paused"] is True
