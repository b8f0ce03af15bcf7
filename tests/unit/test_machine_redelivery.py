"""A task that the queue runs again after a run that gave no answer (Cloud Tasks'
retry count above 0): either that run died with the attempt it began, or this is a
duplicate delivery of that very run, still sending it (a task that was a retry already
carries the same count in both). So within the attempt's lease nothing is settled: a
start task due at the lease's end sends the attempt again, under the same invocation
id, if it is still in flight then (docs/REFERENCE.md section 4). A staged attempt not
yet let out goes back to its start task at once: its sender checks the store again at
its time (tests/unit/test_machine_staging.py)."""

from datetime import datetime, timedelta

from statemachine import actions as act
from statemachine import events as ev
from statemachine.policy import FanoutPolicy, RetryPolicy
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


def _lease_end(job: Scenario, at: str) -> datetime:
    return clock(at) + job.record.live_policy.attempt_timeout + job.tuning.start_grace


def test_a_retried_tick_leaves_a_start_at_the_lease_end_which_sends_the_attempt_again_if_still_out():
    job, nonce = _delivered_inline(retry=TWO_ATTEMPTS)
    until = _lease_end(job, "10:15")
    assert job.step(ev.TickArrived(nonce), "10:15:02") == []  # a duplicate: the attempt is in flight
    before = job.record
    assert job.step(ev.TickArrived(nonce, redelivered=True), "10:15:02") == [act.EnqueueAttempt(INV, 0, 1, until)]
    assert job.record == before  # attempt 1 still in flight: its sender may be alive
    assert job.step(ev.InvocationStarting(INV, 0, 1), until) == [act.Deliver(INV, T, "schedule", 0, 1, 1, 2)]


def test_a_retried_tick_that_duplicates_a_live_run_sends_nothing_again():
    job, nonce = _delivered_inline(retry=TWO_ATTEMPTS)
    until = _lease_end(job, "10:15")
    assert job.step(ev.TickArrived(nonce, redelivered=True), "10:15:02") == [act.EnqueueAttempt(INV, 0, 1, until)]
    job.step(ev.InvocationFinished(INV, True, "", 0, 1, 1), "10:15:03")  # the live run's answer
    assert job.step(ev.InvocationStarting(INV, 0, 1), until) == []


def test_a_retried_tick_settles_nothing_once_the_attempt_has_its_answer():
    job, nonce = _delivered_inline()
    job.step(ev.InvocationFinished(INV, True, "", 0, 1), "10:15:01")
    assert job.step(ev.TickArrived(nonce, redelivered=True), "10:15:02") == []


def test_a_retried_tick_that_delivered_nothing_changes_nothing():
    job, _ = _delivered_inline()
    before = job.record
    assert job.step(ev.TickArrived("0.99", redelivered=True), "10:15:02") == []
    assert job.record == before


def test_a_retried_start_task_within_its_lease_leaves_its_attempt_in_flight():
    job = Scenario()
    job.enable("10:07", retry=TWO_ATTEMPTS)
    job.tick("10:14:59.980")  # 20 ms early: the start goes through a start task
    assert job.step(ev.InvocationStarting(INV), "10:15:01") == [act.Deliver(INV, T, "schedule", 0, 1, 1)]
    before = job.record
    assert job.step(ev.InvocationStarting(INV), "10:15:05") == []
    before = job.record
    until = _lease_end(job, "10:15:01")
    assert job.step(ev.InvocationStarting(INV, redelivered=True), "10:15:05") == [act.EnqueueAttempt(INV, 0, 1, until)]
    assert job.record == before
    assert job.step(ev.InvocationStarting(INV), until) == [act.Deliver(INV, T, "schedule", 0, 1, 1, 2)]


def test_a_retried_start_task_of_a_fanout_event_leaves_that_event_in_flight():
    job = Scenario()
    job.enable("10:07", fanout=FanoutPolicy(count=3, spread=timedelta(0)), retry=TWO_ATTEMPTS)
    job.tick("10:15")
    job.step(ev.InvocationStarting(INV, 2, 1), "10:15:01")
    assert job.step(ev.InvocationStarting(INV, 2, 1), "10:15:02") == []
    before = job.rows[(INV, 2)]
    until = _lease_end(job, "10:15:01")
    assert job.step(ev.InvocationStarting(INV, 2, 1, redelivered=True), "10:15:02") == [
        act.EnqueueAttempt(INV, 2, 1, until)]
    assert job.rows[(INV, 2)] == before and before.interruptions == 0


def test_a_retried_tick_leaves_a_later_attempt_alone():
    job, nonce = _delivered_inline(retry=TWO_ATTEMPTS)
    job.step(ev.InvocationFinished(INV, False, "http 500", 0, 1), "10:15:01")  # attempt 2 waits its backoff
    assert job.step(ev.TickArrived(nonce, redelivered=True), "10:15:01.5") == []
