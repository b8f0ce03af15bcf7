"""A task that the queue runs again after a run that gave no answer (Cloud Tasks'
retry count above 0; CONTRACT 4): the attempt that run began died with it, and is
delivered again at once under the same invocation id and attempt, instead of
blocking its job until its lease runs out."""

from datetime import timedelta

from statemachine import actions as act
from statemachine import events as ev
from statemachine.policy import FanoutPolicy
from tests.unit.machine_helpers import Scenario, clock, delivered, occurrence_id

T = clock("10:15")
INV = occurrence_id(T)


def _delivered_inline() -> tuple[Scenario, str]:
    job = Scenario()
    job.enable("10:07")
    nonce = job.record.tick_nonce
    assert delivered(T) == [a for a in job.tick("10:15") if not isinstance(a, act.ScheduleTick)]
    return job, nonce


def test_a_retried_tick_delivers_again_what_its_dead_run_delivered_inline():
    job, nonce = _delivered_inline()
    assert job.step(ev.TickArrived(nonce), "10:15:02") == []  # a duplicate: the attempt is in flight
    assert job.step(ev.TickArrived(nonce, redelivered=True), "10:15:02") == [
        act.Deliver(INV, T, "schedule", 0, 1, 1)
    ]
    assert job.record.find_active(INV).started_at == clock("10:15:02")  # its lease starts again


def test_a_retried_tick_delivers_nothing_once_the_attempt_has_its_answer():
    job, nonce = _delivered_inline()
    job.step(ev.InvocationFinished(INV, True, "", 0, 1), "10:15:01")
    assert job.step(ev.TickArrived(nonce, redelivered=True), "10:15:02") == []


def test_a_retried_tick_that_delivered_nothing_changes_nothing():
    job, _ = _delivered_inline()
    before = job.record
    assert job.step(ev.TickArrived("0.99", redelivered=True), "10:15:02") == []
    assert job.record == before


def test_a_retried_start_task_delivers_its_attempt_again_within_its_lease():
    job = Scenario()
    job.enable("10:07")
    job.tick("10:14:59.980")  # 20 ms early: the start goes through a start task
    assert job.step(ev.InvocationStarting(INV), "10:15:01") == [act.Deliver(INV, T, "schedule", 0, 1, 1)]
    assert job.step(ev.InvocationStarting(INV), "10:15:05") == []
    assert job.step(ev.InvocationStarting(INV, redelivered=True), "10:15:05") == [
        act.Deliver(INV, T, "schedule", 0, 1, 1)
    ]


def test_a_retried_start_task_of_a_fanout_event_delivers_it_again():
    job = Scenario()
    job.enable("10:07", fanout=FanoutPolicy(count=3, spread=timedelta(0)))
    job.tick("10:15")
    job.step(ev.InvocationStarting(INV, 2, 1), "10:15:01")
    assert job.step(ev.InvocationStarting(INV, 2, 1), "10:15:02") == []
    assert job.step(ev.InvocationStarting(INV, 2, 1, redelivered=True), "10:15:02") == [
        act.Deliver(INV, T, "schedule", 2, 3, 1)
    ]
