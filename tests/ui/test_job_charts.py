"""The job page's charts (inline SVG), its history's start and lateness columns, the
choice of time zone and the optional auto-refresh (web/ui_charts.py, web/ui.py)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import timedelta

from engine.ports import DeliveryResult, InvocationRow
from tests.engine.harness import START
from web import ui_charts

SVG = "{http://www.w3.org/2000/svg}"
CONFIG = """\
jobs:
  - id: minutely
    schedule: every 1m
    timezone: Asia/Tokyo
    target: {noop: {}}
"""


def svgs(html: str) -> dict[str, ET.Element]:
    """Every chart of the page, parsed as XML (so it must be well-formed)."""
    return {element.get("id"): element
            for element in map(ET.fromstring, re.findall(r"<svg .*?</svg>", html, re.S))}


def run(ui, minutes: int) -> None:
    ui.write_config("demo", CONFIG)
    outcomes = iter(["succeeded", "failed"] * minutes)
    ui.target.respond = lambda request: DeliveryResult(next(outcomes), duration=timedelta(milliseconds=5))
    ui.until(60 * minutes + 1)


def test_two_charts_with_one_bar_per_invocation_and_accessible_titles(ui):
    run(ui, 7)
    html = ui.page("/p/demo/minutely")
    charts = svgs(html)
    history = len(re.findall(r'href="/p/demo/minutely/[^"#?]+"', re.search(r'<table class="list history">.*?</table>',
                                                                              html, re.S).group(0)))
    assert set(charts) == {"duration-chart", "lateness-chart"} and history >= 7
    for chart in charts.values():
        assert chart.get("role") == "img" and chart.find(f"{SVG}title").text.endswith("per invocation" if
                                                                                      "duration" in chart.get("id")
                                                                                      else "scheduled time)")
        bars = chart.findall(f"{SVG}rect")
        assert len(bars) == history
        assert all(bar.find(f"{SVG}title") is not None for bar in bars)
    assert {bar.get("class") for bar in charts["duration-chart"].findall(f"{SVG}rect")} >= {
        "bar bar-succeeded", "bar bar-failed"}


def test_bar_heights_follow_the_values_and_a_missing_value_is_a_bar_of_no_height():
    def row(i, started, took):
        scheduled = START + timedelta(minutes=i)
        start = None if started is None else scheduled + timedelta(seconds=started)
        return InvocationRow("p", "j", f"i{i}", "SUCCEEDED" if took is not None else "RUNNING", scheduled,
                             "schedule", started_time=start,
                             finished_time=None if took is None else start + timedelta(seconds=took))
    rows = [row(3, 1, None), row(2, 4, 2), row(1, 2, 1)]  # newest first, as the history reads
    duration, lateness = ui_charts.charts(rows)
    assert [bar.height for bar in duration.bars] == [ui_charts.HEIGHT / 2, ui_charts.HEIGHT, 0]  # oldest first
    assert [bar.height for bar in lateness.bars] == [ui_charts.HEIGHT / 2, ui_charts.HEIGHT, ui_charts.HEIGHT / 4]
    assert duration.top_label == "2.000s" and duration.bars[2].title == "i3 · RUNNING · no value"
    assert duration.bars[0].x < duration.bars[1].x < duration.bars[2].x


def test_a_backfilled_or_rerun_invocation_has_no_lateness():
    # They stand for past times on purpose: days "late" would drown the chart and the column.
    scheduled = START - timedelta(days=3)
    rows = [InvocationRow("p", "j", f"i{n}", "SUCCEEDED", scheduled, trigger, started_time=START,
                          finished_time=START + timedelta(seconds=1))
            for n, trigger in enumerate(["backfill", "manual", "catchup", "schedule"])]
    assert [ui_charts.lateness(row) for row in rows] == [None, None, timedelta(days=3), timedelta(days=3)]
    _, lateness = ui_charts.charts(rows)
    assert [bar.height for bar in lateness.bars][2:] == [0, 0]  # oldest first: the re-run, the backfill


def test_the_history_shows_start_and_lateness_in_utc_or_in_the_jobs_zone(ui):
    run(ui, 2)
    utc = ui.page("/p/demo/minutely")
    assert re.search(r'<td class="started">2026-01-05 10:0\d:00 UTC</td>', utc)
    assert re.search(r'<td class="num lateness">\d\.\d{3}s</td>', utc)
    tokyo = ui.page("/p/demo/minutely?tz=job")
    assert re.search(r'<td class="started">2026-01-05 19:0\d:00 JST</td>', tokyo)
    assert 'id="tz-job" class="on"' in tokyo and 'href="/p/demo/minutely?tz=utc#history"' in tokyo
    older = re.search(r'href="(/p/demo/minutely\?[^"]*status=failed[^"]*)"', tokyo).group(1)
    assert "tz=job" in older  # the other links keep the choice
    assert "tz must be utc or job" in ui.page("/p/demo/minutely?tz=mars", status=400)


def test_auto_refresh_is_off_by_default_and_a_link_turns_it_on_and_off(ui):
    run(ui, 1)
    page = ui.page("/p/demo/minutely")
    assert 'http-equiv="refresh"' not in page and 'href="/p/demo/minutely?refresh=30"' in page
    on = ui.page("/p/demo/minutely?refresh=30&tz=job")
    assert re.search(r'<head>.*<meta http-equiv="refresh" content="30">.*</head>', on, re.S)
    assert 'href="/p/demo/minutely?tz=job" id="refresh-off"' in on
    assert "refresh must be one of" in ui.page("/p/demo/minutely?refresh=1", status=400)
