"""An invocation's deadline is kept by the chain itself on every backend: the step that
leaves it waiting enqueues its timer (a `deadline` task, due at the deadline), and
that task ends it. No watchdog runs in these tests; the clock is fake, the store and
the queue (SQLite's, or the Datastore store with the stand-in for Cloud Tasks) are real."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engine import operations
from engine.ports import DeliveryResult
from statemachine.policy import FanoutPolicy
from tests.engine.harness import START, Harness

DUE = START + timedelta(minutes=1)  # the every-minute job's first occurrence
TWO_SECONDS = timedelta(seconds=2)


@pytest.fixture
def h(backend, tmp_path):
    harness = Harness(tmp_path, backend=backend)
    harness.target.respond = lambda request: DeliveryResult("accepted")  # and never a completion
    return harness


def _deadline_tasks(backend) -> list[str]:
    return [name for name in backend.queued_names() if name.startswith("deadline/proj/job/")]


def test_an_accepted_invocation_ends_failed_timeout_at_its_deadline_by_its_own_task(h, backend):
    h.define(timeout=TWO_SECONDS, attempt_timeout=TWO_SECONDS)
    h.run_until(DUE + timedelta(seconds=1))
    assert len(h.target.requests) == 1
    assert len(_deadline_tasks(backend)) == 1, backend.queued_names()  # enqueued by the step that heard the 202
    h.run_until(DUE + timedelta(seconds=2))
    [row] = h.invocations()
    assert (row.status, row.reason, row.finished_time) == ("FAILED", "timeout", DUE + TWO_SECONDS)
    assert _deadline_tasks(backend) == []


def test_a_completion_before_the_deadline_leaves_its_timer_nothing_to_do(h, backend):
    h.define(timeout=TWO_SECONDS, attempt_timeout=TWO_SECONDS)
    h.run_until(DUE + timedelta(seconds=1))
    [request] = h.target.requests
    token = h.engine.deliveries.completion_token(request.invocation_id)
    operations.complete(h.engine, "proj", "job", request.invocation_id, token, True, "done")
    h.run_until(DUE + timedelta(seconds=3))
    [row] = h.invocations()
    assert (row.status, row.finished_time) == ("SUCCEEDED", DUE + timedelta(seconds=1))
    assert _deadline_tasks(backend) == []


def test_a_fanouts_events_start_on_time_and_its_deadline_holds_for_them(h, backend):
    started = []
    h.target.check = lambda request: started.append((request.event_index, h.clock.now()))
    h.define(timeout=TWO_SECONDS, fanout=FanoutPolicy(count=4, spread=timedelta(seconds=4)))
    h.run_until(DUE + timedelta(seconds=5))
    assert sorted(started) == [(i, DUE + timedelta(seconds=i)) for i in range(4)]
    [row] = h.invocations()
    assert row.status == "RUNNING"
    h.run_until(DUE + timedelta(seconds=6))  # the spread, then the timeout
    [row] = h.invocations()
    assert (row.status, row.reason, row.finished_time) == ("FAILED", "timeout", DUE + timedelta(seconds=6))
