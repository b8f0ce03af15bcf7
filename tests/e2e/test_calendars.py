"""Exclusion calendars through the real server, on the embedded backend: a project file's
calendar holds a few seconds of an `every 1s` job; those occurrences are SKIPPED/excluded,
the receiver hears only the others, and the job page shows the reason."""

from __future__ import annotations

import urllib.request
from datetime import datetime, timedelta, timezone

from tests.e2e.support import Receiver, Server, wait_until


def _wall(moment: datetime) -> str:
    return moment.replace(tzinfo=None).isoformat(timespec="seconds")


def test_an_excluded_range_is_skipped_and_shown_with_its_reason(tmp_path):
    receiver = Receiver()
    now = datetime.now(timezone.utc).replace(microsecond=0)
    start, end = now + timedelta(seconds=8), now + timedelta(seconds=11)
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "e2e.yaml").write_text(f"""
calendars:
  pause-window:
    ranges: [{{start: "{_wall(start)}", end: "{_wall(end)}"}}]
jobs:
  - id: ticker
    schedule: every 1s
    exclude: [pause-window]
    target: {{http: {{url: "{receiver.url}/tick"}}}}
""")
    server = Server(configs, tmp_path / "sundial.db", tmp_path / "server.log").start()
    try:
        after = end + timedelta(seconds=2)
        assert wait_until(lambda: any(row["scheduled_time"] >= after.isoformat().replace("+00:00", ".000Z")
                                      for row in server.invocations("e2e", "ticker")), timeout=60)
        rows = server.invocations("e2e", "ticker")
        stamp = lambda moment: moment.isoformat().replace("+00:00", ".000Z")  # noqa: E731
        inside = [row for row in rows if stamp(start) <= row["scheduled_time"] < stamp(end)]
        assert [(row["status"], row["reason"]) for row in inside] == [("SKIPPED", "excluded")] * 3, inside
        heard = {arrival.headers["X-Sundial-Scheduled-Time"] for arrival in receiver.at_path("/tick")}
        assert not heard & {row["scheduled_time"] for row in inside}
        assert stamp(end) in heard  # the range ends before `end`: that second runs
        job = server.get("/api/v1/projects/e2e/jobs/ticker")
        assert job["exclude"][0]["name"] == "pause-window"
        with urllib.request.urlopen(f"{server.url}/p/e2e/ticker?status=skipped", timeout=10) as page:
            html = page.read().decode()
        assert "<td>excluded</td>" in html
        with urllib.request.urlopen(f"{server.url}/p/e2e/ticker", timeout=10) as page:
            assert "pause-window (UTC)" in page.read().decode()  # the job's policies name its calendars
    finally:
        server.stop()
        receiver.close()
