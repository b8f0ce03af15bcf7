"""An attempt interrupted (its process died or stopped with it out, or its task's run was
lost) is sent again under its invocation id without counting against `max_attempts`, up
to MAX_INTERRUPTIONS times an invocation; then it is a failed attempt, `interrupted`
(statemachine/invocations.py, on_interrupted; fanout.py for events in rows). One never
sent goes back to its start task, the same attempt. Scenarios with an explicit clock."""

from datetime import timedelta

from statemachine import actions as act
from statemachine import events as ev
from statemachine.policy import MAX_INTERRUPTIONS, FanoutPolicy, RetryPolicy, compute_backoff
from statemachine.record_form import record_from_dict, record_to_dict
from statemachine.vocabulary import InvocationStatus
from tests.unit.machine_helpers import Scenario, clock, occurrence_id

T = clock("10:15")
INV = occurrence_id(T)
ONCE = RetryPolicy()  # the default: one attempt, 1 s backoff
TWICE = RetryPolicy(max_attempts=2, min_backoff=timedelta(seconds=1))


def _in_flight(**fields) -> Scenario:
    job = Scenario()
    job.enable("10:07", **fields)
    job.tick("10:15")  # attempt 1, sent inline after its commit
    return job


def _resend_at(at: str, counted: int = 1, retry: RetryPolicy = ONCE):
    return clock(at) + compute_backoff(retry, counted, f"{INV}/0")


def test_an_interrupted_attempt_is_sent_again_under_its_id_and_is_not_counted():
    job = _in_flight()  # retry: {max_attempts: 1}
    at = _resend_at("10:15:20")
    assert job.step(ev.AttemptInterrupted(INV, 0, 1), "10:15:20") == [
        act.RecordAttemptInterrupted(INV, 0, 1, at, 1), act.EnqueueAttempt(INV, 0, 2, at)]
    entry = job.record.find_active(INV)
    assert (entry.attempts, entry.interruptions, entry.started_mask) == ((2,), 1, 0)
    assert job.state == "RUNNING"
    assert job.step(ev.InvocationStarting(INV, 0, 2), at) == [act.Deliver(INV, T, "schedule", 0, 1, 2, 2)]
    assert job.step(ev.InvocationFinished(INV, True, "", 0, 2, epoch=2), "10:15:22") == [
        act.FinishInvocation(INV, InvocationStatus.SUCCEEDED, "")]


def test_after_an_interruption_a_failure_is_retried_as_many_times_as_the_policy_says():
    job = _in_flight(retry=TWICE)
    job.step(ev.AttemptInterrupted(INV, 0, 1), "10:15:20")
    job.step(ev.InvocationStarting(INV, 0, 2), "10:15:22")
    # Attempt 2 is the first that counts: one more is left for its failure.
    at = clock("10:15:23") + compute_backoff(TWICE, 1, f"{INV}/0")
    assert job.step(ev.InvocationFinished(INV, False, "http 500", 0, 2), "10:15:23") == [
        act.RecordAttemptFailed(INV, 0, 2, "http 500", at), act.EnqueueAttempt(INV, 0, 3, at)]
    job.step(ev.InvocationStarting(INV, 0, 3), "10:15:26")
    assert job.step(ev.InvocationFinished(INV, False, "http 500", 0, 3), "10:15:27") == [
        act.RecordAttemptFailed(INV, 0, 3, "http 500", None),
        act.FinishInvocation(INV, InvocationStatus.FAILED, "http 500")]


def _interrupt_each_attempt(job: Scenario, times: int) -> str:
    """Interrupt the attempt in flight and start the next, `times` times; the time reached."""
    now = clock("10:15:10")
    for attempt in range(1, times + 1):
        job.step(ev.AttemptInterrupted(INV, 0, attempt), now)
        now += timedelta(seconds=5)
        job.step(ev.InvocationStarting(INV, 0, attempt + 1), now)
    return now


def test_past_max_interruptions_the_next_one_counts_and_ends_it_failed_interrupted():
    job = _in_flight()
    now = _interrupt_each_attempt(job, MAX_INTERRUPTIONS)
    last = MAX_INTERRUPTIONS + 1
    assert job.record.find_active(INV).interruptions == MAX_INTERRUPTIONS
    assert job.step(ev.AttemptInterrupted(INV, 0, last), now) == [
        act.RecordAttemptFailed(INV, 0, last, "interrupted", None),
        act.FinishInvocation(INV, InvocationStatus.FAILED, "interrupted")]
    assert job.record.active == ()


def test_past_max_interruptions_one_counts_as_a_failed_attempt_retried_if_attempts_remain():
    job = _in_flight(retry=TWICE)
    now = _interrupt_each_attempt(job, MAX_INTERRUPTIONS)
    last = MAX_INTERRUPTIONS + 1
    at = now + compute_backoff(TWICE, 1, f"{INV}/0")
    assert job.step(ev.AttemptInterrupted(INV, 0, last), now) == [
        act.RecordAttemptFailed(INV, 0, last, "interrupted", at), act.EnqueueAttempt(INV, 0, last + 1, at)]


