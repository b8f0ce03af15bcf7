"""Backfills and re-runs in the pure core: which times, which limits, and how a backfill's
invocations start under each overlap policy, with an explicit now."""

from datetime import datetime, timedelta

import pytest

from statemachine import actions as act
from statemachine import events as ev
from statemachine import ids
from statemachine.backfill import MAX_BACKFILL, BackfillError, plan, rerun_time
from statemachine.budget import STARTS_PER_STEP
from statemachine.durations import rfc3339_millis
from statemachine.machine import InvalidTransition, step
from statemachine.policy import Overlap
from statemachine.schedule import parse_at
from tests.unit.machine_helpers import JOB, PROJECT, Scenario, clock, manual_id, occurrence_id, policy

NOW = clock("12:00")


def _times(schedule_text: str, start: str, end: str, timezone: str = "UTC", **fields):
    planned = plan(policy(schedule_text=schedule_text, timezone=timezone, **fields), clock(start), clock(end),
                   NOW, "req")
    return list(planned.times)


def test_the_range_holds_its_start_and_not_its_end():
    assert _times("0 * * * *", "08:00", "11:00") == [clock("08:00"), clock("09:00"), clock("10:00")]
    assert _times("every 15m", "08:01", "08:46") == [clock("08:15"), clock("08:30"), clock("08:45")]


def test_times_follow_the_jobs_time_zone():
    # 03:00 in New York (UTC-5 in January) is 08:00 UTC.
    assert _times("0 3 * * *", "00:00", "11:00", timezone="America/New_York") == [clock("08:00")]


def test_an_at_job_backfills_its_listed_times_in_the_range():
    at = parse_at(["2026-01-05T07:00:00Z", "2026-01-05T09:30:00Z", "2026-01-05T11:00:00Z"]).times
    assert _times("", "07:00", "11:00", at=at) == [clock("07:00"), clock("09:30")]


def test_a_range_without_fire_times_plans_nothing():
    planned = plan(policy(schedule_text="0 3 * * *"), clock("04:00"), clock("05:00"), NOW, "req")
    assert planned.run is None and planned.times == () and planned.invocation_ids(PROJECT, JOB) == []


def test_ids_are_the_backfills_own_and_follow_from_the_request():
    planned = plan(policy(schedule_text="0 * * * *"), clock("08:00"), clock("10:00"), NOW, "req")
    ids_ = planned.invocation_ids(PROJECT, JOB)
    assert ids_ == [manual_id(clock("08:00"), "req", ids.BACKFILL), manual_id(clock("09:00"), "req", ids.BACKFILL)]
    assert occurrence_id(clock("08:00")) not in ids_  # the schedule's own run at 08:00 keeps its record
    again = plan(policy(schedule_text="0 * * * *"), clock("08:00"), clock("10:00"), NOW, "other")
    assert set(again.invocation_ids(PROJECT, JOB)).isdisjoint(ids_)


def test_at_most_the_limit_and_the_error_names_the_count_and_the_limit():
    start = NOW - timedelta(seconds=MAX_BACKFILL)
    assert len(plan(policy(schedule_text="every 1s"), start, NOW, NOW, "r").times) == MAX_BACKFILL
    with pytest.raises(BackfillError, match=r"holds 1,001 fire times .* at most 1,000"):
        plan(policy(schedule_text="every 1s"), start - timedelta(seconds=1), NOW, NOW, "r")
    with pytest.raises(BackfillError, match=r"more than 100,000 fire times"):
        plan(policy(schedule_text="every 1s"), NOW - timedelta(days=30), NOW, NOW, "r")


@pytest.mark.parametrize("start, end, message", [
    ("10:00", "10:00", "must be before end"),
    ("11:00", "10:00", "must be before end"),
    ("10:00", "12:00:01", "in the future"),
])
def test_a_range_must_be_forward_and_past(start, end, message):
    with pytest.raises(BackfillError, match=message):
        plan(policy(schedule_text="every 1m"), clock(start), clock(end), NOW, "r")


@pytest.mark.parametrize("schedule_text, why", [
    ("triggered", "runs only when triggered"),
    ("with 10m interval", "counts from the end of each invocation"),
    ("continuously", "counts from the end of each invocation"),
])
def test_a_schedule_without_fire_times_cannot_be_backfilled(schedule_text, why):
    with pytest.raises(BackfillError, match=why):
        plan(policy(schedule_text=schedule_text), clock("08:00"), clock("09:00"), NOW, "r")


def test_a_rerun_is_of_the_past_to_the_millisecond():
    assert rerun_time(clock("09:00:00.123456"), NOW) == clock("09:00:00.123")
    with pytest.raises(BackfillError, match="in the future"):
        rerun_time(NOW + timedelta(seconds=1), NOW)
    with pytest.raises(BackfillError, match="offset"):
        rerun_time(datetime(2026, 1, 5, 9), NOW)


def test_a_rerun_is_no_older_than_the_history_window_nor_1970():
    """Finding N8: year 1 was accepted, and answered as `1-01-01T00:00:00.000Z`."""
    history = timedelta(days=45)
    assert rerun_time(NOW - timedelta(days=44), NOW, history) == NOW - timedelta(days=44)
    with pytest.raises(BackfillError, match=r"scheduled_time .* history window \(45 days\)"):
        rerun_time(NOW - timedelta(days=46), NOW, history)
    year_one = datetime(1, 1, 1, tzinfo=NOW.tzinfo)
    with pytest.raises(BackfillError, match=r"scheduled_time \(0001-01-01T00:00:00Z\) is before 2025-11-21"):
        rerun_time(year_one, NOW, history)
    for window in (None, timedelta(days=999_999_999)):  # invocation ids count from 1970
        with pytest.raises(BackfillError, match="scheduled_time .* before 1970-01-01T00:00:00Z"):
            rerun_time(year_one, NOW, window)


