"""description, labels, jitter, start and end: their errors (exact line and text), their
defaults, and their stored form."""

from datetime import datetime, timedelta, timezone

import pytest

from statemachine.definition import JobDefinition
from tests.config.helpers import errors, project

NOOP = "target: {noop: {}}"


def _job(lines: str, schedule: str = "every 1m") -> str:
    return f"""
        jobs:
          - id: a
            schedule: {schedule}
            {NOOP}
{lines}
        """


@pytest.mark.parametrize("lines, schedule, expected", [
    ("            description: 7", "every 1m",
     "p.yaml:5: job 'a': description: expected a string, got integer 7; quote it"),
    ("            description: " + "x" * 1001, "every 1m",
     "p.yaml:5: job 'a': description: has 1,001 characters; at most 1,000 are allowed"),
    ("            labels: {Team: data}", "every 1m",
     "p.yaml:5: job 'a': labels.Team: label key 'Team' must match ^[a-z][a-z0-9_-]{0,62}$"),
    ("            labels: {tier: 1}", "every 1m",
     "p.yaml:5: job 'a': labels.tier: label value must be a string (quote it: \"1\"), got 1"),
    ("            labels: {team: " + "v" * 64 + "}", "every 1m",
     "p.yaml:5: job 'a': labels.team: label value has 64 characters; at most 63"),
    ("            labels: {" + ", ".join(f"k{i}: v" for i in range(65)) + "}", "every 1m",
     "p.yaml:5: job 'a': labels: 65 labels; at most 64 are allowed"),
    ("            labels: [a, b]", "every 1m",
     "p.yaml:5: job 'a': labels: expected a map, e.g. {team: data, tier: \"1\"}, got a list"),
    ("            jitter: 2h", "0 * * * *", "p.yaml:5: job 'a': jitter: must be at most 1h, got 2h"),
    ("            jitter: soon", "every 1m", None),
    ("            jitter: 1m", "every 1m", "p.yaml:5: job 'a': jitter: 1m must be less than the schedule's period 1m"),
    ("            start: 2026-12-01", "every 1m",
     "p.yaml:5: job 'a': start: 2026-12-01 is a date; write a time with an offset, e.g. 2026-12-01T09:00:00Z"),
    ("            end: \"2026-12-01T00:00:00\"", "every 1m", None),
    ("            start: \"2027-01-01T00:00:00Z\"\n            end: \"2026-12-01T00:00:00+01:00\"", "every 1m",
     "p.yaml:6: job 'a': end: must be after start (2027-01-01T00:00:00Z), got 2026-11-30T23:00:00Z"),
    ("            end: \"2027-01-01T00:00:00Z\"", "with 1m interval",
     "p.yaml:5: job 'a': end: only applies to a clock-driven schedule (cron, every or at), not to this "
     "job's schedule"),
])
def test_extra_field_errors(lines, schedule, expected):
    found = errors(_job(lines, schedule))
    assert len(found) == 1, found
    if expected is None:  # the shared checkers' wording, tested elsewhere: only the line here
        assert found[0].startswith("p.yaml:5: job 'a': ")
    else:
        assert found == [expected]


def test_description_start_and_end_cannot_have_a_default():
    assert errors("""
        defaults:
          description: x
        jobs: []
        """) == ["p.yaml:2: defaults.description: cannot have a default: description is set in each job"]


def test_jitter_and_labels_come_from_the_defaults_labels_merging_key_by_key():
    config = project("""
        defaults:
          jitter: 20s
          labels: {team: data, tier: "2"}
        jobs:
          - id: a
            schedule: every 1m
            labels: {tier: "1"}
            description: Nightly export
            start: "2026-12-01T01:00:00+01:00"
            end: "2027-06-30T00:00:00Z"
            target: {noop: {}}
        """)
    assert not config.job_errors
    job = config.jobs[0]
    assert job.definition.labels == {"team": "data", "tier": "1"}
    assert job.definition.jitter == "20s"
    assert (job.definition.start, job.definition.end) == ("2026-12-01T00:00:00Z", "2027-06-30T00:00:00Z")
    assert job.policy.jitter == timedelta(seconds=20)
    assert job.policy.start == datetime(2026, 12, 1, tzinfo=timezone.utc)
    assert JobDefinition.from_dict(job.definition.to_dict()) == job.definition


def test_a_definition_without_the_new_fields_keeps_its_form_and_revision():
    config = project(_job(""))
    job = config.jobs[0]
    stored = job.definition.to_dict()
    assert not {"description", "labels", "jitter", "start", "end"} & set(stored)
    assert JobDefinition.from_dict(stored) == job.definition
    # The revision hashes the same form as before the fields existed.
    assert project(_job("            labels: {}")).jobs[0].policy.revision == job.policy.revision