def test_an_interruption_whose_next_attempt_would_miss_the_deadline_ends_it_failed():
    job = _in_flight(timeout=timedelta(seconds=30))
    assert job.step(ev.AttemptInterrupted(INV, 0, 1), "10:15:29.500") == [
        act.RecordAttemptFailed(INV, 0, 1, "interrupted", None),
        act.FinishInvocation(INV, InvocationStatus.FAILED, "interrupted")]


def test_the_interrupted_attempts_start_task_and_late_answer_change_nothing():
    job = _in_flight()
    job.step(ev.AttemptInterrupted(INV, 0, 1), "10:15:20")
    before = job.record
    assert job.step(ev.InvocationStarting(INV, 0, 1), "10:15:20.100") == []  # handed back by its process
    assert job.step(ev.AttemptInterrupted(INV, 0, 1), "10:15:20.200") == []  # settled twice
    assert job.step(ev.InvocationFinished(INV, True, "", 0, 1, epoch=1), "10:15:21") == [
        act.RefuseStaleResult(INV, 0, 1, 1)]
    assert job.record == before


def test_an_attempt_its_process_never_sent_goes_back_to_its_start_task_uncounted():
    job = _in_flight()
    assert job.step(ev.AttemptInterrupted(INV, 0, 1, epoch=1, unsent=True), "10:15:00.300") == [
        act.EnqueueAttempt(INV, 0, 1, T)]
    entry = job.record.find_active(INV)
    assert (entry.attempts, entry.interruptions, entry.started_mask, entry.epoch) == ((1,), 0, 0, 2)
    (deliver,) = job.step(ev.InvocationStarting(INV, 0, 1), "10:15:05")
    assert (deliver.attempt, deliver.epoch, deliver.send_at) == (1, 3, None)


def test_an_unsent_report_of_an_issue_that_was_issued_again_is_refused():
    job = _in_flight()
    job.step(ev.WatchdogFired(), "10:17:01")  # the lease ran out: the watchdog issues attempt 1 again
    job.step(ev.InvocationStarting(INV, 0, 1), "10:17:02")
    before = job.record
    assert job.step(ev.AttemptInterrupted(INV, 0, 1, epoch=1, unsent=True), "10:17:03") == []
    assert job.record == before


def test_the_count_is_stored_and_a_record_without_it_reads_as_none():
    job = _in_flight()
    assert "interruptions" not in record_to_dict(job.record)["active"][0]  # the layout as before
    job.step(ev.AttemptInterrupted(INV, 0, 1), "10:15:20")
    stored = record_to_dict(job.record)
    assert stored["active"][0]["interruptions"] == 1
    del stored["active"][0]["interruptions"]
    assert record_from_dict(stored).active[0].interruptions == 0


def _fanned_out(**fields) -> Scenario:
    job = Scenario()
    job.enable("10:07", fanout=FanoutPolicy(count=2, spread=timedelta(0)), **fields)
    job.tick("10:15")
    job.step(ev.InvocationStarting(INV, 1, 1), "10:15:01")
    return job


def test_a_fanout_events_interruption_is_sent_again_and_counted_on_its_row():
    job = _fanned_out()
    at = clock("10:15:02") + compute_backoff(ONCE, 1, f"{INV}/1")
    assert job.step(ev.AttemptInterrupted(INV, 1, 1), "10:15:02") == [act.EnqueueAttempt(INV, 1, 2, at)]
    row = job.rows[(INV, 1)]
    assert (row.attempt, row.interruptions, row.reason, row.retry_at) == (2, 1, "interrupted", at)
    job.step(ev.InvocationStarting(INV, 1, 2), at)
    actions = job.step(ev.InvocationFinished(INV, False, "http 500", 1, 2), at + timedelta(seconds=1))
    assert not [a for a in actions if isinstance(a, act.EnqueueAttempt)]
    assert job.rows[(INV, 1)].phase == "failed"  # attempt 2 counted as the first of one


def test_a_fanout_event_past_max_interruptions_fails_interrupted():
    job = _fanned_out()
    now = clock("10:15:02")
    for attempt in range(1, MAX_INTERRUPTIONS + 1):
        job.step(ev.AttemptInterrupted(INV, 1, attempt), now)
        now = job.rows[(INV, 1)].retry_at
        job.step(ev.InvocationStarting(INV, 1, attempt + 1), now)
    job.step(ev.AttemptInterrupted(INV, 1, MAX_INTERRUPTIONS + 1), now)
    row = job.rows[(INV, 1)]
    assert (row.phase, row.reason, row.interruptions) == ("failed", "interrupted", MAX_INTERRUPTIONS)


def test_a_fanout_events_unsent_attempt_waits_for_its_start_task_again():
    job = _fanned_out()
    assert job.step(ev.AttemptInterrupted(INV, 1, 1, epoch=1, unsent=True), "10:15:02") == [
        act.EnqueueAttempt(INV, 1, 1, clock("10:15:02"))]
    row = job.rows[(INV, 1)]
    assert (row.attempt, row.phase, row.interruptions) == (1, "waiting", 0)
