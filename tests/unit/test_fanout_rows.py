"""A fan-out invocation's events in rows of their own: the job record stays the same
size whatever the count, an event's steps leave the record alone, and the invocation
ends exactly as it did when the events were kept in the record."""

import json
from datetime import timedelta

from statemachine import actions as act
from statemachine import events as ev
from statemachine.fanout import EventPhase, EventState
from statemachine.fanout_step import EventsCheckDue, check_due
from statemachine.policy import FanoutPolicy, RetryPolicy, Tuning
from statemachine.record_form import record_from_dict, record_to_dict
from tests.unit.machine_helpers import Scenario, clock, occurrence_id

T = clock("10:15")
INV = occurrence_id(T)


def _fanned_out(count: int, spread: timedelta = timedelta(0), **fields) -> Scenario:
    job = Scenario()
    job.enable("10:07", fanout=FanoutPolicy(count=count, spread=spread), **fields)
    job.tick("10:15")
    return job


def _record_bytes(job: Scenario) -> int:
    return len(json.dumps(record_to_dict(job.record)))


def test_the_job_record_does_not_grow_with_the_fanout_count():
    small, large = _fanned_out(2), _fanned_out(10_000)
    # Only the count's own digits differ (it is in the policy and in the active entry).
    assert _record_bytes(large) - _record_bytes(small) <= 8
    assert _record_bytes(large) < 2_000


def test_an_events_start_and_success_write_its_row_and_leave_the_record_alone():
    job = _fanned_out(50)
    record = job.record
    for index in range(50):
        assert job.step(ev.InvocationStarting(INV, index, 1), "10:15:01") == [
            act.Deliver(INV, T, "schedule", index, 50, 1)
        ]
        assert job.record == record
    assert job.rows[(INV, 7)].phase is EventPhase.STARTED
    check = act.CheckEvents(INV, clock("10:15:05"))  # the end of the second, plus the margin
    for index in range(49):
        assert job.step(ev.InvocationFinished(INV, True, "", index, 1), "10:15:02") == [check]
        assert job.record == record
    assert job.step(EventsCheckDue(INV), "10:15:03") == []  # one event still out
    assert job.step(ev.InvocationFinished(INV, True, "", 49, 1), "10:15:02") == [check]
    assert job.record == record
    assert job.step(EventsCheckDue(INV), "10:15:03") == [act.FinishInvocation(INV, "SUCCEEDED", "")]
    assert job.record.active == ()
    assert job.step(EventsCheckDue(INV), "10:15:04") == []  # a check that comes twice


def test_a_duplicate_start_while_an_event_is_in_flight_delivers_once():
    job = _fanned_out(3)
    assert len(job.step(ev.InvocationStarting(INV, 1, 1), "10:15:01")) == 1
    assert job.step(ev.InvocationStarting(INV, 1, 1), "10:15:02") == []
    # Once its lease (attempt timeout 60 s + start grace 60 s) ran out, the attempt is lost.
    assert job.step(ev.InvocationStarting(INV, 1, 1), "10:17:02") == [act.Deliver(INV, T, "schedule", 1, 3, 1)]


def test_a_failed_event_is_retried_no_earlier_than_min_backoff_and_a_stale_attempt_changes_nothing():
    job = _fanned_out(2, retry=RetryPolicy(max_attempts=2, min_backoff=timedelta(seconds=10)))
    job.step(ev.InvocationStarting(INV, 1, 1), "10:15:01")
    [retry] = job.step(ev.InvocationFinished(INV, False, "http 500", 1, 1), "10:15:02")
    assert isinstance(retry, act.EnqueueAttempt) and (retry.event_index, retry.attempt) == (1, 2)
    assert retry.at >= clock("10:15:12")
    assert job.rows[(INV, 1)] == EventState(1, 2, EventPhase.WAITING, None, retry.at, "http 500")
    assert job.step(ev.InvocationStarting(INV, 1, 1), "10:15:20") == []  # attempt 1 is over
    early = retry.at - timedelta(milliseconds=300)
    assert job.step(ev.InvocationStarting(INV, 1, 2), early) == [act.RetryLater(timedelta(milliseconds=300))]
    job.step(ev.InvocationStarting(INV, 0, 1), "10:15:20")
    job.step(ev.InvocationFinished(INV, True, "", 0, 1), "10:15:21")
    job.step(ev.InvocationStarting(INV, 1, 2), "10:15:20")
    job.step(ev.InvocationFinished(INV, False, "http 503", 1, 2), "10:15:22")
    assert job.step(EventsCheckDue(INV), "10:15:23") == [
        act.FinishInvocation(INV, "FAILED", "1 of 2 events failed; first: http 503")
    ]


