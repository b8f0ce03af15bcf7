"""Which hook an ended invocation asks for (statemachine/hooks.py), through the pure
machine with explicit times: on_recovery on the first success after failures only, with
SKIPPED, ABORTED, pausing and resuming in between changing nothing; and the record field
that carries the streak across a stored round trip and from an older record."""

from statemachine import actions as act
from statemachine import events as ev
from statemachine.record_form import record_from_dict, record_to_dict
from tests.unit.machine_helpers import clock, occurrence_id
from tests.unit.test_machine_failures import _every_minute, _run


def _hooks(actions: list) -> list:
    return [a for a in actions if isinstance(a, (act.NotifyFailure, act.NotifyRecovery))]


def _recovery(minute: int, failures: int) -> act.NotifyRecovery:
    at = clock(f"10:{minute:02d}")
    return act.NotifyRecovery(occurrence_id(at), at, "schedule", 1, failures)


def test_the_first_success_after_failures_asks_for_on_recovery_with_how_many_failed():
    job = _every_minute(notify_failures=True, notify_recoveries=True)
    first = _hooks(_run(job, 1, False))
    second = _hooks(_run(job, 2, False, "http 502"))
    assert [(a.reason, a.failures) for a in first + second] == [("http 500", 1), ("http 502", 2)]
    assert _hooks(_run(job, 3, True)) == [_recovery(3, 2)]
    assert _hooks(_run(job, 4, True)) == []  # later successes are not recoveries
    assert job.record.failures_since_success == 0


def test_a_success_without_a_failure_before_it_asks_for_nothing():
    job = _every_minute(notify_failures=True, notify_recoveries=True)
    assert _hooks(_run(job, 1, True)) == []


def test_without_on_recovery_a_success_asks_for_nothing_but_the_streak_is_kept():
    job = _every_minute(notify_failures=True)
    _run(job, 1, False)
    assert _hooks(_run(job, 2, True)) == []
    alone = _every_minute(notify_recoveries=True)  # on_recovery without on_failure
    assert _hooks(_run(alone, 1, False)) == []
    assert _hooks(_run(alone, 2, True)) == [_recovery(2, 1)]


def test_skipped_and_aborted_invocations_between_change_nothing():
    job = _every_minute(notify_recoveries=True)
    _run(job, 1, False)
    job.tick("10:02")
    job.step(ev.Aborted(), "10:02:01")  # ABORTED
    job.step(ev.Paused("maintenance"), "10:02:02")
    job.step(ev.Resumed(), "10:02:30")  # the minutes paused are recorded SKIPPED
    assert job.record.consecutive_failures == 0  # pause_after_failures starts again ...
    assert job.record.failures_since_success == 1  # ... but the job has not recovered yet
    assert _hooks(_run(job, 3, True)) == [_recovery(3, 1)]


def test_the_finishing_step_replayed_asks_for_no_second_recovery():
    job = _every_minute(notify_recoveries=True)
    _run(job, 1, False)
    _run(job, 2, True)
    invocation = occurrence_id(clock("10:02"))
    assert job.step(ev.InvocationFinished(invocation, True, ""), "10:02:02") == []


def test_the_streak_survives_the_stored_form_and_an_older_record_takes_consecutive_failures():
    job = _every_minute(notify_recoveries=True)
    _run(job, 1, False)
    _run(job, 2, False)
    stored = record_to_dict(job.record)
    assert record_from_dict(stored).failures_since_success == 2
    del stored["failures_since_success"]  # written before the field existed
    assert record_from_dict(stored).failures_since_success == 2
