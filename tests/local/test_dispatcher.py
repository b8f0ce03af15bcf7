"""The embedded dispatcher on a real SQLite queue and the system clock.

These tasks are of a kind the dispatcher runs through the engine's handler (not the
batched pipeline of tick and start tasks, tested in test_pipeline.py), so a stand-in
task runner with only a handler can watch them."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from types import SimpleNamespace

from engine.adapters.local.dispatcher import LEASE_AHEAD, Dispatcher, Wakeup
from engine.adapters.local.sqlite_queue import SqliteTaskQueue
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.ports import Task
from statemachine.durations import UTC
from statemachine.policy import Tuning


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class HandlerOnly:
    """What the dispatcher needs of a task runner for tasks other than tick and start."""

    def __init__(self, handle):
        self.handle = handle
        self.changes = SimpleNamespace(tuning=Tuning())  # the pipeline reads its start grace


def _queue(tmp_path) -> tuple[SqliteTaskQueue, Wakeup]:
    """A queue, and the wakeup its store rings when a task is enqueued (as in app/bootstrap.py)."""
    wakeup = Wakeup()
    return SqliteTaskQueue(SqliteJobStore(tmp_path / "q.db", on_enqueue=wakeup.task_enqueued)), wakeup


def _dispatcher(queue: SqliteTaskQueue, wakeup: Wakeup, handle, **options) -> Dispatcher:
    return Dispatcher(queue, HandlerOnly(handle), SystemClock(), wakeup, **options)


def _enqueue(queue: SqliteTaskQueue, names, eta: datetime) -> None:
    with queue.store.transaction() as tx:
        for name in names:
            tx.enqueue(Task(name, "trigger", {"project": "p", "job": name}, eta))


def _leases(queue: SqliteTaskQueue) -> dict[str, float]:
    rows = queue.store.connection().execute("SELECT name, lease_until FROM tasks").fetchall()
    return dict(rows)


def test_every_due_task_runs_once_and_is_deleted(tmp_path):
    queue, wakeup = _queue(tmp_path)
    names = [f"t{i:03d}" for i in range(300)]
    _enqueue(queue, names, datetime.now(UTC))
    ran, lock = [], threading.Lock()

    def handle(task):
        with lock:
            ran.append(task.name)

    dispatcher = _dispatcher(queue, wakeup, handle, workers=4)
    dispatcher.start()
    try:
        deadline = time.time() + 20
        while (len(ran) < 300 or queue.pending()) and time.time() < deadline:
            time.sleep(0.05)
    finally:
        dispatcher.stop()
    assert sorted(ran) == names
    assert queue.pending() == 0


def test_a_task_enqueued_here_for_now_wakes_a_sleeping_dispatcher(tmp_path):
    queue, wakeup = _queue(tmp_path)
    ran = threading.Event()
    dispatcher = _dispatcher(queue, wakeup, lambda task: ran.set(), workers=2, max_sleep=timedelta(seconds=10))
    dispatcher.start()
    try:
        _enqueue(queue, ["later"], datetime.now(UTC) + timedelta(hours=1))
        time.sleep(0.3)  # asleep now, until the hour or max_sleep
        started = time.monotonic()
        _enqueue(queue, ["now"], datetime.now(UTC))
        assert ran.wait(5)
        assert time.monotonic() - started < 1
    finally:
        dispatcher.stop()


def test_stop_hands_back_the_tasks_no_worker_started(tmp_path):
    queue, wakeup = _queue(tmp_path)
    _enqueue(queue, [f"t{i}" for i in range(10)], datetime.now(UTC))
    running, release = threading.Event(), threading.Event()
    ran = []

    def handle(task):
        ran.append(task.name)
        running.set()
        release.wait(10)

    dispatcher = _dispatcher(queue, wakeup, handle, workers=1)
    dispatcher.start()
    assert running.wait(5)
    stopper = threading.Thread(target=dispatcher.stop)
    stopper.start()
    time.sleep(0.2)
    release.set()
    stopper.join(10)
    assert ran == ["t0"]  # the one in hand finished; the rest were never started
    leases = _leases(queue)
    assert "t0" not in leases  # done, so deleted
    assert len(leases) == 9
    assert all(until == 0 for until in leases.values())  # takeable at once by anyone
    assert LEASE_AHEAD >= 2  # so that the test above did lease more than it ran