@pytest.mark.parametrize("start", ["0001-01-01T00:00:00Z", "0002-01-01T00:00:00Z", "1969-12-31T23:59:59Z"])
def test_a_backfill_starts_no_earlier_than_1970(start):
    """Year 1 overflowed (a 500), and earlier than 1970 made invocation ids that no longer
    sort newest first (12 hex digits of time instead of 11)."""
    with pytest.raises(BackfillError, match="start .* before 1970-01-01T00:00:00Z"):
        plan(policy(schedule_text="@yearly"), datetime.fromisoformat(start), NOW, NOW, "r")


@pytest.mark.parametrize("year", [1, 999, 1969])
def test_times_before_the_year_1000_keep_four_digit_years(year):
    instant = datetime(year, 2, 3, 4, 5, 6, 789000, tzinfo=NOW.tzinfo)
    assert rfc3339_millis(instant) == f"{year:04d}-02-03T04:05:06.789Z"


# --- the machine ------------------------------------------------------------------------

def _job(**fields) -> Scenario:
    job = Scenario()
    fields.setdefault("schedule_text", "0 * * * *")
    job.enable("11:59", **fields)
    return job


def _backfill(job: Scenario, start: str, end: str, key: str = "req", at: str = "12:00") -> list:
    planned = plan(job.record.live_policy, clock(start), clock(end), clock(at), key)
    return job.step(ev.ManualTrigger(key, "backfill", backfill=planned.run), at)


def _started(actions: list) -> list[act.StartInvocation]:
    return [a for a in actions if isinstance(a, act.StartInvocation)]


def test_under_skip_a_backfill_runs_one_after_another_none_skipped():
    job = _job(overlap=Overlap.SKIP)
    actions = _backfill(job, "07:00", "12:00")
    first = manual_id(clock("07:00"), "req", ids.BACKFILL)
    assert _started(actions) == [act.StartInvocation(first, clock("07:00"), "backfill", 1)]
    assert len(job.record.runs) == 1 and not any(isinstance(a, act.RecordSkipped) for a in actions)
    seen = [first]
    for hour in ("08:00", "09:00", "10:00", "11:00"):
        actions = job.run_through(seen[-1], "12:01")
        assert not any(isinstance(a, act.RecordSkipped) for a in actions)
        (begun,) = _started(actions)
        assert (begun.scheduled_time, begun.trigger) == (clock(hour), "backfill")
        seen.append(begun.invocation_id)
    assert _started(job.run_through(seen[-1], "12:02")) == []
    assert not job.record.has_waiting and len(set(seen)) == 5


def test_the_same_backfill_again_starts_nothing_new():
    job = _job(overlap=Overlap.SKIP)
    _backfill(job, "07:00", "12:00")
    before = job.record
    assert _backfill(job, "07:00", "12:00") == [] and job.record == before


def test_under_buffer_one_a_scheduled_occurrence_does_not_drop_a_waiting_backfill():
    job = _job(overlap=Overlap.BUFFER_ONE)
    _backfill(job, "07:00", "12:00")
    job.tick("13:00")  # the schedule's 12:00 and 13:00 come while the backfill runs
    assert job.record.runs[0].trigger == "backfill"
    assert job.record.runs[0].first() == clock("08:00")


def test_a_paused_job_refuses_a_backfill():
    job = _job()
    job.step(ev.Paused("incident"), "12:00")
    planned = plan(job.record.live_policy, clock("07:00"), clock("12:00"), NOW, "req")
    with pytest.raises(InvalidTransition, match="paused"):
        step(job.record, ev.ManualTrigger("req", "backfill", backfill=planned.run), NOW)


def test_a_big_allow_job_starts_a_bounded_batch_per_step_and_the_rest_as_slots_free():
    job = _job(overlap=Overlap.ALLOW, max_concurrent=5000, schedule_text="every 1s")
    planned = plan(job.record.live_policy, NOW - timedelta(seconds=STARTS_PER_STEP * 5 // 2), NOW, NOW, "req")
    actions = job.step(ev.ManualTrigger("req", "backfill", backfill=planned.run), NOW)
    started = _started(actions)
    assert len(started) == STARTS_PER_STEP
    every = [s.invocation_id for s in started]
    while job.record.active:
        more = _started(job.run_through(job.record.active[0].invocation_id, "12:01"))
        assert len(more) <= STARTS_PER_STEP
        every += [s.invocation_id for s in more]
    assert every == planned.invocation_ids(PROJECT, JOB)  # all of them, in order, each once


def test_pausing_drops_what_has_not_started_as_skipped_paused_under_the_backfills_ids():
    job = _job(overlap=Overlap.SKIP)
    _backfill(job, "07:00", "12:00")
    actions = job.step(ev.Paused("incident"), "12:01")
    skipped = [a for a in actions if isinstance(a, act.RecordSkipped)]
    assert [(a.invocation_id, a.trigger, a.reason) for a in skipped] == [
        (manual_id(clock(hour), "req", ids.BACKFILL), "backfill", "paused")
        for hour in ("08:00", "09:00", "10:00", "11:00")]
    assert not job.record.has_waiting
