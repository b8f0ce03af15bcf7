"""Schedules in plain language (statemachine/describe.py): the common forms read as
sentences; anything unusual gives None, and the page shows the expression instead."""

from __future__ import annotations

from datetime import timedelta

import pytest

from statemachine.describe import describe_at, describe_schedule, spell_duration

LA = "America/Los_Angeles"


@pytest.mark.parametrize("schedule, sentence", [
    ("0 3 * * *", "at 03:00 every day, America/Los_Angeles"),
    ("0 0 3 * * ?", "at 03:00 every day, America/Los_Angeles"),  # Quartz, seconds first
    ("0 30 2 * * ?", "at 02:30 every day, America/Los_Angeles"),
    ("0 30 9,17 * * ?", "at 09:30 and 17:30 every day, America/Los_Angeles"),
    ("15 4 * * 1-5", "at 04:15 on Monday to Friday, America/Los_Angeles"),
    ("0 0 9 ? * MON-FRI", "at 09:00 on Monday to Friday, America/Los_Angeles"),
    ("0 0 12 ? * 1", "at 12:00 on Sunday, America/Los_Angeles"),  # Quartz: 1 = Sunday
    ("0 12 * * 1", "at 12:00 on Monday, America/Los_Angeles"),  # Unix: 1 = Monday
    ("0 12 * * 7", "at 12:00 on Sunday, America/Los_Angeles"),
    ("5 4 * * SUN,SAT", "at 04:05 on Sunday and Saturday, America/Los_Angeles"),
    ("0 6 1 * *", "at 06:00 on day 1 of every month, America/Los_Angeles"),
    ("0 0 0 25 12 ?", "at 00:00 on 25 December, America/Los_Angeles"),
    ("*/10 * * * * ?", "every 10 seconds"),
    # A step that does not divide 60 (or 24) restarts each minute (hour, day): `*/7` seconds
    # fires at :56 and then :00, so its gaps are not all 7 seconds.
    ("*/7 * * * * ?", "at seconds :00, :07 … :56 of every minute"),
    ("0/40 * * * * ?", "at seconds :00 and :40 of every minute"),
    ("*/7 * * * *", "at minutes :00, :07 … :56 of every hour, America/Los_Angeles"),
    ("0 0 */5 * * ?", "at 00:00, 05:00, 10:00, 15:00 and 20:00 every day, America/Los_Angeles"),
    ("*/15 * * * *", "every 15 minutes"),
    ("* * * * *", "every minute"),
    ("0 * * * *", "every hour"),
    ("15 * * * *", "at minute 15 of every hour, America/Los_Angeles"),
    ("0 0 */2 * * ?", "every 2 hours, America/Los_Angeles"),
    ("*/5 * * * 1-5", "every 5 minutes on Monday to Friday, America/Los_Angeles"),
    ("@daily", "at 00:00 every day, America/Los_Angeles"),
    ("@weekly", "at 00:00 on Sunday, America/Los_Angeles"),
    ("@monthly", "at 00:00 on day 1 of every month, America/Los_Angeles"),
    ("@yearly", "at 00:00 on 1 January, America/Los_Angeles"),
    ("@hourly", "every hour"),
    ("every 10m", "every 10 minutes"),
    ("every 1h", "every hour"),
    ("every 1h offset 15m", "every hour, offset 15 minutes"),
    ("every 1h30m", "every 1 hour 30 minutes"),
    ("with 10m interval", "10 minutes after the previous run ends"),
    ("continuously", "continuously: again as soon as the previous run ends"),
    ("triggered", "only when triggered (by hand, the API or another job)"),
])
def test_common_schedules_read_as_sentences(schedule, sentence):
    assert describe_schedule(schedule, LA) == sentence


@pytest.mark.parametrize("schedule", [
    "0 0 L * ?", "0 15 10 ? * 6#3", "0 0 0 1 1 ? 2030", "0 0 0 15W * ?", "5/10 * * * *",
    "0 0 1-5 * 1", "every nonsense", "not a schedule", "1 2 3",
])
def test_anything_unusual_gives_none_so_the_expression_is_shown(schedule):
    assert describe_schedule(schedule, LA) is None


def test_utc_schedules_name_their_zone_too():
    assert describe_schedule("0 3 * * *") == "at 03:00 every day, UTC"


def test_one_off_times():
    assert describe_at(["2020-12-24T14:00:00Z"]) == "once, at 2020-12-24 14:00 UTC"
    assert describe_at(["2020-12-24T14:00:00Z", "2020-12-25T14:00:30Z"]) == \
        "at 2 set times, from 2020-12-24 14:00 UTC to 2020-12-25 14:00:30 UTC"


def test_durations_in_words():
    assert spell_duration(timedelta(0)) == "0 seconds"
    assert spell_duration(timedelta(hours=1, minutes=1, milliseconds=500)) == "1 hour 1 minute 500 milliseconds"
    assert spell_duration(timedelta(days=2)) == "2 days"
