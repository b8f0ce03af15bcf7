"""Exclusion calendars in the pure core: an occurrence of the schedule whose time one of
the job's calendars holds is recorded SKIPPED/excluded; readers are shown the next run
after the exclusion. Explicit `now` throughout."""

from datetime import date, datetime, timedelta

from statemachine import actions as act
from statemachine import events as ev
from statemachine.calendars import Calendar, calendars_from_list, calendars_to_list, next_included
from statemachine.durations import UTC
from statemachine.policy import Catchup, Overlap, Tuning
from statemachine.schedule import parse_schedule
from statemachine.shown import next_run
from statemachine.stored_form import policy_from_dict, policy_to_dict
from statemachine.vocabulary import SkipReason
from tests.unit.machine_helpers import Scenario, clock, delivered, skipped

# 10:15 and 10:30 UTC fall in the range; the whole of 2026-01-06 is a date.
MORNING = Calendar("morning", "UTC", dates=(date(2026, 1, 6),),
                   ranges=((datetime(2026, 1, 5, 10, 15), datetime(2026, 1, 5, 10, 45)),))


def test_an_excluded_occurrence_is_skipped_and_the_next_one_runs():
    job = Scenario()
    job.enable("10:07", exclude=(MORNING,))
    assert job.tick("10:15") == [act.ScheduleTick(clock("10:30"), "1.2"), skipped(clock("10:15"), "excluded")]
    assert job.record.active == ()
    assert job.tick("10:30")[1:] == [skipped(clock("10:30"), SkipReason.EXCLUDED)]
    # The range ends at 10:45, excluded up to but not including it: 10:45 runs.
    assert job.tick("10:45")[1:] == delivered(clock("10:45"))


def test_without_a_calendar_the_same_occurrence_runs():
    """The test above fails for the right reason: the calendar, not the schedule."""
    job = Scenario()
    job.enable("10:07")
    assert job.tick("10:15")[1:] == delivered(clock("10:15"))


def test_an_excluded_occurrence_is_skipped_even_while_another_runs():
    """`excluded` says why, not `overlap`: the calendar decides before the overlap policy."""
    job = Scenario()
    job.enable("10:07", exclude=(MORNING,), overlap=Overlap.SKIP)
    job.step(ev.ManualTrigger("req-1"), "10:10")
    assert job.tick("10:15")[1:] == [skipped(clock("10:15"), SkipReason.EXCLUDED)]


def test_a_manual_trigger_inside_an_exclusion_runs():
    job = Scenario()
    job.enable("10:07", exclude=(MORNING,))
    actions = job.step(ev.ManualTrigger("req-1"), "10:20")
    assert any(isinstance(action, act.StartInvocation) for action in actions)


def test_caught_up_occurrences_inside_an_exclusion_are_skipped():
    job = Scenario()
    job.enable("10:07", exclude=(MORNING,), catchup=Catchup.ALL)
    # The tick for 10:15 comes at 10:50: 10:15 and 10:30 are excluded, 10:45 is caught up.
    actions = job.tick("10:50")
    assert skipped(clock("10:15"), SkipReason.EXCLUDED, "catchup") in actions
    assert skipped(clock("10:30"), SkipReason.EXCLUDED, "catchup") in actions
    assert [entry.scheduled_time for entry in job.record.active] == [clock("10:45")]


def test_a_whole_local_day_in_the_calendars_zone():
    # Tokyo is UTC+9: the Tokyo day 2026-01-06 is 2026-01-05T15:00Z to 2026-01-06T15:00Z.
    tokyo = Calendar("jp", "Asia/Tokyo", dates=(date(2026, 1, 6),))
    assert not tokyo.excludes(datetime(2026, 1, 5, 14, 59, tzinfo=UTC))
    assert tokyo.excludes(datetime(2026, 1, 5, 15, 0, tzinfo=UTC))
    assert tokyo.excludes(datetime(2026, 1, 6, 14, 59, tzinfo=UTC))
    assert not tokyo.excludes(datetime(2026, 1, 6, 15, 0, tzinfo=UTC))


def test_the_next_run_shown_steps_over_exclusions():
    job = Scenario()
    job.enable("10:07", exclude=(MORNING,))
    job.tick("10:15")
    assert job.record.tick_at == clock("10:30")
    assert next_run(job.record, clock("10:16")) == clock("10:45")


def test_next_included_jumps_over_a_whole_day_of_a_fast_schedule():
    every_second = parse_schedule("every 1s", "UTC")
    start = datetime(2026, 1, 6, 0, 0, 0, tzinfo=UTC)
    assert next_included(every_second, (MORNING,), start) == datetime(2026, 1, 7, tzinfo=UTC)


def test_calendars_round_trip_through_their_stored_form():
    assert calendars_from_list(calendars_to_list((MORNING,))) == (MORNING,)


def test_a_stored_policy_without_exclusions_reads_as_none_and_writes_no_key():
    job = Scenario()
    job.enable("10:07")
    stored = policy_to_dict(job.record.policy)
    assert "exclude" not in stored  # a job without calendars stores what it stored before
    assert policy_from_dict(stored).exclude == ()
    job.enable("10:08", exclude=(MORNING,), revision="r2")
    assert policy_from_dict(policy_to_dict(job.record.policy)).exclude == (MORNING,)


def test_an_excluded_occurrence_is_not_staged_ahead_but_skipped_at_its_time():
    """Staging commits an occurrence up to `stage_ahead` early; an excluded one waits for
    its time, so its SKIPPED row is not written before it (nor before a calendar edit)."""
    staged = Tuning(stage_ahead=timedelta(seconds=1))
    job = Scenario(staged)
    job.enable("10:07", exclude=(MORNING,))
    assert job.tick("10:14:59.200") == [act.RetryLater(timedelta(milliseconds=800))]
    assert job.tick("10:15")[1:] == [skipped(clock("10:15"), SkipReason.EXCLUDED)]
