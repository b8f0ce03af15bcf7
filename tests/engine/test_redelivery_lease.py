"""A task the queue runs again while the attempt its first run began is still being sent.

On Cloud Run a request ends at the platform's timeout while its handler goes on sending
the attempt; Cloud Tasks then runs the task again, with a retry count above 0. That
retry proves nothing while the attempt's lease runs (its `attempt_timeout` plus the start
grace): the attempt is left in flight and sent again only once the lease is over, so the
target never gets two overlapping deliveries of one attempt. Here the retry comes in
the middle of the first delivery (the target's check runs before it answers), on the
in-memory store and queue with a fake clock.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import timedelta

from engine.ports import RetryTask, TaskKind
from statemachine.vocabulary import InvocationStatus
from tests.engine.harness import START, Harness

LEASE = timedelta(seconds=120)  # attempt_timeout 60 s + start grace 60 s, the defaults


class RetriedMidDelivery:
    """Runs the engine's tasks; during the first delivery of `kind`'s task, runs that task
    again as the queue's retry (Task.retried) and keeps what the retry did."""

    def __init__(self, h: Harness, kind: TaskKind):
        self.h, self.kind = h, kind
        self.running = None
        self.retried: list[object] = []
        h.set_handler(self.handle)
        h.target.check = self.during_delivery

    def handle(self, task) -> None:
        self.running = task
        self.h.engine.tasks.handle(task)

    def during_delivery(self, request) -> None:
        task = self.running
        if self.retried or task is None or task.kind != self.kind:
            return
        try:
            self.h.engine.tasks.handle(replace(task, retried=True))
            self.retried.append("done")
        except RetryTask as retry:  # handed back to the queue, to come again after this
            self.retried.append(retry.delay)


def _each_sent_once(h: Harness) -> None:
    """Every invocation ended SUCCEEDED on its first attempt, and the target got each once."""
    rows = h.invocations()
    assert rows and {(row.status, row.attempt) for row in rows} == {(InvocationStatus.SUCCEEDED, 1)}
    sent = Counter(h.target.invocations())
    assert set(sent) == {row.id for row in rows} and set(sent.values()) == {1}, sent


def test_a_tick_retried_while_its_inline_attempt_is_being_sent_does_not_send_it_twice(tmp_path):
    h = Harness(tmp_path)
    retry = RetriedMidDelivery(h, TaskKind.TICK)
    h.define("job", schedule_text="every 1m")
    h.run_until(START + timedelta(minutes=1, seconds=30))
    assert retry.retried == ["done"]  # the retry was answered (2xx): the start waits in the queue
    h.run_until(START + timedelta(minutes=1) + LEASE + timedelta(minutes=1))  # past the lease's end
    _each_sent_once(h)  # the start enqueued at the lease's end found its attempt answered


def test_a_start_task_retried_while_its_attempt_is_being_sent_leaves_a_start_at_the_leases_end(tmp_path):
    h = Harness(tmp_path)
    retry = RetriedMidDelivery(h, TaskKind.START)
    h.define("job", schedule_text="every 1m", throttle="slow")  # a throttled job's attempts go by start task
    h.run_until(START + timedelta(minutes=1, seconds=30))
    assert retry.retried == ["done"]  # answered (2xx), nothing settled: a start waits for the lease's end
    h.run_until(START + timedelta(minutes=1) + LEASE + timedelta(minutes=1))
    _each_sent_once(h)
