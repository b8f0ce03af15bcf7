"""A task that the queue runs again after a run that gave no answer (Cloud Tasks'
retry count above 0). The run may have died with its process, or only its request may
have ended (Cloud Run ends a request at its timeout and leaves the handler running): the
retry proves nothing while the attempt's lease (its `attempt_timeout` plus the start
grace) runs. Within it, the attempt is left in flight: a retried start task is handed
back until the lease's end, and a retried tick enqueues the start of the attempt it
delivered inline at the lease's end. After it, the attempt is sent again under the same
invocation id, as the watchdog would (docs/REFERENCE.md section 4, interrupted attempts)."""

from datetime import timedelta

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


LEASE_END = clock("10:17")  # attempt_timeout 60 s + start_grace 60 s after the inline start at 10:15


def test_a_retried_tick_within_the_lease_leaves_the_attempt_in_flight_and_starts_it_at_the_leases_end():
    job, nonce = _delivered_inline(retry=TWO_ATTEMPTS)
    before = job.record
    assert job.step(ev.TickArrived(nonce), "10:15:02") == []  # a duplicate: the attempt is in flight
    assert job.step(ev.TickArrived(nonce, redelivered=True), "10:15:02") == [act.EnqueueAttempt(INV, 0, 1, LEASE_END)]
    assert job.record == before  # nothing settled: the first run may still be sending it
    # Its answer comes before the lease's end: the start task then finds nothing to do.
    job.step(ev.InvocationFinished(INV, True, "", 0, 1, epoch=1), "10:16:30")
    assert job.step(ev.InvocationStarting(INV, 0, 1), "10:17") == []


def test_the_start_enqueued_at_the_leases_end_sends_the_attempt_again_under_its_id():
    job, nonce = _delivered_inline()
    job.step(ev.TickArrived(nonce, redelivered=True), "10:15:02")
    assert job.step(ev.InvocationStarting(INV, 0, 1), "10:17") == [act.Deliver(INV, T, "schedule", 0, 1, 1, 2)]


def test_a_retried_tick_after_the_lease_sends_the_attempt_again():
    job, nonce = _delivered_inline()
    again = job.step(ev.TickArrived(nonce, redelivered=True), "10:17:01")
    assert again == [act.Deliver(INV, T, "schedule", 0, 1, 1, 2)]


def test_a_retried_tick_settles_nothing_once_the_attempt_has_its_answer():
    job, nonce = _delivered_inline()
    job.step(ev.InvocationFinished(INV, True, "", 0, 1), "10:15:01")
    assert job.step(ev.TickArrived(nonce, redelivered=True), "10:15:02") == []


def test_a_retried_tick_that_delivered_nothing_changes_nothing():
    job, _ = _delivered_inline()
    before = job.record
    assert job.step(ev.TickArrived("0.99", redelivered=True), "10:15:02") == []
    assert job.record == before


def test_a_retried_start_task_within_its_lease_is_handed_back_until_the_leases_end():
    job = Scenario()
    job.enable("10:07", retry=TWO_ATTEMPTS)
    job.tick("10:14:59.980")  # 20 ms early: the start goes through a start task
    assert job.step(ev.InvocationStarting(INV), "10:15:01") == [act.Deliver(INV, T, "schedule", 0, 1, 1)]
    before = job.record
    assert job.step(ev.InvocationStarting(INV), "10:15:05") == []
    assert job.step(ev.InvocationStarting(INV, redelivered=True), "10:15:05") == [
        act.RetryLater(timedelta(seconds=116))]  # started 10:15:01, lease 120 s
    assert job.record == before
    # At the lease's end the copy handed back sends it again, the same attempt under its id.
    assert job.step(ev.InvocationStarting(INV), "10:17:01") == [act.Deliver(INV, T, "schedule", 0, 1, 1, 2)]


def test_a_retried_start_task_of_a_fanout_event_within_its_lease_is_handed_back():
    job = Scenario()
    job.enable("10:07", fanout=FanoutPolicy(count=3, spread=timedelta(0)), retry=TWO_ATTEMPTS)
    job.tick("10:15")
    job.step(ev.InvocationStarting(INV, 2, 1), "10:15:01")
    assert job.step(ev.InvocationStarting(INV, 2, 1), "10:15:02") == []
    assert job.step(ev.InvocationStarting(INV, 2, 1, redelivered=True), "10:15:02") == [
        act.RetryLater(timedelta(seconds=119))]
    assert (job.rows[(INV, 2)].reason, job.rows[(INV, 2)].interruptions) == ("", 0)
    [again] = job.step(ev.InvocationStarting(INV, 2, 1), "10:17:01")
    assert (again.event_index, again.attempt) == (2, 1)


def test_a_retried_tick_leaves_a_later_attempt_alone():
    job, nonce = _delivered_inline(retry=TWO_ATTEMPTS)
    job.step(ev.InvocationFinished(INV, False, "http 500", 0, 1), "10:15:01")  # attempt 2 waits its backoff
    assert job.step(ev.TickArrived(nonce, redelivered=True), "10:15:01.5") == []
