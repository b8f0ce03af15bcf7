"""Take the README's screenshots of the web UI: a real `main.py serve` with a demo
project, a real receiver answering its deliveries, headless Chromium.

    .venv/bin/python docs/screenshots/take.py     # writes docs/screenshots/*.png (~30 s)

The project has what an on-call engineer meets: jobs on cron and fixed-rate schedules
in different time zones, one that keeps failing (with retries), one paused with a
reason, one only triggered by hand, one-off reminders, and a config entry with an error.
"""

from __future__ import annotations

import base64
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.e2e.support import Receiver, Server, wait_until  # noqa: E402
from tests.ui.browser import start_browser, unavailable  # noqa: E402

OUT = Path(__file__).resolve().parent
WARM_UP_SECONDS = 20  # long enough for a strip of recent outcomes on the fast jobs

CONFIG = """\
defaults:
  timezone: America/Los_Angeles
  retry: {{max_attempts: 2, min_backoff: 1s, max_backoff: 5s}}
jobs:
  - id: cache-warmer
    schedule: "*/3 * * * * ?"
    timezone: UTC
    target: {{http: {{url: "{url}/warm", method: GET}}}}
  - id: email-digest
    schedule: "0 0 7 * * ?"
    target: {{http: {{url: "{url}/digest", body: '{{"date":"${{yesterdaysDate}}"}}'}}}}
  - id: inventory-sync
    schedule: every 5s
    overlap: skip
    target:
      http:
        url: "{url}/inventory"
        headers: {{Content-Type: application/json, Authorization: Bearer demo-token}}
        body: '{{"from":"${{startOfHour}}","invocation":"${{invocationId}}"}}'
  - id: nightly-export
    schedule: "0 30 2 * * ?"
    description: "Exports yesterday's orders to the warehouse bucket"
    labels: {{team: data, tier: "1"}}
    jitter: 5m
    target: {{http: {{url: "{url}/export", body: '{{"day":"${{startOfPreviousDay}}"}}'}}}}
  - id: payment-reconcile
    schedule: "*/4 * * * * ?"
    timezone: Europe/Berlin
    labels: {{team: payments}}
    on_failure:
      http:
        url: "{url}/chat-hook"
        body: '{{"text":"${{jobId}} ${{status}}: ${{reason}} (${{failures}} in a row)"}}'
    target:
      http:
        url: "{url}/reconcile"
        headers: {{Content-Type: application/json}}
        body: '{{"until":"${{startOfHour}}","run":"${{invocationId}}"}}'
  - id: rebuild-search-index
    schedule: triggered
    target: {{http: {{url: "{url}/reindex"}}}}
  - id: reminders
    at: ["{at1}", "{at2}"]
    target: {{http: {{url: "{url}/remind"}}}}
  - id: weekly-report
    schedule: "0 9 * * MON"
    timezone: Europe/London
    target: {{http: {{url: "{url}/report"}}}}
  - id: legacy-cleanup
    schedule: "0 0 4 * * * *"
    target: {{http: {{url: "{url}/cleanup"}}}}
"""


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def shoot(driver, url: str, name: str, width: int = 1280) -> None:
    """A full-page PNG of `url` (Chromium renders beyond the window through CDP)."""
    driver.get(url)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, 900)
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": width, "height": min(height, 2400), "scale": 1}})
    (OUT / f"{name}.png").write_bytes(base64.b64decode(shot["data"]))
    print(f"wrote docs/screenshots/{name}.png ({width}x{min(height, 2400)})")


def main() -> int:
    if unavailable():
        print(f"cannot take screenshots: {unavailable()}", file=sys.stderr)
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="sundial-screenshots-"))
    receiver = Receiver(delays={"/inventory": 0.05})
    configs = tmp / "configs"
    configs.mkdir()
    soon = datetime.now(timezone.utc) + timedelta(days=2)
    config = CONFIG.format(url=receiver.url, at1=iso(soon), at2=iso(soon + timedelta(days=7)))
    (configs / "shop.yaml").write_text(config)
    server = Server(configs, tmp / "sundial.db", tmp / "server.log").start()
    driver = start_browser()
    try:
        jobs = "/api/v1/projects/shop/jobs"
        server.call("POST", f"{jobs}/rebuild-search-index:trigger")
        server.call("POST", f"{jobs}/email-digest:pause", {"reason": "mail provider outage, INC-4821"})
        time.sleep(WARM_UP_SECONDS / 2)
        receiver.statuses["/reconcile"] = 502  # the payment provider starts failing
        time.sleep(WARM_UP_SECONDS / 2)
        server.call("POST", f"{jobs}/rebuild-search-index:trigger")
        # A config entry with an error, shown on the project's page (the import re-reads within 1 s).
        text = (configs / "shop.yaml").read_text().replace('"0 0 4 * * * *"', '"0 0 4 * * * * 1999"')
        (configs / "shop.yaml").write_text(text)
        wait_until(lambda: server.get("/api/v1/projects")["projects"][0]["job_errors"], 10)
        # Three past nights of the export run again, as after an incident.
        today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
        server.call("POST", f"{jobs}/nightly-export:backfill", {"start": iso(today - timedelta(days=3)),
                                                                "end": iso(today)})
        wait_until(lambda: len(server.invocations("shop", "nightly-export")) >= 3, 10)
        failed = [i for i in server.invocations("shop", "payment-reconcile") if i["status"] == "FAILED"]
        shoot(driver, server.url + "/", "attention")
        shoot(driver, server.url + "/p/shop", "jobs")
        shoot(driver, server.url + "/p/shop/payment-reconcile", "job")
        shoot(driver, server.url + f"/p/shop/payment-reconcile/{failed[-1]['id']}", "invocation")
        shoot(driver, server.url + "/p/shop/nightly-export", "backfill")
    finally:
        driver.quit()
        server.stop()
        receiver.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
