"""Leasing ahead and shares of the chain queue (engine/adapters/local/sqlite_queue.py,
dispatcher.py, liveness.py): a look leases the tasks due in the next few tens of ms
together and the dispatcher holds them until their time; with several processes on a
database each takes its own share first, and another's once it is overdue."""

from __future__ import annotations

import math
import threading
import time
from datetime import datetime, timedelta

from engine.adapters.local.dispatcher import Dispatcher, Wakeup
from engine.adapters.local.liveness import ProcessIdentity, ProcessRegistry, this_process
from engine.adapters.local.sqlite_queue import Share, SqliteTaskQueue, share_of
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.adapters.local.tuning import DEFAULT_LOCAL_TUNING
from engine.ports import Task
from statemachine.durations import UTC
from tests.engine.harness import START, FakeClock
from tests.local.test_dispatcher import HandlerOnly, SystemClock

LEASE = timedelta(seconds=30)


def _queue(tmp_path) -> SqliteTaskQueue:
    return SqliteTaskQueue(SqliteJobStore(tmp_path / "q.db"))


def _enqueue(queue: SqliteTaskQueue, jobs: list[str], eta: datetime, kind: str = "tick", task_queue: str = "") -> None:
    def body(tx):
        for job in jobs:
            tx.enqueue(Task(f"{kind}/p/{job}/n/{int(eta.timestamp() * 1000)}", kind, {"project": "p", "job": job},
                            eta, task_queue))
    queue.store.run_in_transaction(body)


def _names(leased) -> list[str]:
    return sorted(item.task.payload["job"] for item in leased)


def _split(count: int = 20) -> tuple[list[str], list[str]]:
    jobs = [f"j{i}" for i in range(count)]
    zero = [job for job in jobs if share_of(f"tick/p/{job}/n/0", 2) == 0]
    return zero, [job for job in jobs if job not in zero]


def test_the_share_of_a_task_is_its_jobs_whatever_the_task():
    assert share_of("tick/p/j/1/2", 7) == share_of("start/p/j/inv/0/1/5", 7)
    zero, one = _split()
    assert zero and one  # both shares get jobs


def test_a_lease_takes_its_own_share_and_others_once_overdue(tmp_path):
    queue, (zero, one) = _queue(tmp_path), _split()
    _enqueue(queue, zero + one, START)
    share = Share(0, 2, takeover=timedelta(milliseconds=200))
    assert _names(queue.lease_due(START, 100, LEASE, share=share)) == sorted(zero)
    # The other share's tasks wake this process only once they may be taken over ...
    assert queue.next_wake(START, share) == START + timedelta(milliseconds=200)
    assert queue.lease_due(START + timedelta(milliseconds=199), 100, LEASE, share=share) == []
    # ... and are taken then (their process died, or lags).
    assert _names(queue.lease_due(START + timedelta(milliseconds=200), 100, LEASE, share=share)) == sorted(one)


def test_next_wake_of_a_share_is_its_own_earliest_task(tmp_path):
    queue, (zero, one) = _queue(tmp_path), _split()
    _enqueue(queue, one[:1], START + timedelta(milliseconds=10))
    _enqueue(queue, zero[:1], START + timedelta(milliseconds=50))
    assert queue.next_wake(START, Share(0, 2)) == START + timedelta(milliseconds=50)
    assert queue.next_wake(START, Share(1, 2)) == START + timedelta(milliseconds=10)
    assert queue.next_wake(START) == START + timedelta(milliseconds=10)


def test_a_lease_takes_chain_tasks_due_soon_but_no_throttled_ones(tmp_path):
    queue = _queue(tmp_path)
    _enqueue(queue, ["soon"], START + timedelta(milliseconds=40))
    _enqueue(queue, ["later"], START + timedelta(milliseconds=60))
    _enqueue(queue, ["throttled"], START + timedelta(milliseconds=10), "start", "p/t")
    assert _names(queue.lease_due(START, 100, LEASE, ahead=timedelta(milliseconds=50))) == ["soon"]
    assert queue.lease_due(START, 100, LEASE) == []  # (without `ahead`: only what is due)


def test_each_process_gets_a_share_of_its_own(tmp_path):
    store, clock = SqliteJobStore(tmp_path / "s.db"), FakeClock()
    me = this_process()
    other = ProcessIdentity(me.machine, me.pid, me.started, "other")  # running, as far as the kernel knows
    mine, theirs = ProcessRegistry(store, me, clock, LEASE), ProcessRegistry(store, other, clock, LEASE)
    assert mine.share() is None  # before its first heartbeat: the whole queue
    mine.heartbeat()
    assert mine.share() == Share(0, 1)
    theirs.heartbeat()
    mine.heartbeat()
    assert {mine.share(), theirs.share()} == {Share(0, 2), Share(1, 2)}
    theirs.deregister()
    mine.heartbeat()
    assert mine.share() == Share(0, 1)


def test_tasks_leased_ahead_run_at_their_time_not_before(tmp_path):
    wakeup = Wakeup()
    queue = SqliteTaskQueue(SqliteJobStore(tmp_path / "q.db", on_enqueue=wakeup.task_enqueued))
    first = datetime.now(UTC) + timedelta(milliseconds=300)
    etas = {f"t{i}": first + timedelta(milliseconds=3 * i) for i in range(30)}  # within two windows
    queue.store.run_in_transaction(lambda tx: [tx.enqueue(Task(name, "trigger", {"job": name}, eta))
                                               for name, eta in etas.items()])
    ran: dict[str, datetime] = {}
    lock, leases = threading.Lock(), []
    lease_due = queue.lease_due

    def counted(*args, **kwargs):
        leased = lease_due(*args, **kwargs)
        if leased:
            leases.append(len(leased))
        return leased

    queue.lease_due = counted  # type: ignore[method-assign]

    def handle(task):
        with lock:
            ran[task.name] = datetime.now(UTC)

    dispatcher = Dispatcher(queue, HandlerOnly(handle), SystemClock(), wakeup, workers=4)
    dispatcher.start()
    try:
        deadline = time.time() + 20
        while len(ran) < len(etas) and time.time() < deadline:
            time.sleep(0.02)
    finally:
        dispatcher.stop()
    assert set(ran) == set(etas)
    assert [name for name, at in ran.items() if at < etas[name]] == []
    # 30 tasks over 90 ms: a few looks leased them, not one per task (a look takes at
    # most 16, the 4 workers' room, and a look that took them all rings for the next).
    half_window_ms = DEFAULT_LOCAL_TUNING.lease_lookahead.total_seconds() * 1000 / 2
    assert len(leases) <= 90 / half_window_ms + math.ceil(30 / 16) + 2, leases


def test_a_task_this_process_enqueues_for_now_is_run_whatever_its_share(tmp_path):
    # (an API "run now" of a job in another process's share must not wait for the takeover)
    wakeup = Wakeup()
    queue = SqliteTaskQueue(SqliteJobStore(tmp_path / "q.db", on_enqueue=wakeup.task_enqueued))
    zero, _ = _split()
    ran = threading.Event()
    never = Share(1, 2, takeover=timedelta(days=1))  # the others' tasks are never taken over here
    dispatcher = Dispatcher(queue, HandlerOnly(lambda task: ran.set()), SystemClock(), wakeup, workers=2,
                            share=lambda: never)
    dispatcher.start()
    try:
        time.sleep(0.1)  # asleep until its next planned look
        _enqueue(queue, zero[:1], datetime.now(UTC), kind="trigger")
        assert ran.wait(20)
    finally:
        dispatcher.stop()
