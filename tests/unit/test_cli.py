"""`python main.py next|render`, run as a real subprocess, checking exact output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LA = "America/Los_Angeles"


def sundial(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    # A far-away machine zone proves that nothing depends on the local clock's zone.
    env = {**os.environ, "TZ": "Pacific/Kiritimati"}
    return subprocess.run(
        [sys.executable, str(ROOT / "main.py"), *args],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=60,
    )


def lines(*times: str) -> str:
    return "".join(f"{t}\n" for t in times)


def assert_usage_error(result: subprocess.CompletedProcess[str], start: str) -> None:
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(start), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


# --- next ----------------------------------------------------------------------------


def test_next_quartz_expression_in_utc():
    result = sundial("next", "0 15,45 * * * ?", "-n", "3", "--after", "2026-01-01T00:00:00Z")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == lines(
        "2026-01-01T00:15:00+00:00", "2026-01-01T00:45:00+00:00", "2026-01-01T01:15:00+00:00"
    )


def test_next_quartz_day_of_week_counts_from_sunday():
    # Quartz 2 = Monday; 2026-01-01 is a Thursday.
    result = sundial("next", "0 0 12 ? * 2", "-n", "2", "--after", "2026-01-01T00:00:00Z")
    assert result.stdout == lines("2026-01-05T12:00:00+00:00", "2026-01-12T12:00:00+00:00")


def test_next_defaults_to_five_times():
    result = sundial("next", "@daily", "--tz", LA, "--after", "2026-06-01T12:00:00-07:00")
    assert result.stdout == lines(*(f"2026-06-0{day}T00:00:00-07:00" for day in range(2, 7)))


def test_next_spring_forward_day_in_los_angeles():
    result = sundial(
        "next", "0 30 2 * * ?", "--tz", LA, "-n", "3", "--after", "2026-03-07T12:00-08:00"
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == lines(
        "2026-03-08T03:00:00-07:00", "2026-03-09T02:30:00-07:00", "2026-03-10T02:30:00-07:00"
    )


def test_next_hourly_at_fall_back_shows_both_offsets():
    result = sundial(
        "next", "0 0 * * * ?", "--tz", LA, "-n", "3", "--after", "2026-11-01T00:30-07:00"
    )
    assert result.stdout == lines(
        "2026-11-01T01:00:00-07:00", "2026-11-01T01:00:00-08:00", "2026-11-01T02:00:00-08:00"
    )


def test_next_after_is_converted_to_the_schedule_zone():
    result = sundial(
        "next", "0 9 * * *", "--tz", "Asia/Kolkata", "-n", "1", "--after", "2026-01-01T00:00Z"
    )
    assert result.stdout == lines("2026-01-01T09:00:00+05:30")


def test_next_fixed_rate_schedule():
    result = sundial("next", "every 1h offset 15m", "-n", "2", "--after", "2026-01-01T00:15:00Z")
    assert result.stdout == lines("2026-01-01T01:15:00+00:00", "2026-01-01T02:15:00+00:00")


def test_next_sub_second_schedule_prints_milliseconds_on_every_line():
    result = sundial("next", "every 1500ms", "-n", "3", "--after", "2026-01-01T00:00:00Z")
    assert result.stdout == lines(
        "2026-01-01T00:00:01.500+00:00",
        "2026-01-01T00:00:03.000+00:00",
        "2026-01-01T00:00:04.500+00:00",
    )


def test_next_schedule_that_never_fires_again_prints_nothing():
    result = sundial("next", "0 0 0 1 1 ? 2020", "--after", "2026-01-01T00:00:00Z")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_next_zero_count_prints_nothing():
    result = sundial("next", "@hourly", "-n", "0", "--after", "2026-01-01T00:00:00Z")
    assert (result.returncode, result.stdout) == (0, "")


def test_next_defaults_to_after_now():
    before = datetime.now(timezone.utc)
    result = sundial("next", "* * * * *", "-n", "1")
    assert result.returncode == 0
    fire_time = datetime.fromisoformat(result.stdout.strip())
    assert fire_time.utcoffset() == timedelta(0)
    assert before < fire_time <= before + timedelta(minutes=2)


@pytest.mark.parametrize("schedule", ["with 10m interval", "continuously", "triggered"])
def test_next_schedule_not_driven_by_the_clock_explains_on_stderr(schedule):
    result = sundial("next", schedule, "--after", "2026-01-01T00:00:00Z")
    assert (result.returncode, result.stdout) == (0, "")
    assert result.stderr.startswith(f"schedule {schedule!r} is not driven by the clock: ")
    assert result.stderr.count("\n") == 1


def test_next_bad_schedule():
    result = sundial("next", "0 25 * * *", "--after", "2026-01-01T00:00:00Z")
    assert_usage_error(result, "main.py next: error: SCHEDULE: ")


def test_next_bad_time_zone():
    result = sundial("next", "@daily", "--tz", "Mars/Olympus")
    assert_usage_error(result, "main.py next: error: --tz: unknown time zone 'Mars/Olympus'; ")


def test_next_after_without_offset():
    result = sundial("next", "@daily", "--after", "2026-01-01T00:00:00")
    assert_usage_error(
        result,
        "main.py next: error: --after: timestamp '2026-01-01T00:00:00' has no offset;",
    )


def test_next_after_not_a_timestamp():
    result = sundial("next", "@daily", "--after", "tomorrow")
    assert_usage_error(result, "main.py next: error: --after: bad ISO-8601 timestamp 'tomorrow'")


def test_next_negative_count():
    result = sundial("next", "@daily", "-n", "-1")
    assert_usage_error(result, "main.py next: error: argument -n: must be 0 or more, got -1")


# --- render --------------------------------------------------------------------------

SEED_TEMPLATE = (
    "endOfPreviousDay=${endOfPreviousDay} processTime=${processTime} startOfDay=${startOfDay}"
    " startOfDayOneWeekAgo=${startOfDayOneWeekAgo} startOfHour=${startOfHour}"
    " startOfPreviousDay=${startOfPreviousDay} todaysDate=${todaysDate}"
    " yesterdaysDate=${yesterdaysDate}"
)


def test_render_seed_example():
    result = sundial("render", SEED_TEMPLATE, "--at", "2018-03-21T17:09-07:00", "--tz", LA)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (
        "endOfPreviousDay=2018-03-20T23:59:59.999-07:00"
        " processTime=2018-03-21T17:09:00.000-07:00"
        " startOfDay=2018-03-21T00:00:00.000-07:00"
        " startOfDayOneWeekAgo=2018-03-14T00:00:00.000-07:00"
        " startOfHour=2018-03-21T17:00:00.000-07:00"
        " startOfPreviousDay=2018-03-20T00:00:00.000-07:00"
        " todaysDate=2018-03-21 yesterdaysDate=2018-03-20\n"
    )


def test_render_identity_defaults_and_flags():
    template = (
        "${project}/${jobId}/${invocationId} ${scheduledTime}"
        " ${attempt} ${eventIndex}/${eventCount}"
    )
    at = ("--at", "2018-03-21T17:09-07:00")
    assert sundial("render", template, *at).stdout == (
        "preview/preview/preview 2018-03-22T00:09:00.000Z 1 0/1\n"
    )
    flags = ("--project", "bridge", "--job", "fitbit-worker", "--invocation", "inv-7",
             "--attempt", "2", "--event-index", "3", "--event-count", "4")
    assert sundial("render", template, *at, *flags).stdout == (
        "bridge/fitbit-worker/inv-7 2018-03-22T00:09:00.000Z 2 3/4\n"
    )


def test_render_escape_and_utc_default():
    result = sundial("render", "$${todaysDate} is ${todaysDate}", "--at", "2026-03-09T06:59Z")
    assert result.stdout == "${todaysDate} is 2026-03-09\n"


def test_render_unknown_variable():
    result = sundial("render", '{"w":"${startOfWeek}"}', "--at", "2026-01-01T00:00Z")
    assert_usage_error(
        result,
        "main.py render: error: TEMPLATE: unknown variable ${startOfWeek} at offset 6; known: ",
    )


def test_render_unterminated_variable():
    result = sundial("render", "x ${startOfDay", "--at", "2026-01-01T00:00Z")
    assert_usage_error(result, "main.py render: error: TEMPLATE: unterminated ${ at offset 2")


def test_render_requires_at_with_an_offset():
    assert_usage_error(
        sundial("render", "x"), "main.py render: error: the following arguments are required: --at"
    )
    assert_usage_error(
        sundial("render", "x", "--at", "2026-01-01T00:00"), "main.py render: error: --at: "
    )


def test_render_bad_time_zone_and_event_index():
    at = ("--at", "2026-01-01T00:00Z")
    assert_usage_error(
        sundial("render", "x", *at, "--tz", "Nowhere"), "main.py render: error: --tz: "
    )
    assert_usage_error(
        sundial("render", "x", *at, "--event-index", "2", "--event-count", "2"),
        "main.py render: error: --event-index: 2 is not below --event-count 2",
    )


# --- the command line as a whole -----------------------------------------------------


def test_no_command_prints_help_and_exits_2():
    result = sundial()
    assert result.returncode == 2
    assert "next" in result.stderr and "render" in result.stderr


def test_unknown_command():
    assert_usage_error(
        sundial("bogus"), "main.py: error: argument COMMAND: invalid choice: 'bogus'"
    )


def test_runs_from_another_directory(tmp_path):
    result = sundial("render", "${todaysDate}", "--at", "2026-01-01T00:00Z", cwd=tmp_path)
    assert result.stdout == "2026-01-01\n"


def test_version():
    result = sundial("--version")
    version = re.search(r'__version__ = "(.+)"', (ROOT / "cli" / "version.py").read_text())
    assert version
    assert (result.returncode, result.stdout) == (0, f"sundial {version.group(1)}\n"), result.stderr
