"""Exclusion calendars in a project file: the `calendars` block and a job's `exclude`,
their errors (exact line and text), and what the definition and the policy hold."""

from datetime import date, datetime

import pytest

from config.loader import parse_job_entry
from statemachine.definition import JobDefinition
from tests.config.helpers import errors, project

CALENDARS = """
    calendars:
      holidays:
        timezone: Europe/Berlin
        dates: ["2026-12-25", 2026-12-24, "2026-12-25"]
        ranges: [{start: "2026-12-27T00:00:00", end: "2026-12-31T00:00:00"}]
    """


def _with_job(exclude: str, calendars: str = CALENDARS) -> str:
    return calendars + f"""
    jobs:
      - id: payroll
        schedule: "0 0 9 * * ?"
        exclude: {exclude}
        target: {{noop: {{}}}}
    """


def test_a_named_calendar_is_copied_normalized_into_the_job():
    job = project(_with_job("[holidays]")).jobs[0]
    calendar = job.policy.exclude[0]
    assert (calendar.name, calendar.timezone) == ("holidays", "Europe/Berlin")
    assert calendar.dates == (date(2026, 12, 24), date(2026, 12, 25))  # sorted, once each
    assert calendar.ranges == ((datetime(2026, 12, 27), datetime(2026, 12, 31)),)
    stored = job.definition.to_dict()
    assert stored["exclude"] == [calendar.to_dict()]
    assert JobDefinition.from_dict(stored).to_dict() == stored


def test_a_job_without_exclude_keeps_its_revision():
    """Calendars in the file change nothing for the jobs that do not name them."""
    plain = """
    jobs:
      - id: payroll
        schedule: "0 0 9 * * ?"
        target: {noop: {}}
    """
    assert project(CALENDARS + plain).jobs[0].policy.revision == project(plain).jobs[0].policy.revision
    assert "exclude" not in project(plain).jobs[0].definition.to_dict()


def test_a_changed_calendar_changes_the_revision_of_the_jobs_naming_it():
    before = project(_with_job("[holidays]")).jobs[0].policy.revision
    after = project(_with_job("[holidays]", CALENDARS.replace("2026-12-24", "2026-12-23"))).jobs[0]
    assert after.policy.revision != before


@pytest.mark.parametrize("exclude, calendars, expected", [
    ("[nope]", CALENDARS,
     "p.yaml:10: job 'payroll': exclude[0]: unknown calendar 'nope' (the project's calendars: holidays)"),
    ("holidays", CALENDARS, "p.yaml:10: job 'payroll': exclude: expected a list, got string 'holidays'"),
    ("[{name: own, dates: [tomorrow]}]", "",
     "p.yaml:4: job 'payroll': exclude[0].dates[0]: expected a date such as 2026-12-24, got 'tomorrow'"),
])
def test_job_errors(exclude, calendars, expected):
    found = errors(_with_job(exclude, calendars))
    assert found == [expected]


@pytest.mark.parametrize("calendar, expected", [
    ("{timezone: Mars/Olympus}", "calendars.x.timezone: unknown time zone"),
    ("{ranges: [{start: \"2026-12-27T00:00:00\", end: \"2026-12-26T00:00:00\"}]}",
     "calendars.x.ranges[0].end: must be after start (2026-12-27T00:00:00), got 2026-12-26T00:00:00"),
    ("{ranges: [{start: \"2026-12-27T00:00:00Z\", end: \"2026-12-28T00:00:00\"}]}",
     "has an offset; write the wall time alone"),
    ("{days: []}", "unknown field 'calendars.x.days'"),
])
def test_calendar_errors_are_file_errors_with_their_line(calendar, expected):
    found = errors(f"""
    calendars:
      x: {calendar}
    jobs: []
    """)
    assert len(found) == 1 and found[0].startswith("p.yaml:2: ") and expected in found[0], found


def test_an_api_job_names_the_calendars_of_its_project_file():
    settings = project(_with_job("[holidays]")).settings()
    job = parse_job_entry({"schedule": "@daily", "exclude": ["holidays"], "target": {"noop": {}}}, settings, "api")
    assert job.policy.exclude[0].name == "holidays"
    again = parse_job_entry(job.definition.to_dict(), settings, "api")  # a GET fed back to PUT
    assert again.policy.revision == job.policy.revision


def test_exclude_cannot_be_a_default():
    found = errors("""
    defaults:
      exclude: [x]
    jobs: []
    """)
    assert found == ["p.yaml:2: defaults.exclude: cannot have a default: exclude is set in each job"]


def test_next_leaves_out_the_times_a_calendar_of_a_file_holds(tmp_path):
    from tests.unit.test_cli import assert_usage_error, lines, sundial

    path = tmp_path / "demo.yaml"
    path.write_text(CALENDARS + "jobs: []\n")
    args = ("next", "0 0 9 * * ?", "--tz", "Europe/Berlin", "-n", "3", "--after", "2026-12-22T00:00:00Z")
    result = sundial(*args, "--calendars", str(path), "--exclude", "holidays")
    assert (result.returncode, result.stderr) == (0, "")
    # 24 and 25 December are dates; 27 to 30 December a range ending at 31 December 00:00.
    assert result.stdout == lines("2026-12-22T09:00:00+01:00", "2026-12-23T09:00:00+01:00",
                                  "2026-12-26T09:00:00+01:00")
    assert sundial(*args).stdout.splitlines()[2] == "2026-12-24T09:00:00+01:00"
    assert_usage_error(sundial(*args, "--calendars", str(path), "--exclude", "nope"),
                       f"main.py next: error: --exclude: no calendar nope in {path} (it has: holidays)")


def test_the_job_pages_next_runs_step_over_the_calendar():
    from dataclasses import replace

    from engine.ports import StoredJob
    from statemachine.durations import UTC
    from statemachine.record import new_record
    from web.ui_format import next_fire_times

    job = project(_with_job("[holidays]")).jobs[0]
    stored = StoredJob(replace(new_record("p", "payroll"), policy=job.policy, disabled=False), job.definition)
    shown = next_fire_times(stored, datetime(2026, 12, 22, tzinfo=UTC), count=3)
    assert [moment.astimezone(UTC).isoformat() for moment in shown] == [
        "2026-12-22T09:00:00+00:00", "2026-12-23T09:00:00+00:00", "2026-12-26T09:00:00+00:00"]
