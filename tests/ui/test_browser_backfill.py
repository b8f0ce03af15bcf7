"""The Backfill form of a job page and the Re-run button of an invocation page, in a real
browser (headless Chromium) against a real `main.py serve` and a real receiver."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tests.e2e.support import Receiver, Server, wait_until
from tests.ui import browser

pytestmark = pytest.mark.skipif(bool(browser.unavailable()), reason=browser.unavailable() or "ok")

CONFIG = """\
jobs:
  - id: hourly
    schedule: "0 * * * *"
    target: {http: {url: "URL/hourly", body: 'for ${scheduledTime}'}}
  - id: held
    schedule: "0 * * * *"
    target: {http: {url: "URL/held", async: true}}
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui-backfill")
    receiver = Receiver(statuses={"/held": 202})  # async: RUNNING until it reports, which it never does
    configs = tmp / "configs"
    configs.mkdir()
    (configs / "shop.yaml").write_text(CONFIG.replace("URL", receiver.url))
    server = Server(configs, tmp / "sundial.db", tmp / "server.log").start()
    driver = browser.start_browser()
    driver.implicitly_wait(5)
    try:
        yield server, driver, receiver
    finally:
        driver.quit()
        server.stop()
        receiver.close()


def _fill_backfill(driver, start: datetime, end: datetime) -> str:
    from selenium.webdriver.common.by import By

    for name, moment in (("backfill-start", start), ("backfill-end", end)):
        field = driver.find_element(By.ID, name)
        driver.execute_script("arguments[0].value = arguments[1]", field, moment.strftime("%Y-%m-%dT%H:%M:%S"))
    driver.find_element(By.ID, "backfill-submit").click()
    return driver.find_element(By.CLASS_NAME, "flash").text


def _scheduled(arrival) -> str:
    return arrival.headers["X-Sundial-Scheduled-Time"]


def test_backfill_a_range_from_the_job_page_then_rerun_one_from_its_page(site):
    from selenium.webdriver.common.by import By

    server, driver, receiver = site
    driver.get(server.url + "/p/shop/hourly")
    assert "UTC" in driver.find_element(By.ID, "backfill").text  # the form says which zone its times are in
    end = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    start = end - timedelta(hours=3)
    assert "Backfill started: 3 invocations" in _fill_backfill(driver, start, end)
    assert wait_until(lambda: len(receiver.at_path("/hourly")) >= 3, 10)
    expected = [(start + timedelta(hours=i)).strftime("%Y-%m-%dT%H:00:00.000Z") for i in range(3)]
    assert [_scheduled(a) for a in receiver.at_path("/hourly")] == expected

    driver.refresh()
    row = driver.find_element(By.CSS_SELECTOR, "#history tbody tr")
    assert "backfill" in row.text
    row.find_element(By.TAG_NAME, "a").click()
    old_url = driver.current_url
    driver.find_element(By.ID, "rerun").click()
    assert "Re-run of" in driver.find_element(By.CLASS_NAME, "flash").text
    assert driver.current_url != old_url  # the new invocation's page
    assert "manual" in driver.find_element(By.CLASS_NAME, "facts").text
    assert wait_until(lambda: len(receiver.at_path("/hourly")) >= 4, 10)
    again = receiver.at_path("/hourly")[3]
    assert again.headers["X-Sundial-Invocation"] in driver.current_url
    assert _scheduled(again) in expected and again.body == f"for {_scheduled(again)}"


def test_the_job_page_counts_the_backfilled_occurrences_still_waiting(site):
    from selenium.webdriver.common.by import By

    server, driver, receiver = site
    end = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    driver.get(server.url + "/p/shop/held")
    assert "Backfill started: 3 invocations" in _fill_backfill(driver, end - timedelta(hours=3), end)
    # The first one runs until its target reports (never); the other two wait behind it.
    assert "2 backfilled occurrences waiting their turn" in driver.find_element(By.ID, "backfill-waiting").text


def test_the_backfill_form_says_why_it_refuses(site):
    server, driver, receiver = site
    driver.get(server.url + "/p/shop/hourly")
    now = datetime.now(timezone.utc)
    message = _fill_backfill(driver, now - timedelta(hours=1), now + timedelta(hours=1))
    assert "Not backfilled" in message and "in the future" in message
