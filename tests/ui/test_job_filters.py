"""The jobs list's state filters and its last success and lateness columns (web/ui_filters.py)."""

from __future__ import annotations

import re
from datetime import timedelta

from engine.ports import DeliveryResult
from statemachine.policy import Tuning
from tests.engine.harness import START
from tests.ui.conftest import Ui
from tests.ui.test_pages import text
from web import ui as ui_module
from web import ui_filters

CONFIG = """\
jobs:
  - id: a-flaky
    schedule: every 1m
    target: {noop: {}}
  - id: b-steady
    schedule: every 1m
    target: {noop: {}}
  - id: c-held
    schedule: every 1m
    target: {noop: {}}
  - id: d-gone
    schedule: every 1m
    target: {noop: {}}
"""


def shown(html: str) -> list[str]:
    return re.findall(r'<tr id="job-([^"]+)"', html)


def setup(ui) -> None:
    ui.write_config("demo", CONFIG)
    ui.target.respond = lambda request: DeliveryResult("failed" if request.job_id == "a-flaky" else "succeeded")
    ui.until(70)
    ui.press("c-held", "pause", reason="maintenance")
    ui.write_config("demo", CONFIG.split("  - id: d-gone")[0])


def test_each_state_filter_shows_only_its_jobs(ui):
    setup(ui)
    assert shown(ui.page("/p/demo")) == ["a-flaky", "b-steady", "c-held", "d-gone", "from-config"]
    assert shown(ui.page("/p/demo?state=failing")) == ["a-flaky"]
    assert shown(ui.page("/p/demo?state=paused")) == ["c-held"]
    assert shown(ui.page("/p/demo?state=disabled")) == ["d-gone", "from-config"]
    assert shown(ui.page("/p/demo?state=running")) == []
    assert shown(ui.page("/p/demo?state=late")) == []
    ui.clock.current += timedelta(minutes=10)  # nothing ran: the live jobs' ticks are overdue
    assert shown(ui.page("/p/demo?state=late")) == ["a-flaky", "b-steady"]
    html = ui.page("/p/demo?state=paused")
    assert re.search(r'<a href="/p/demo\?state=paused" class="on" aria-current="page">paused</a>', html)
    assert "no state filter &#39;nope&#39;" in ui.page("/p/demo?state=nope", status=400)


def test_a_filtered_list_reads_a_bounded_number_of_store_pages_and_goes_on_from_there(ui, monkeypatch):
    setup(ui)
    monkeypatch.setattr(ui_module, "JOBS_PAGE_SIZE", 1)
    monkeypatch.setattr(ui_filters, "FILTER_SCAN_PAGES", 2)
    first = ui.page("/p/demo?state=paused")  # reads a-flaky and b-steady only
    assert shown(first) == [] and "No paused jobs on this stretch of the list" in text(first)
    token = re.search(r'rel="next" href="[^"]*page_token=([^"&]+)', first).group(1)
    assert "state=paused" in re.search(r'rel="next" href="([^"]+)"', first).group(1)
    assert shown(ui.page(f"/p/demo?state=paused&page_token={token}")) == ["c-held"]


def test_last_success_and_the_lateness_of_the_last_invocation_are_columns(ui):
    setup(ui)
    row = re.search(r'<tr id="job-b-steady">.*?</tr>', ui.page("/p/demo"), re.S).group(0)
    assert re.search(r'class="last-success"><time [^>]*>\d+s ago</time>', row)
    assert re.search(r'class="lateness num">\d\.\d{3}s<', row)
    never = re.search(r'<tr id="job-a-flaky">.*?</tr>', ui.page("/p/demo"), re.S).group(0)
    assert re.search(r'class="last-success"><span class="muted">—</span>', never)


def test_durations_read_in_the_largest_sensible_unit():
    assert [ui_filters.duration_text(timedelta(seconds=s)) for s in (0.0421, 12.54, 200, 7500, -3)] == [
        "0.042s", "12.5s", "3m 20s", "2h 5m", "-3.000s"]
    assert ui_filters.duration_text(None) == ""


def test_a_job_staged_ahead_of_its_time_is_shown_scheduled_not_running(tmp_path):
    """Committed 10 s ahead, nothing sent: the list, its `running` filter and the job page
    show it as due at its time, as they do once it has been sent as running."""
    ui = Ui(tmp_path, Tuning(stage_ahead=timedelta(seconds=10)))
    ui.write_config("demo", "jobs:\n  - id: soon\n    schedule: '* * * * *'\n    target: {noop: {}}\n")
    seen = {}

    def two_seconds_before():
        ui.clock.current = START + timedelta(seconds=58)
        seen["list"] = ui.page("/p/demo")
        seen["running"] = shown(ui.page("/p/demo?state=running"))
        seen["page"] = text(ui.page("/p/demo/soon"))
    ui.clock.while_sleeping = two_seconds_before
    ui.target.check = lambda request: seen.update(sent=shown(ui.page("/p/demo?state=running")))
    ui.until(61)
    row = text(re.search(r'id="job-soon".*?</tr>', seen["list"], re.S).group(0))
    assert "SCHEDULED in 2s" in row and "RUNNING" not in row
    assert seen["running"] == [] and seen["sent"] == ["soon"]
    assert "soon SCHEDULED" in seen["page"]
    assert "Next run in 2s 2026-01-05 10:01:00 UTC" in seen["page"] and "due in 2s" in seen["page"]
