"""The embedded dispatcher on a real SQLite queue and the system clock.

These tasks are of a kind the dispatcher runs through the engine's handler (not the
batched pipeline of tick and start tasks, tested in test_pipeline.py), so a stand-in
task runner with only a handler can watch them."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from datetime import datetime, timedelta
from types import SimpleNamespace

from engine.adapters.local.dispatcher import Dispatcher, Wakeup
from engine.adapters.local.early_ticks import released_at
from engine.adapters.local.sqlite_queue import SqliteTaskQueue
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.adapters.local.tuning import DEFAULT_LOCAL_TUNING
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

    def start_sending(self) -> None:  # (the pipeline's start and stop: no request to hold back here)
        pass

    stop_sending = start_sending


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
    assert DEFAULT_LOCAL_TUNING.leased_per_worker >= 2  # so that the test above did lease more than it ran


class CountingQueue(SqliteTaskQueue):
    """The real queue, counting the leases taken and the change counter's reads."""

    def __init__(self, store: SqliteJobStore):
        super().__init__(store)
        self.leases = self.versions = 0

    def lease_due(self, *args, **kwargs):
        self.leases += 1
        return super().lease_due(*args, **kwargs)

    def version(self) -> int:
        self.versions += 1
        return super().version()


def _watched(tmp_path, handle) -> tuple[CountingQueue, SqliteTaskQueue, Dispatcher]:
    """A dispatcher that skips unchanged looks (as app/bootstrap.py builds it), and the
    same database's queue as another process sees it (its enqueues ring no wakeup here)."""
    wakeup = Wakeup()
    queue = CountingQueue(SqliteJobStore(tmp_path / "q.db", on_enqueue=wakeup.task_enqueued))
    other = SqliteTaskQueue(SqliteJobStore(tmp_path / "q.db"))
    dispatcher = _dispatcher(queue, wakeup, handle, workers=2, max_sleep=timedelta(milliseconds=100),
                             version=queue.version)
    return queue, other, dispatcher


def _wait(condition, timeout: float = 20) -> bool:
    deadline = time.time() + timeout
    while not condition() and time.time() < deadline:
        time.sleep(0.02)
    return condition()


@contextmanager
def _running(dispatcher: Dispatcher):
    dispatcher.start()
    try:
        yield dispatcher
    finally:
        dispatcher.stop()


def test_an_idle_dispatcher_leases_nothing_while_nothing_changes(tmp_path):
    queue, _, dispatcher = _watched(tmp_path, lambda task: None)
    _enqueue(queue, ["tomorrow"], datetime.now(UTC) + timedelta(days=1))
    with _running(dispatcher):
        assert _wait(lambda: queue.versions >= 6)  # five looks skipped after the first
        assert queue.leases == 1


def test_a_task_another_process_commits_is_still_run(tmp_path):
    ran = threading.Event()
    queue, other, dispatcher = _watched(tmp_path, lambda task: ran.set())
    _enqueue(queue, ["tomorrow"], datetime.now(UTC) + timedelta(days=1))
    with _running(dispatcher):
        assert _wait(lambda: queue.versions >= 3)  # idle: skipping looks
        _enqueue(other, ["now"], datetime.now(UTC))
        assert ran.wait(20)


def test_a_task_that_comes_due_is_run_though_nothing_changed(tmp_path):
    ran = threading.Event()
    queue, _, dispatcher = _watched(tmp_path, lambda task: ran.set())
    _enqueue(queue, ["soon"], datetime.now(UTC) + timedelta(milliseconds=500))
    with _running(dispatcher):
        assert ran.wait(20)


def test_staging_ticks_due_within_one_early_grain_go_to_be_run_together_at_its_start():
    grain = DEFAULT_LOCAL_TUNING.early_grain
    start = datetime(2026, 1, 5, 10, 0, 0, 100_000, tzinfo=UTC)  # on a grain's start
    occurrence = start + timedelta(seconds=1)

    def tick(eta: datetime, at_ms: int | None) -> Task:
        payload = {"project": "p", "job": "j", "nonce": "1.1"} | ({} if at_ms is None else {"at_ms": at_ms})
        return Task("tick/p/j/1.1/x", "tick", payload, eta)

    at_ms = int(occurrence.timestamp() * 1000)
    # Staging ticks queued anywhere in the grain are run at its start (then a step takes
    # a tenth of a second of a spread load's ticks at once) ...
    for offset in (0, 3, 57, 99):
        assert released_at(tick(start + timedelta(milliseconds=offset), at_ms), grain) == start
    # ... an ordinary tick at its time, and so is one handed back to wait for its occurrence.
    assert released_at(tick(start + timedelta(milliseconds=57), None), grain) == start + timedelta(milliseconds=57)
    late = occurrence - grain / 2
    assert released_at(tick(late, at_ms), grain) == late
