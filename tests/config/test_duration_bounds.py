"""A duration too long for Python's timedelta is a config error, not a crash: before, an
http target's `timeout: 999999999999999999999d` (or a job's) raised OverflowError out of
validation, and POST /validate and a job's PUT answered 500."""

from __future__ import annotations

import json

import pytest

from config.loader import parse_project_text
from statemachine.durations import DurationError, parse_duration
from statemachine.safety import OwnService

HUGE = ["999999999999999999999d", "4936049980071.78h", "1d" * 2 + "99999999999999999999ms"]


@pytest.mark.parametrize("text", HUGE)
def test_a_duration_beyond_timedelta_is_a_duration_error(text):
    with pytest.raises(DurationError, match="too long"):
        parse_duration(text)


@pytest.mark.parametrize("where", ["job", "target"])
def test_validation_reports_it_where_it_is(where):
    huge = HUGE[0]
    entry = {"id": "j", "schedule": "@daily", "target": {"http": {"url": "https://example.com/run"}}}
    if where == "job":
        entry["timeout"] = huge
    else:
        entry["target"]["http"]["timeout"] = huge
    errors = parse_project_text("p", json.dumps({"jobs": [entry]}), "p.yaml", own=OwnService()).job_errors
    assert [error.message for error in errors] == [
        f"job 'j': {'timeout' if where == 'job' else 'target.http.timeout'}: duration '{huge}' is too long"]