def test_an_event_starting_while_the_job_is_paused_ends_the_invocation():
    job = _fanned_out(3, spread=timedelta(seconds=30))
    job.step(ev.InvocationStarting(INV, 0, 1), "10:15:00")
    job.step(ev.Paused("maintenance"), "10:15:05")
    assert job.step(ev.InvocationStarting(INV, 1, 1), "10:15:10") == [
        act.FinishInvocation(INV, "ABORTED", "paused")
    ]
    assert job.record.active == ()
    assert job.step(ev.InvocationStarting(INV, 2, 1), "10:15:20") == []  # nothing left to start


def test_an_event_starting_after_the_deadline_fails_the_invocation():
    job = _fanned_out(2, spread=timedelta(seconds=30), timeout=timedelta(seconds=20))
    assert job.step(ev.InvocationStarting(INV, 1, 1), "10:15:51") == [
        act.FinishInvocation(INV, "FAILED", "timeout")
    ]


def test_the_watchdog_reissues_the_events_that_did_not_start_and_the_attempts_lost_in_flight():
    job = _fanned_out(4)
    job.step(ev.InvocationStarting(INV, 0, 1), "10:15:00")  # lost in flight
    job.step(ev.InvocationStarting(INV, 1, 1), "10:15:00")
    job.step(ev.InvocationFinished(INV, True, "", 1, 1), "10:15:01")
    job.step(ev.InvocationStarting(INV, 2, 1), "10:15:00")
    job.step(ev.InvocationStarted(INV, 2, 1), "10:15:01")  # accepted (202): it waits for its completion
    assert job.record.watchdog_at == clock("10:16")  # the last event due at 10:15, plus the start grace
    actions = job.step(ev.WatchdogFired(), "10:17:00")
    assert actions == [act.EnqueueAttempt(INV, 0, 1, clock("10:17")), act.EnqueueAttempt(INV, 3, 1, clock("10:17"))]
    assert job.record.watchdog_at == clock("10:20")  # the re-issued ones: start grace, then their lease
    assert job.step(ev.InvocationStarting(INV, 3, 1), "10:17:01") == [act.Deliver(INV, T, "schedule", 3, 4, 1)]


def test_the_async_completion_settles_the_events_in_flight_and_leaves_the_waiting_ones():
    job = _fanned_out(3, spread=timedelta(seconds=30))
    for index in (0, 1):
        job.step(ev.InvocationStarting(INV, index, 1), "10:15:10")
        job.step(ev.InvocationStarted(INV, index, 1), "10:15:11")
    assert job.step(ev.InvocationFinished(INV, True, "done", attempt=None), "10:15:12") == [
        act.CheckEvents(INV, clock("10:15:15"))
    ]
    assert job.rows[(INV, 0)].phase is EventPhase.SUCCEEDED
    assert job.step(EventsCheckDue(INV), "10:15:13") == []  # event 2 has not started
    job.step(ev.InvocationStarting(INV, 2, 1), "10:15:20")
    job.step(ev.InvocationFinished(INV, True, "", 2, 1), "10:15:21")
    assert job.step(EventsCheckDue(INV), "10:15:22") == [act.FinishInvocation(INV, "SUCCEEDED", "")]


def test_the_watchdog_ends_a_fanout_whose_check_was_lost():
    job = _fanned_out(2)
    for index in range(2):
        job.step(ev.InvocationStarting(INV, index, 1), "10:15:00")
        job.step(ev.InvocationFinished(INV, True, "", index, 1), "10:15:01")
    assert act.FinishInvocation(INV, "SUCCEEDED", "") in job.step(ev.WatchdogFired(), "10:16:00")
    assert job.record.active == ()


def test_an_abort_ends_the_invocation_and_its_events_later_steps_change_nothing():
    job = _fanned_out(2, spread=timedelta(seconds=30))
    job.step(ev.InvocationStarting(INV, 0, 1), "10:15:00")
    assert act.FinishInvocation(INV, "ABORTED", "aborted") in job.step(ev.Aborted(), "10:15:05")
    assert job.step(ev.InvocationFinished(INV, True, "", 0, 1), "10:15:06") == []
    assert job.step(ev.InvocationStarting(INV, 1, 1), "10:15:30") == []


