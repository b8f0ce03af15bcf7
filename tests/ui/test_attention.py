"""The attention list at the top of `/` (web/attention.py): which jobs need an on-call
engineer, judged with an explicit now, and the page that shows them."""

from __future__ import annotations

import re
from datetime import timedelta

from engine.ports import ProjectRow
from tests.engine.harness import START
from tests.ui.test_pages import text
from web import access
from web import attention as rules
from web.errors import ApiError

NOW = START + timedelta(hours=1)
LATE = rules.LATE_AFTER


def facts(job_id="j", project="p", **fields) -> rules.JobFacts:
    return rules.JobFacts(project, job_id, **fields)


def test_each_rule_with_an_explicit_now():
    assert rules.kinds_of(facts(tick_at=NOW + timedelta(minutes=1)), NOW) == ()
    assert rules.kinds_of(facts(failures=2), NOW) == ("failing",)
    assert rules.kinds_of(facts(config_error="bad schedule"), NOW) == ("config",)
    assert rules.kinds_of(facts(paused=True), NOW) == ("paused",)
    # Late: the next tick more than LATE_AFTER overdue, or an invocation that far past its timeout.
    assert rules.kinds_of(facts(tick_at=NOW - LATE + timedelta(seconds=1)), NOW) == ()
    assert rules.kinds_of(facts(tick_at=NOW - LATE - timedelta(seconds=1)), NOW) == ("late",)
    assert rules.kinds_of(facts(deadline=NOW - LATE - timedelta(seconds=1)), NOW) == ("late",)
    assert rules.kinds_of(facts(deadline=NOW - timedelta(seconds=1)), NOW) == ()
    # A paused job is not late, whatever its old tick says; one line says every reason.
    assert rules.kinds_of(facts(paused=True, tick_at=NOW - 2 * LATE, failures=1), NOW) == ("failing", "paused")


def test_the_list_is_ordered_most_urgent_first_and_bounded_with_a_count_of_the_rest():
    projects = [ProjectRow("a"), ProjectRow("broken", config_error="yaml: line 1"),
                ProjectRow("c", job_errors=["c.yaml:3: job 'x': bad"]),
                ProjectRow("p", job_errors=["p.yaml:9: job 'fine': schedule: bad"])]
    jobs = [facts("paused", paused=True), facts("fine"), facts("late", tick_at=NOW - 2 * LATE),
            facts("failing", failures=1), facts("bad", config_error="oops")]
    lines, more = rules.attention(projects, jobs, NOW)
    assert [(line.project, line.job_id, line.kinds[0]) for line in lines] == [
        ("broken", "", "config"), ("c", "", "config"), ("p", "bad", "config"), ("p", "fine", "config"),
        ("p", "failing", "failing"), ("p", "late", "late"), ("p", "paused", "paused")]
    assert lines[1].detail == "c.yaml:3: job 'x': bad" and more == 0  # no job x: its project's line
    assert lines[3].detail == "p.yaml:9: job 'fine': schedule: bad"  # the job keeps its last good definition
    lines, more = rules.attention(projects, jobs, NOW, limit=4)
    assert len(lines) == 4 and more == 3


CONFIG = """\
jobs:
  - id: flaky
    schedule: every 1m
    target: {noop: {}}
  - id: held
    schedule: every 1m
    target: {noop: {}}
  - id: steady
    schedule: every 1m
    target: {noop: {}}
  - id: changed
    schedule: every 1h
    target: {noop: {}}
"""


def test_the_front_page_lists_failing_paused_late_and_broken_jobs_of_readable_projects(ui, monkeypatch):
    ui.write_config("demo", CONFIG)
    ui.write_config("hidden", CONFIG)
    ui.target.respond = lambda request: ui_result("failed" if request.job_id == "flaky" else "succeeded")
    ui.until(70)
    ui.press("held", "pause", reason="vendor maintenance")
    ui.write_config("demo", CONFIG.replace('every 1h', '"not a schedule"'))
    real = access.authorize

    def authorize(project, permission):
        if project.id == "hidden":
            raise ApiError("NOT_FOUND", "project 'hidden' not found")
        return real(project, permission)

    monkeypatch.setattr(access, "authorize", authorize)
    html = ui.page("/")
    page = text(html)
    assert "hidden" not in page  # a project the caller may not read is not there
    section = re.search(r'id="attention".*?</section>', html, re.S).group(0)
    assert 'href="/p/demo/flaky"' in section and 'href="/p/demo/held"' in section
    assert 'href="/p/demo/changed"' in section and 'href="/p/demo/steady"' not in section
    assert "demo/held paused" in page and "vendor maintenance" in page
    assert "demo/flaky failing" in page and "1 failure in a row" in page
    assert "demo/changed config" in page
    assert page.index("Needs attention") < page.index("Projects Project Jobs")

    ui.clock.current += timedelta(minutes=10)  # nothing ran: every tick is now overdue
    page = text(ui.page("/"))
    assert "demo/steady late" in page and "next tick was due" in page


def test_nothing_to_see_says_so_and_a_long_list_says_how_many_more(ui, monkeypatch):
    assert 'id="attention-none"' in ui.page("/")
    monkeypatch.setattr(rules, "ATTENTION_LIMIT", 1)
    ui.write_config("demo", CONFIG)
    ui.press("held", "pause")
    ui.press("steady", "pause")
    html = ui.page("/")
    assert html.count('class="attention-paused"') == 1 and "and 1 more not shown" in text(html)


def ui_result(outcome):
    from engine.ports import DeliveryResult
    return DeliveryResult(outcome)


def test_a_large_projects_facts_are_read_once_a_minute_and_judged_at_the_time_of_the_request(ui):
    from engine.metrics import JobSeriesCache

    ticks = [0.0]
    ui.write_config("demo", CONFIG)
    # As for a project of 1,000 jobs or more (`small`), here with the demo's five.
    ui.app.extensions["sundial_job_attention"] = JobSeriesCache(60, clock=lambda: ticks[0], small=1,
                                                                summarize=rules.facts)
    assert 'id="attention-none"' in ui.page("/")
    ui.press("held", "pause")
    assert 'id="attention-none"' in ui.page("/")  # the facts are a minute old at most ...
    ui.clock.current += timedelta(minutes=10)
    assert "demo/steady late" in text(ui.page("/"))  # ... lateness is judged now
    ticks[0] = 61
    assert "demo/held paused" in text(ui.page("/"))
