"""description, labels, start, end and jitter on the job page and the jobs list."""

from __future__ import annotations

from tests.ui.test_pages import text

PROJECT = """\
jobs:
  - id: export
    schedule: every 1m
    description: Nightly export of <b>sessions</b>
    labels: {team: data, tier: "1"}
    jitter: 30s
    start: "2026-01-01T00:00:00Z"
    end: "2126-01-01T00:00:00Z"
    target: {noop: {}}
  - id: plain
    schedule: every 1m
    target: {noop: {}}
"""


def test_the_job_page_shows_the_description_labels_and_bounds(ui):
    ui.write_config("demo", PROJECT)
    html = ui.page("/p/demo/export")
    assert "Nightly export of &lt;b&gt;sessions&lt;/b&gt;" in html  # escaped, never markup
    page = text(html)
    assert "team: data" in page and "tier: 1" in page
    assert "Start 2026-01-01T00:00:00Z" in page and "End 2126-01-01T00:00:00Z" in page
    assert "Jitter up to 30s after each time" in page
    assert 'href="/p/demo?label=team:data"' in html
    assert 'id="job-description"' not in ui.page("/p/demo/plain")


def test_the_jobs_list_shows_them_and_filters_by_label(ui):
    ui.write_config("demo", PROJECT)
    page = text(ui.page("/p/demo"))
    assert "Nightly export of &lt;b&gt;sessions&lt;/b&gt;" in page and "team: data" in page
    assert "plain" in page
    filtered = ui.page("/p/demo?label=team:data")
    assert 'id="job-export"' in filtered and 'id="job-plain"' not in filtered


def test_the_next_fire_times_start_at_start_and_stop_at_end(ui):
    ui.write_config("demo", """\
jobs:
  - id: later
    schedule: every 1h
    start: "2126-01-01T00:00:00Z"
    end: "2126-01-01T02:00:00Z"
    target: {noop: {}}
""")
    html = ui.page("/p/demo/later")
    listed = html[html.index('class="fire-times"'):html.index("</ol>")]
    assert listed.count("<li>") == 3  # 00:00, 01:00 and 02:00: both bounds fire, nothing after
    assert "2126-01-01 00:00:00 UTC" in listed and "2126-01-01 02:00:00 UTC" in listed