def test_a_fanout_begun_before_version_2_keeps_its_events_in_the_record_until_it_ends():
    job = _fanned_out(3)
    stored = record_to_dict(job.record)
    # Written by the previous release: version 1, the events' progress as masks.
    stored["version"] = 1
    [entry] = stored["active"]
    for key in ("events_in_rows",):
        entry.pop(key)
    entry.update(attempts=[1, 1, 1], started="0", accepted="0", done="0", failed="0", failure_reason="")
    job.record = record_from_dict(stored)
    assert not job.record.active[0].events_in_rows
    for index in range(3):
        job.step(ev.InvocationStarting(INV, index, 1), "10:15:01")
    job.step(ev.InvocationFinished(INV, True, "", 0, 1), "10:15:02")
    job.step(ev.InvocationFinished(INV, True, "", 1, 1), "10:15:02")
    assert job.rows == {}
    assert job.step(ev.InvocationFinished(INV, True, "", 2, 1), "10:15:02") == [
        act.FinishInvocation(INV, "SUCCEEDED", "")
    ]
    # Written at the lowest version that holds it: nothing in rows, so still version 1.
    assert record_to_dict(job.record)["version"] == 1


def test_one_check_serves_the_outcomes_of_a_period_that_grows_with_the_count():
    # The end of the period, plus two seconds for an outcome decided in it to commit.
    assert check_due(clock("10:15:02.300"), 50) == clock("10:15:05")
    assert check_due(clock("10:15:03"), 50) == clock("10:15:06")
    assert check_due(clock("10:15:02.300"), 10_000) == clock("10:15:12")  # ten seconds for 10,000 events
    assert check_due(clock("10:15:09.999"), 10_000) == clock("10:15:12")


def test_events_that_all_answered_before_the_deadline_succeed_though_the_check_comes_after_it():
    job = _fanned_out(2, timeout=timedelta(seconds=60))
    for index, at in ((0, "10:15:59.2"), (1, "10:15:59.4")):
        job.step(ev.InvocationStarting(INV, index, 1), "10:15:58")
        job.step(ev.InvocationFinished(INV, True, "", index, 1), at)
    assert act.FinishInvocation(INV, "SUCCEEDED", "") in job.step(ev.WatchdogFired(), "10:16:00")


def test_the_watchdog_keeps_looking_while_an_accepted_event_owes_its_completion():
    job = _fanned_out(2)
    for index in range(2):
        job.step(ev.InvocationStarting(INV, index, 1), "10:15:00")
    job.step(ev.InvocationStarted(INV, 0, 1), "10:15:01")
    job.step(ev.InvocationFinished(INV, True, "", 1, 1), "10:15:01")
    job.step(ev.WatchdogFired(), "10:16:00")
    assert job.record.watchdog_at == clock("10:18:00")  # a lease on, not only the 10:25 deadline
    job.step(ev.InvocationFinished(INV, True, "", attempt=None), "10:16:30")  # its check gets lost
    assert act.FinishInvocation(INV, "SUCCEEDED", "") in job.step(ev.WatchdogFired(), "10:18:00")


def test_paused_before_any_event_went_out_the_fanout_is_skipped():
    job = _fanned_out(3, spread=timedelta(seconds=30))
    job.step(ev.Paused("maintenance"), "10:15:00")
    assert job.step(ev.InvocationStarting(INV, 1, 1), "10:15:10") == [
        act.FinishInvocation(INV, "SKIPPED", "paused")
    ]


def test_with_the_switch_off_a_fanout_keeps_its_events_inline_and_each_events_answer_counts():
    """SUNDIAL_RECORD_VERSION=1 (Tuning.fanout_rows off): a new fan-out is written as the
    release before reads it, version 1 with its events inline. Its events are in flight at
    once: one issue counter for them all must not make an earlier event's answer stale."""
    job = Scenario(Tuning(fanout_rows=False))
    job.enable("10:07", fanout=FanoutPolicy(count=3, spread=timedelta(0)))
    job.tick("10:15")
    entry = job.record.active[0]
    assert not entry.events_in_rows and entry.attempts == (1, 1, 1)
    assert record_to_dict(job.record)["version"] == 1
    sent = [job.step(ev.InvocationStarting(INV, index, 1), "10:15:01")[0] for index in range(3)]
    for deliver in sent[:2]:
        assert job.step(ev.InvocationFinished(INV, True, "", deliver.event_index, 1, epoch=deliver.epoch),
                        "10:15:02") == []
    assert job.step(ev.InvocationFinished(INV, True, "", 2, 1, epoch=sent[2].epoch), "10:15:02") == [
        act.FinishInvocation(INV, "SUCCEEDED", "")
    ]
    assert job.rows == {} and job.record.active == ()
