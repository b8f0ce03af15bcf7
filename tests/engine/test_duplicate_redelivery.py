"""A start task that is itself a retry (its first delivery failed before committing
anything), delivered twice at once by the queue: both deliveries carry the retry
count, so neither can tell from the task whether the other died. The second must not
settle the attempt the first is sending as interrupted and issue it again: that sent
the attempt beside a newer issue of it (found by the simulator: sim/regressions.py,
seed 7). Inside the attempt's lease, a redelivered
start leaves a start task due when the lease has run out, which sends the attempt again
only if it is still in flight then."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from engine.ports import DeliveryResult, Task
from engine.recording import start_task
from engine.service import build_engine
from statemachine import actions as act
from statemachine.policy import RetryPolicy, Tuning
from statemachine.vocabulary import TaskKind
from tests.engine.harness import START, Harness

RETRY = RetryPolicy(3, timedelta(seconds=1), timedelta(seconds=10))


def test_a_duplicate_of_a_retried_start_task_leaves_the_attempt_being_sent_live():
    h = Harness()
    h.define(retry=RETRY)
    h.target.answers = [DeliveryResult("failed", reason="http 500")]  # attempt 1 fails: attempt 2 gets a start task
    starts: list[Task] = []
    handle = h.engine.tasks.handle
    h.set_handler(lambda task: starts.append(task) if task.kind == TaskKind.START else handle(task))
    h.run_until(START + timedelta(minutes=1, seconds=15))
    [start] = starts
    retried = replace(start, retried=True)  # its first delivery failed before its commit: a retry
    other = build_engine(h.store, {"noop": h.target}, h.clock, Tuning(), secret=b"s")  # a second process
    stored_at_send: list[tuple[int, tuple[int, ...], int]] = []

    def duplicate_arrives(request) -> None:
        """The queue's duplicate runs on the other process while this attempt's request is out."""
        if request.attempt != 2 or stored_at_send:
            return
        other.tasks.handle(retried)
        entry = h.store.get_job("proj", "job").record.find_active(request.invocation_id)
        stored_at_send.append((request.attempt, entry.attempts, entry.started_mask))

    h.target.check = duplicate_arrives
    sent_at = h.clock.now()
    handle(retried)

    assert stored_at_send == [(2, (2,), 1)]  # the attempt being sent is still the stored, live one
    lease = h.store.get_job("proj", "job").record.live_policy.attempt_timeout + Tuning().start_grace
    later = start_task("proj", "job", act.EnqueueAttempt(start.payload["invocation"], 0, 2, sent_at + lease))
    assert later.name in h.queue.names()  # a start at the end of the lease, should the attempt still be out
    h.set_handler(handle)
    h.run_until(START + timedelta(minutes=1, seconds=59))
    [row] = h.invocations()
    assert row.status == "SUCCEEDED"
    assert [request.attempt for request in h.target.requests] == [1, 2]  # attempt 2 sent once, never again
