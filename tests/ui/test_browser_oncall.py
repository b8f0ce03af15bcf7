"""The on-call views in a real browser: headless Chromium against a real `main.py serve`
delivering to a real receiver that fails one job. The attention list on `/` leads to the
failing job, whose page draws its charts with no script."""

from __future__ import annotations

import pytest

from tests.e2e.support import Receiver, Server, wait_until
from tests.ui import browser

pytestmark = pytest.mark.skipif(bool(browser.unavailable()), reason=browser.unavailable() or "ok")

CONFIG = """\
jobs:
  - id: flaky-sync
    schedule: "* * * * * ?"
    target: {{http: {{url: "{url}/flaky"}}}}
  - id: quiet
    schedule: triggered
    target: {{http: {{url: "{url}/quiet"}}}}
"""


def test_the_attention_list_leads_to_the_failing_job_and_its_charts(tmp_path):
    from selenium.webdriver.common.by import By

    receiver = Receiver(statuses={"/flaky": 500})
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "shop.yaml").write_text(CONFIG.format(url=receiver.url))
    server = Server(configs, tmp_path / "sundial.db", tmp_path / "server.log").start()
    driver = browser.start_browser()
    driver.implicitly_wait(5)
    try:
        finished = lambda: [row for row in server.invocations("shop", "flaky-sync")  # noqa: E731
                            if row["status"] == "FAILED"]
        assert wait_until(lambda: len(finished()) >= 2, 20)  # a second apart
        driver.get(server.url + "/")
        attention = driver.find_element(By.ID, "attention")
        assert "shop/flaky-sync" in attention.text and "failing" in attention.text
        assert "quiet" not in attention.text  # never run, never failed: nothing to see
        attention.find_element(By.LINK_TEXT, "shop/flaky-sync").click()

        chart = driver.find_element(By.ID, "duration-chart")
        assert chart.is_displayed() and chart.size["width"] > 100
        title = driver.find_element(By.ID, "duration-chart-title").get_attribute("textContent")
        assert title == "Duration per invocation"
        bars = chart.find_elements(By.CSS_SELECTOR, "rect.bar")
        rows = driver.find_elements(By.CSS_SELECTOR, "#history tbody tr")
        assert len(bars) == len(rows) >= 2
        assert any(bar.get_attribute("class") == "bar bar-failed" for bar in bars)
        assert "<script" not in driver.page_source  # the page draws without any
    finally:
        driver.quit()
        server.stop()
        receiver.close()
