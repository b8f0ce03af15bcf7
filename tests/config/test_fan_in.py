"""Fan-in (`after`, `after_window`) in a project file: the definition and the policy it
gives, who reports to whom, and its errors (exact line and text), cycles included."""

from datetime import timedelta

import pytest

from statemachine.definition import JobDefinition
from tests.config.helpers import errors, project

JOBS = """
    jobs:
      - id: extract-a
        schedule: "@daily"
        target: {{noop: {{}}}}
      - id: extract-b
        schedule: "@daily"
        target: {{noop: {{}}}}
      - id: report
        {fields}
        target: {{noop: {{}}}}
    """


def _jobs(fields: str) -> str:
    return JOBS.format(fields=fields)


def test_after_gives_a_triggered_job_and_tells_its_upstream_jobs():
    config = project(_jobs("after: [extract-a, extract-b]\n        after_window: 20m"))
    a, b, report = config.jobs
    assert (report.policy.after, report.policy.after_window) == (("extract-a", "extract-b"), timedelta(minutes=20))
    assert report.policy.schedule_text == "triggered"
    assert a.policy.reports_to == ("report",) and b.policy.reports_to == ("report",)
    stored = report.definition.to_dict()
    assert (stored["after"], stored["after_window"], stored["schedule"]) == (
        ["extract-a", "extract-b"], "20m", "triggered")
    assert JobDefinition.from_dict(stored).to_dict() == stored
    assert JobDefinition.from_dict(stored).canonical_json == report.definition.canonical_json


def test_the_window_defaults_to_an_hour_and_schedule_triggered_is_allowed():
    report = project(_jobs("after: [extract-a]\n        schedule: triggered")).jobs[2]
    assert report.policy.after_window == timedelta(hours=1)
    assert report.definition.to_dict()["after_window"] == "1h"


def test_a_job_without_after_stores_as_before():
    plain = project(_jobs('schedule: "@daily"')).jobs[2]
    assert "after" not in plain.definition.to_dict() and plain.policy.after == ()
    assert project(_jobs('schedule: "@daily"')).jobs[0].policy.reports_to == ()


@pytest.mark.parametrize("fields, expected", [
    ("after: [extract-a, nope]", "p.yaml:9: job 'report': after[1]: unknown job 'nope' in this project"),
    ("after: [report]", "p.yaml:9: job 'report': after[0]: a job cannot wait on itself"),
    ("after: []", "p.yaml:9: job 'report': after: needs at least one job, e.g. [extract-a, extract-b]"),
    ('after: [extract-a]\n        schedule: "@hourly"',
     "p.yaml:10: job 'report': schedule: a job with after runs when its upstream jobs succeed; "
     "remove schedule (or write schedule: triggered)"),
    ('after: [extract-a]\n        at: ["2030-01-01T00:00:00Z"]',
     "p.yaml:10: job 'report': at: a job with after has no times of its own; remove at"),
    ("after: [extract-a]\n        after_window: 0s",
     "p.yaml:10: job 'report': after_window: must be more than 0s and at most 7d, got 0s"),
    ('schedule: "@daily"\n        after_window: 1h',
     "p.yaml:10: job 'report': after_window: only meaningful with after"),
])
def test_errors(fields, expected):
    assert errors(_jobs(fields)) == [expected]


def test_a_cycle_through_after_is_an_error_at_the_fan_in_jobs_line():
    found = errors("""
    jobs:
      - id: a
        schedule: "@daily"
        target: {noop: {}}
      - id: b
        after: [a, c]
        triggers: [c]
        target: {noop: {}}
      - id: c
        schedule: triggered
        target: {noop: {}}
    """)
    assert found == ["p.yaml:6: job 'b': trigger cycle: b -> c -> b"]
