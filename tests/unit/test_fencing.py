"""The fencing token of an attempt (issue 21): every commit that issues an attempt
(its first start, a start after the watchdog re-issued it) gives it a new epoch, the
Deliver carries it, and a result carrying an older one is refused: a process that
stalled past its lease can never record over the newer issue's answer."""

from datetime import timedelta

from statemachine import actions as act
from statemachine import events as ev
from statemachine.fanout import EventPhase, EventState, state_from_dict, state_to_dict
from statemachine.policy import FanoutPolicy, RetryPolicy
from statemachine.record_form import record_from_dict, record_to_dict
from statemachine.vocabulary import InvocationStatus
from tests.unit.machine_helpers import Scenario, clock, occurrence_id

T = clock("10:15")
INV = occurrence_id(T)
TWO_ATTEMPTS = RetryPolicy(max_attempts=2, min_backoff=timedelta(seconds=1))


def _deliver(actions: list) -> act.Deliver:
    [deliver] = [a for a in actions if isinstance(a, act.Deliver)]
    return deliver


def _inline() -> tuple[Scenario, act.Deliver]:
    job = Scenario()
    job.enable("10:07")
    return job, _deliver(job.tick("10:15"))


def test_a_result_sent_before_the_watchdog_issued_the_attempt_again_is_refused():
    job, first = _inline()
    assert (first.attempt, first.epoch) == (1, 1)
    # Its lease (attempt timeout 60 s + start grace 60 s) runs out: the watchdog issues it again.
    assert job.step(ev.WatchdogFired(), "10:17:01") == [act.EnqueueAttempt(INV, 0, 1, clock("10:17:01"))]
    second = _deliver(job.step(ev.InvocationStarting(INV, 0, 1), "10:17:02"))
    assert (second.attempt, second.epoch) == (1, 2)  # the same attempt, a new issue of it
    before = job.record
    stale = ev.InvocationFinished(INV, False, "http 500", 0, 1, epoch=first.epoch)
    assert job.step(stale, "10:17:03") == [act.RefuseStaleResult(INV, 0, 1, 1)]
    assert job.record == before  # nothing of it recorded
    accepted = ev.InvocationStarted(INV, 0, 1, epoch=first.epoch)
    assert job.step(accepted, "10:17:03") == [act.RefuseStaleResult(INV, 0, 1, 1)]
    current = ev.InvocationFinished(INV, True, "", 0, 1, epoch=second.epoch)
    assert job.step(current, "10:17:04") == [act.FinishInvocation(INV, InvocationStatus.SUCCEEDED, "")]


def test_the_current_issue_and_an_unfenced_result_are_recorded():
    job, first = _inline()
    assert job.step(ev.InvocationFinished(INV, True, "", 0, 1, epoch=first.epoch), "10:15:01") == [
        act.FinishInvocation(INV, InvocationStatus.SUCCEEDED, "")]
    job, _ = _inline()  # a result without an epoch (made by hand, or before fencing) is not fenced
    assert job.step(ev.InvocationFinished(INV, True, "", 0, 1), "10:15:01") == [
        act.FinishInvocation(INV, InvocationStatus.SUCCEEDED, "")]


def test_a_late_result_of_an_attempt_settled_as_interrupted_is_refused():
    job = Scenario()
    job.enable("10:07", retry=TWO_ATTEMPTS)
    first = _deliver(job.tick("10:15"))
    # Its process was taken for gone: the hold settles it (no epoch: not a sender's answer).
    settled = job.step(ev.AttemptInterrupted(INV, 0, 1), "10:15:30")
    assert isinstance(settled[0], act.RecordAttemptInterrupted)
    before = job.record
    late = ev.InvocationFinished(INV, True, "", 0, 1, epoch=first.epoch)
    assert job.step(late, "10:15:31") == [act.RefuseStaleResult(INV, 0, 1, 1)]
    assert job.record == before
    retry = _deliver(job.step(ev.InvocationStarting(INV, 0, 2), "10:15:40"))
    assert (retry.attempt, retry.epoch) == (2, 2)


def test_a_fanout_events_stale_result_is_refused_and_its_row_left_alone():
    job = Scenario()
    job.enable("10:07", fanout=FanoutPolicy(count=2, spread=timedelta(0)))
    job.tick("10:15")
    first = _deliver(job.step(ev.InvocationStarting(INV, 1, 1), "10:15:01"))
    assert first.epoch == 1
    reissued = job.step(ev.WatchdogFired(), "10:17:02")
    assert act.EnqueueAttempt(INV, 1, 1, clock("10:17:02")) in reissued
    second = _deliver(job.step(ev.InvocationStarting(INV, 1, 1), "10:17:03"))
    assert second.epoch == 2
    row = job.rows[(INV, 1)]
    assert job.step(ev.InvocationFinished(INV, True, "", 1, 1, epoch=1), "10:17:04") == [
        act.RefuseStaleResult(INV, 1, 1, 1)]
    assert job.step(ev.InvocationStarted(INV, 1, 1, epoch=1), "10:17:04") == [act.RefuseStaleResult(INV, 1, 1, 1)]
    assert job.rows[(INV, 1)] == row
    job.step(ev.InvocationFinished(INV, True, "", 1, 1, epoch=2), "10:17:05")
    assert job.rows[(INV, 1)].phase is EventPhase.SUCCEEDED


def test_records_and_rows_written_before_fencing_read_with_epoch_zero():
    job, _ = _inline()
    stored = record_to_dict(job.record)
    assert stored["active"][0]["epoch"] == 1
    del stored["active"][0]["epoch"]  # as an earlier release wrote it
    old = record_from_dict(stored)
    assert old.active[0].epoch == 0
    # The next issue of it counts on from there; a result of the old release's send has no epoch.
    job.record = old
    job.step(ev.WatchdogFired(), "10:17:01")
    assert _deliver(job.step(ev.InvocationStarting(INV, 0, 1), "10:17:02")).epoch == 1
    row = state_to_dict(EventState(3, 2, EventPhase.STARTED, clock("10:15"), None, "", 4))
    assert state_from_dict(row).epoch == 4
    del row["epoch"]
    assert state_from_dict(row) == EventState(3, 2, EventPhase.STARTED, clock("10:15"), None, "", 0)
