"""A process acts on a lease only while it holds it, as its monotonic clock counts
(engine/leases.py; issue 21): the real SQLite store, queue, registry and dispatcher,
with a fake clock whose monotonic reading the test moves apart from its wall time."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from engine.adapters.local.dispatcher import Dispatcher, Wakeup
from engine.adapters.local.liveness import ProcessRegistry, SqliteAttemptHolds, this_process
from engine.adapters.local.sqlite_queue import SqliteTaskQueue
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.metrics import Metrics
from engine.ports import Task
from engine.service import build_engine
from statemachine.policy import Tuning
from statemachine.vocabulary import TaskKind
from tests.engine.harness import START, FakeClock, Harness

TIMEOUT = timedelta(seconds=20)  # the heartbeat timeout: held until a beat + 19 s (1 s margin)
# An attempt's lease: attempt timeout 60 s + start grace 60 s, held until its commit + 119 s.


class MonoClock(FakeClock):
    """A fake clock with a monotonic reading of its own; `advance` moves both."""

    def __init__(self, now: datetime = START):
        super().__init__(now)
        self.mono = 1000.0

    def monotonic(self) -> float:
        return self.mono

    def advance(self, **delta) -> datetime:
        self.mono += timedelta(**delta).total_seconds()
        return super().advance(**delta)


class Process:
    def __init__(self, h: Harness):
        self.registry = ProcessRegistry(h.store.inner, this_process(), h.clock, TIMEOUT, monotonic=h.clock.monotonic)
        self.engine = build_engine(h.store, {"noop": h.target}, h.clock, Tuning(), secret=b"s",
                                   holds=SqliteAttemptHolds(h.store.inner, self.registry), monotonic=h.clock.monotonic)

    def lost(self, **labels) -> float:
        return self.engine.metrics.counter("sundial_leases_lost_total", **labels)


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path, sqlite=True)  # the process registry and attempt holds are SQLite's
    harness.clock = MonoClock()
    harness.define()  # every minute
    return harness


def _committed(h: Harness, process: Process, minute: int = 1):
    """Commit the occurrence's attempt as starting; returns (stepped, job, action)."""
    h.clock.current = START + timedelta(minutes=minute)
    process.registry.heartbeat()
    leased = h.queue.lease_due(h.clock.now(), 100, timedelta(seconds=30))
    [stepped] = [s for s in process.engine.tasks.step_many([item.task for item in leased]) if s.deliveries]
    [(job, action)] = stepped.deliveries
    return stepped, job, action


def test_an_attempt_is_sent_only_within_its_lease_on_the_monotonic_clock(h):
    process = Process(h)
    stepped, job, action = _committed(h, process)
    for _ in range(59):  # the process is alive all along, heartbeating: only the attempt's lease is in question
        h.clock.advance(seconds=2)
        process.registry.heartbeat()
    assert process.engine.tasks.send_held(job, action, stepped) is not None
    assert h.target.invocations() == [action.invocation_id]
    h.clock.advance(seconds=1.5)
    process.registry.heartbeat()
    assert process.engine.tasks.send_held(job, action, stepped) is None  # given up: another may have it now
    assert h.target.invocations() == [action.invocation_id]
    assert process.lost(step="send", lease="attempt") == 1


def test_a_wall_clock_jump_does_not_stretch_a_lease(h):
    process = Process(h)
    stepped, job, action = _committed(h, process)
    h.clock.mono += 130  # past the lease on the monotonic clock ...
    h.clock.current = START  # ... while the wall clock was set back
    process.registry.heartbeat()
    assert process.engine.tasks.send_held(job, action, stepped) is None
    assert h.target.requests == []
    assert process.lost(step="send", lease="attempt") == 1


def test_a_process_past_its_heartbeat_timeout_sends_nothing_it_held(h):
    process = Process(h)
    stepped, job, action = _committed(h, process)
    h.clock.advance(seconds=18)
    assert process.engine.tasks.send_held(job, action, stepped) is not None
    h.clock.advance(seconds=1.5)  # 19.5 s since its last heartbeat: the others may take it for gone
    assert process.engine.tasks.send_held(job, action, stepped) is None
    assert process.lost(step="send", lease="process") == 1


def test_what_a_process_held_before_it_was_taken_for_gone_stays_lost_after_it_registers_again(h):
    process = Process(h)
    stepped, job, action = _committed(h, process)
    h.clock.advance(seconds=25)
    other = Process(h)
    other.registry.heartbeat()
    assert other.engine.interruptions.settle() == 1  # it settles the silent process's attempt
    h.store.inner.connection().execute("DELETE FROM processes WHERE id = ?", (process.registry.me.id,))
    process.registry.heartbeat()  # it wakes, finds itself gone and registers again: a fresh heartbeat
    assert process.engine.tasks.send_held(job, action, stepped) is None
    assert h.target.requests == []
    # What it commits from now on is its own again.
    h.clock.advance(seconds=5)
    later, job, action = _committed(h, process, minute=2)
    assert process.engine.tasks.send_held(job, action, later) is not None


