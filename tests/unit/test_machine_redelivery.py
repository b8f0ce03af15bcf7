"""A task that the queue runs again after a run that gave no answer (Cloud Tasks'
retry count above 0): the attempt that run began died with it. As docs/REFERENCE.md section 4 says of
an attempt whose process died, it is settled at once, not when its lease runs out: it is
interrupted, and sent again under the same invocation id without counting against
`max_attempts` (statemachine/invocations.py, on_interrupted)."""

from datetime import timedelta

from statemachine import actions as act
from statemachine import events as ev
from statemachine.policy import FanoutPolicy, RetryPolicy, compute_backoff
from tests.unit.machine_helpers import Scenario, clock, delivered, occurrence_id

T = clock("10:15")
INV = occurrence_id(T)
TWO_ATTEMPTS = RetryPolicy(max_attempts=2, min_backoff=timedelta(seconds=1))


def _delivered_inline(**fields) -> tuple[Scenario, str]:
    job = Scenario()
    job.enable("10:07", **fields)
    nonce = job.record.tick_nonce
    assert delivered(T) == [a for a in job.tick("10:15") if not isinstance(a, act.ScheduleTick)]
    return job, nonce


def _resent(at: str, retry: RetryPolicy = TWO_ATTEMPTS) -> list:
    """What interrupting attempt 1 at `at` does: sent again as attempt 2 after the
    backoff a failure of it would have waited, its first interruption."""
    resend_at = clock(at) + compute_backoff(retry, 1, f"{INV}/0")
    return [act.RecordAttemptInterrupted(INV, 0, 1, resend_at, 1), act.EnqueueAttempt(INV, 0, 2, resend_at)]


def test_a_retried_tick_interrupts_what_its_dead_run_delivered_inline_and_sends_it_again():
    job, nonce = _delivered_inline(retry=TWO_ATTEMPTS)
    assert job.step(ev.TickArrived(nonce), "10:15:02") == []  # a duplicate: the attempt is in flight
    assert job.step(ev.TickArrived(nonce, redelivered=True), "10:15:02") == _resent("10:15:02")
    assert job.step(ev.InvocationStarting(INV, 0, 2), "10:15:04") == [act.Deliver(INV, T, "schedule", 0, 1, 2, 2)]


def test_with_one_attempt_the_interrupted_attempt_is_sent_again_all_the_same():
    job, nonce = _delivered_inline()  # retry: {max_attempts: 1}
    assert job.step(ev.TickArrived(nonce, redelivered=True), "10:15:02") == _resent("10:15:02", RetryPolicy())
    assert job.record.find_active(INV).interruptions == 1


def test_a_retried_tick_settles_nothing_once_the_attempt_has_its_answer():
    job, nonce = _delivered_inline()
    job.step(ev.InvocationFinished(INV, True, "", 0, 1), "10:15:01")
    assert job.step(ev.TickArrived(nonce, redelivered=True), "10:15:02") == []


def test_a_retried_tick_that_delivered_nothing_changes_nothing():
    job, _ = _delivered_inline()
    before = job.record
    assert job.step(ev.TickArrived("0.99", redelivered=True), "10:15:02") == []
    assert job.record == before


def test_a_retried_start_task_settles_its_attempt_within_its_lease():
    job = Scenario()
    job.enable("10:07", retry=TWO_ATTEMPTS)
    job.tick("10:14:59.980")  # 20 ms early: the start goes through a start task
    assert job.step(ev.InvocationStarting(INV), "10:15:01") == [act.Deliver(INV, T, "schedule", 0, 1, 1)]
    assert job.step(ev.InvocationStarting(INV), "10:15:05") == []
    assert job.step(ev.InvocationStarting(INV, redelivered=True), "10:15:05") == _resent("10:15:05")
    assert job.step(ev.InvocationStarting(INV, redelivered=True), "10:15:06") == []  # attempt 1 is settled


def test_a_retried_start_task_of_a_fanout_event_settles_that_event():
    job = Scenario()
    job.enable("10:07", fanout=FanoutPolicy(count=3, spread=timedelta(0)), retry=TWO_ATTEMPTS)
    job.tick("10:15")
    job.step(ev.InvocationStarting(INV, 2, 1), "10:15:01")
    assert job.step(ev.InvocationStarting(INV, 2, 1), "10:15:02") == []
    [retry] = job.step(ev.InvocationStarting(INV, 2, 1, redelivered=True), "10:15:02")
    assert (retry.event_index, retry.attempt) == (2, 2) and retry.at >= clock("10:15:03")
    assert (job.rows[(INV, 2)].reason, job.rows[(INV, 2)].interruptions) == ("interrupted", 1)


def test_a_retried_tick_leaves_a_later_attempt_alone():
    job, nonce = _delivered_inline(retry=TWO_ATTEMPTS)
    job.step(ev.InvocationFinished(INV, False, "http 500", 0, 1), "10:15:01")  # attempt 2 waits its backoff
    assert job.step(ev.TickArrived(nonce, redelivered=True), "10:15:01.5") == []
