"""Failure handling in the pure core: consecutive failures, pause_after_failures,
on_failure notifications, and throttled jobs never delivering inline."""

from datetime import timedelta

from statemachine import actions as act
from statemachine import events as ev
from statemachine.record import JobState
from tests.unit.machine_helpers import Scenario, clock, delivered, occurrence_id


def _every_minute(**fields) -> Scenario:
    job = Scenario()
    job.enable("10:00:30", schedule_text="every 1m", **fields)
    return job


def _run(job: Scenario, minute: int, succeeded: bool, reason: str = "http 500") -> list:
    """Tick at 10:MM (on time: delivered inline) and report the attempt's outcome."""
    at = f"10:{minute:02d}"
    job.tick(at)
    invocation = occurrence_id(clock(at))
    return job.step(ev.InvocationFinished(invocation, succeeded, "" if succeeded else reason), at)


def test_consecutive_failures_are_counted_and_reset_by_a_success():
    job = _every_minute()
    _run(job, 1, False)
    _run(job, 2, False)
    assert job.record.consecutive_failures == 2
    _run(job, 3, True)
    assert job.record.consecutive_failures == 0
    assert job.record.state is JobState.SCHEDULED


def test_the_nth_consecutive_failure_pauses_the_job_with_the_reason():
    job = _every_minute(pause_after_failures=3)
    _run(job, 1, False)
    _run(job, 2, False, "http 502")
    assert not job.record.paused
    actions = _run(job, 3, False, "http 503")
    third = occurrence_id(clock("10:03"))
    assert act.FinishInvocation(third, "FAILED", "http 503") in actions
    assert job.record.paused and job.record.state is JobState.PAUSED
    assert job.record.pause_reason == "paused after 3 consecutive failures (last: http 503)"
    assert job.record.tick_at is None  # no further occurrences while paused
    # Nothing new happens when the same outcome comes again.
    assert job.step(ev.InvocationFinished(third, False, "http 503"), "10:03:01") == []


def test_a_success_in_between_starts_the_count_again():
    job = _every_minute(pause_after_failures=2)
    _run(job, 1, False)
    _run(job, 2, True)
    _run(job, 3, False)
    assert not job.record.paused
    _run(job, 4, False)
    assert job.record.paused


def test_resuming_gives_the_job_its_full_allowance_again():
    job = _every_minute(pause_after_failures=2)
    _run(job, 1, False)
    _run(job, 2, False)
    assert job.record.paused
    job.step(ev.Resumed(), "10:02:30")
    assert job.record.consecutive_failures == 0
    _run(job, 3, False)
    assert not job.record.paused


def test_aborted_and_skipped_invocations_do_not_count():
    job = _every_minute(pause_after_failures=1)
    job.tick("10:01")
    job.step(ev.Aborted(), "10:01:01")
    assert job.record.consecutive_failures == 0 and not job.record.paused


def test_an_operator_pause_keeps_its_reason_when_a_failure_follows():
    job = _every_minute(pause_after_failures=1)
    job.tick("10:01")
    job.step(ev.Paused("maintenance"), "10:01:01")
    job.step(ev.InvocationFinished(occurrence_id(clock("10:01")), False, "http 500"), "10:01:02")
    assert job.record.pause_reason == "maintenance"


def test_a_failed_invocation_enqueues_its_notification_exactly_once():
    job = _every_minute(notify_failures=True)
    actions = _run(job, 1, False)
    invocation = occurrence_id(clock("10:01"))
    notices = [a for a in actions if isinstance(a, act.NotifyFailure)]
    assert notices == [act.NotifyFailure(invocation, clock("10:01"), "schedule", "http 500", 1)]
    # The finishing step replayed (a duplicate result task): no second notification.
    assert job.step(ev.InvocationFinished(invocation, False, "http 500"), "10:01:02") == []


def test_no_notification_for_success_or_without_on_failure():
    job = _every_minute(notify_failures=True)
    assert not [a for a in _run(job, 1, True) if isinstance(a, act.NotifyFailure)]
    plain = _every_minute()
    assert not [a for a in _run(plain, 1, False) if isinstance(a, act.NotifyFailure)]


def test_a_timed_out_invocation_is_notified_with_its_attempts():
    job = _every_minute(notify_failures=True, timeout=timedelta(seconds=30))
    job.tick("10:01")
    actions = job.step(ev.WatchdogFired(), "10:02")
    assert act.NotifyFailure(occurrence_id(clock("10:01")), clock("10:01"), "schedule", "timeout", 1) in actions


def test_a_throttled_job_never_delivers_inline():
    job = _every_minute(throttle="consumers")
    actions = job.tick("10:01")
    invocation = occurrence_id(clock("10:01"))
    assert actions[1:] == [
        act.StartInvocation(invocation, clock("10:01"), "schedule", 1),
        act.EnqueueAttempt(invocation, 0, 1, clock("10:01")),
        # Its start waits behind the throttle's other deliveries: the deadline has a timer.
        act.ArmDeadline(invocation, job.record.find_active(invocation).deadline),
    ]
    unthrottled = _every_minute()
    assert unthrottled.tick("10:01")[1:] == delivered(clock("10:01"))


def test_a_storm_of_triggers_waits_at_most_max_triggered_waiting_under_buffer_all():
    from statemachine.admission import MAX_TRIGGERED_WAITING
    from statemachine.policy import Overlap

    job = Scenario()
    job.enable("10:00", schedule_text="triggered", overlap=Overlap.BUFFER_ALL)
    for index in range(MAX_TRIGGERED_WAITING + 5):
        job.step(ev.ManualTrigger(f"source-{index}", "job:upstream", clock("10:01")), "10:01")
    assert len(job.record.active) == 1
    assert len(job.record.buffered) == MAX_TRIGGERED_WAITING
    actions = job.step(ev.ManualTrigger("one-more", "job:upstream", clock("10:01")), "10:01")
    assert [(type(a).__name__, a.reason) for a in actions] == [("RecordSkipped", "overlap")]
    # A person's trigger is not part of the storm: it still waits its turn.
    job.step(ev.ManualTrigger("by-hand", "manual", clock("10:01")), "10:01")
    assert len(job.record.buffered) == MAX_TRIGGERED_WAITING + 1