class StallingClock:
    """The wall clock, and a monotonic one that a stall moves ahead."""

    def __init__(self):
        self.stalled = 0.0

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def monotonic(self) -> float:
        return time.monotonic() + self.stalled


class Handler:
    def __init__(self, clock: StallingClock, stall: float):
        self.clock, self.stall, self.ran = clock, stall, threading.Event()
        self.changes = type("Changes", (), {"tuning": Tuning()})()

    def handle(self, task: Task) -> None:
        self.clock.stalled += self.stall  # the process stalls inside the handler
        self.ran.set()

    def start_sending(self) -> None:  # (the pipeline's start and stop: no request to hold back here)
        pass

    stop_sending = start_sending


@pytest.mark.parametrize("stall, left", [(0.0, 0), (60.0, 1)])
def test_a_task_whose_lease_ran_out_in_its_handler_is_neither_deleted_nor_handed_back(tmp_path, stall, left):
    clock, metrics = StallingClock(), Metrics()
    queue = SqliteTaskQueue(SqliteJobStore(tmp_path / "q.db"))
    task = Task("notify-1", TaskKind.NOTIFY, {}, clock.now())
    queue.store.run_in_transaction(lambda tx: tx.enqueue(task))
    handler = Handler(clock, stall)
    dispatcher = Dispatcher(queue, handler, clock, Wakeup(), workers=2, lease=timedelta(seconds=30),
                            max_sleep=timedelta(milliseconds=50), metrics=metrics, monotonic=clock.monotonic)
    dispatcher.start()
    try:
        assert handler.ran.wait(5)
        time.sleep(0.3)  # its settling, and the next lease that deletes what is done
    finally:
        dispatcher.stop()
    rows = queue.store.connection().execute("SELECT lease_until FROM tasks").fetchall()
    assert len(rows) == left
    if left:  # still under the lease it ran under: whoever leased it since keeps it, or it comes again
        assert rows[0][0] > clock.now().timestamp()
    assert metrics.counter("sundial_leases_lost_total", step="task", lease="task") == left


@pytest.mark.parametrize("stall, sent", [(0, 1), (600, 0)])
def test_a_cloud_task_handler_that_runs_past_its_dispatch_deadline_sends_nothing(h, stall, sent):
    # As on Cloud Tasks: no holds; the request's lease is its dispatch deadline (10 minutes).
    engine = build_engine(h.store, {"noop": h.target}, h.clock, Tuning(), secret=b"s",
                          task_lease=timedelta(minutes=10), monotonic=h.clock.monotonic)
    commit = engine.changes.apply_many

    def stalling_commit(changes):  # the handler stalls right after its step commits
        applied = commit(changes)
        h.clock.mono += stall
        return applied

    engine.changes.apply_many = stalling_commit
    h.clock.current = START + timedelta(minutes=1)
    for item in h.queue.lease_due(h.clock.now(), 100, timedelta(seconds=30)):
        engine.tasks.handle(item.task)
    assert len(h.target.requests) == sent
    assert engine.metrics.counter("sundial_leases_lost_total", step="send", lease="task") == 1 - sent


def test_a_lease_taken_since_by_another_dispatcher_is_neither_renewed_nor_handed_back_by_the_first(tmp_path):
    queue = SqliteTaskQueue(SqliteJobStore(tmp_path / "q.db"))
    now = datetime.now(timezone.utc)
    queue.store.run_in_transaction(lambda tx: tx.enqueue(Task("t", TaskKind.NOTIFY, {}, now)))
    [first] = queue.lease_due(now, 10, timedelta(seconds=3))
    later = now + timedelta(seconds=4)  # the first one's lease ran out: another dispatcher takes the task
    [second] = queue.lease_due(later, 10, timedelta(seconds=30))
    assert (first.id, first.attempts, second.attempts) == (second.id, 1, 2)

    def lease_until() -> float:
        return queue.store.connection().execute("SELECT lease_until FROM tasks").fetchone()[0]

    held = lease_until()
    assert queue.renew([first], later + timedelta(seconds=60)) == []  # the woken first one
    queue.retry(first.id, later, first.attempts)
    assert lease_until() == held  # still the second's
    assert queue.renew([second], later + timedelta(seconds=60)) == [second.id]
    assert lease_until() == (later + timedelta(seconds=60)).timestamp()
