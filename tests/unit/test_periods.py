"""statemachine/periods.py: a job's expected period, from its definition at `now`."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from statemachine.periods import expected_period
from statemachine.policy import JobPolicy
from statemachine.schedule import fire_times

UTC = timezone.utc
FRIDAY_NOON = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
HOUR, DAY = timedelta(hours=1), timedelta(days=1)


def period(schedule: str, now: datetime = FRIDAY_NOON, **policy) -> timedelta | None:
    return expected_period(JobPolicy(schedule_text=schedule, **policy), now)


@pytest.mark.parametrize("schedule, expected", [
    ("every 10s", timedelta(seconds=10)),
    ("every 1h offset 15m", HOUR),
    ("0 * * * *", HOUR),
    ("@hourly", HOUR),
    ("0 3 * * *", DAY),
    ("0 0 9 * * ?", DAY),  # Quartz
    ("*/5 * * * *", timedelta(minutes=5)),
    ("0 0 1 * *", timedelta(days=31)),  # November 1 to December 1, and October 1 to November 1
    ("0 0 1 1 *", timedelta(days=365)),
    ("with 10m interval", timedelta(minutes=20)),  # plus the default timeout, 10 minutes
    ("continuously", timedelta(minutes=10, seconds=1)),  # min_backoff (1 s) after each run, plus the timeout
])
def test_the_period_of_each_form(schedule, expected):
    assert period(schedule) == expected


def test_a_relative_schedules_period_counts_the_jobs_timeout():
    assert period("with 1h interval", timeout=timedelta(minutes=5)) == HOUR + timedelta(minutes=5)


def test_jobs_that_do_not_run_by_the_clock_have_none():
    assert period("triggered") is None
    assert expected_period(JobPolicy(at=(FRIDAY_NOON + DAY,)), FRIDAY_NOON) is None
    assert period("0 3 * * *", end=FRIDAY_NOON - HOUR) is None  # ended: DONE
    assert period("0 0 0 1 1 ? 2020") is None  # a year field in the past


def test_a_job_before_its_start_has_its_schedules_period():
    assert period("0 3 * * *", start=FRIDAY_NOON + 30 * DAY) == DAY


@pytest.mark.parametrize("now, expected", [
    ("2026-11-23T10:00Z", 72),  # Monday after its run: the gap before it was the weekend
    ("2026-11-24T08:59Z", 72),  # Tuesday before its run, the same two gaps
    ("2026-11-24T09:00Z", 24),  # Tuesday's run: Monday to Tuesday, Tuesday to Wednesday
    ("2026-11-26T12:00Z", 24),  # Thursday
    ("2026-11-27T09:00Z", 72),  # Friday's run: the weekend comes next
    ("2026-11-28T12:00Z", 72),  # Saturday
])
def test_a_weekday_schedule_has_the_weekends_gap_from_fridays_run_until_tuesdays(now, expected):
    assert period("0 9 * * MON-FRI", datetime.fromisoformat(now.replace("Z", "+00:00"))) == expected * HOUR


def test_an_hourly_weekday_schedule_after_the_weekend():
    monday = datetime(2026, 11, 30, tzinfo=UTC)
    assert period("0 * * * MON-FRI", monday + timedelta(minutes=30)) == timedelta(hours=49)  # Fri 23:00 to Mon 00:00
    assert period("0 * * * MON-FRI", monday + timedelta(minutes=90)) == HOUR


def test_a_daylight_saving_day_shortens_a_local_daily_schedule():
    # Berlin springs forward on 2026-03-29: 02:30 that day fires at 03:00 CEST (01:00 UTC).
    assert period("30 2 * * *", datetime(2026, 3, 29, 12, tzinfo=UTC), timezone="Europe/Berlin") == \
        timedelta(hours=23, minutes=30)
    assert period("0 9 * * *", datetime(2026, 3, 29, 12, tzinfo=UTC), timezone="Europe/Berlin") == \
        timedelta(hours=24)  # 09:00 CEST after 09:00 CET is 23 h; the one before 24 h


def test_rare_schedules_are_found_far_back():
    assert period("0 0 29 2 *", datetime(2026, 12, 1, tzinfo=UTC)) == timedelta(days=4 * 365 + 1)
    assert period("* * * * MON", datetime(2026, 12, 1, 10, tzinfo=UTC)) == timedelta(days=6, minutes=1)


@pytest.mark.parametrize("schedule, zone", [
    ("0 9 * * MON-FRI", "UTC"), ("0 * * * MON-FRI", "UTC"), ("30 1 * * *", "America/New_York"),
    ("0 */7 * * *", "UTC"), ("15 10 1,15 * *", "Europe/Berlin"), ("0 0 L * ?", "UTC"),
])
def test_the_cron_period_is_the_longer_of_the_two_gaps_around_now(schedule, zone):
    """Against every fire time listed over the months around each `now`: the search back
    (widening, then halving) finds the same last two fire times as the listing."""
    start = datetime(2026, 10, 1, tzinfo=UTC)
    listed = list(fire_times(JobPolicy(schedule_text=schedule, timezone=zone).schedule,
                             start - timedelta(days=70), start + timedelta(days=100)))
    for step in range(0, 60 * 24, 37):  # every 37 hours for 60 days, at odd minutes
        now = start + step * HOUR + timedelta(minutes=step % 60)
        before = [t for t in listed if t <= now][-2:]
        upcoming = next(t for t in listed if t > now)
        gaps = [later - earlier for earlier, later in zip(before, [*before[1:], upcoming])]
        assert period(schedule, now, timezone=zone) == max(gaps), now
