"""The in-memory task queue's own semantics, beyond what the contract suite drives
through the engine: Cloud Tasks' named dedup, ETAs, at-least-once leases with their
fencing count, throttles, and the retry mark."""

from __future__ import annotations

from datetime import timedelta

from engine.adapters.memory import MemoryTaskQueue, build_memory_backend
from engine.ports import ProjectRow, Task
from tests.contract.samples import T0

LEASE = timedelta(seconds=30)


def task(name: str, eta=T0, queue: str = "") -> Task:
    return Task(name, "tick", {"n": name}, eta, queue)


def test_a_name_in_the_queue_is_queued_once_and_free_again_once_done():
    queue = MemoryTaskQueue()
    assert queue.add(task("a")) and not queue.add(task("a", T0 + LEASE))
    [leased] = queue.lease_due(T0, 10, LEASE)
    assert not queue.add(task("a"))  # leased is still in the queue
    queue.complete([leased.id])
    assert queue.add(task("a")) and queue.pending() == 1


def test_tasks_come_in_eta_order_and_not_before_their_time():
    queue = MemoryTaskQueue()
    for name, seconds in (("late", 20), ("early", 10), ("now", 0)):
        queue.add(task(name, T0 + timedelta(seconds=seconds)))
    assert [item.task.name for item in queue.lease_due(T0, 10, LEASE)] == ["now"]
    assert queue.next_wake(T0) == T0 + timedelta(seconds=10)
    leased = queue.lease_due(T0 + timedelta(seconds=25), 10, LEASE)
    assert [item.task.name for item in leased] == ["early", "late"]


def test_a_lease_that_runs_out_delivers_the_task_again_and_fences_the_first_holder():
    queue = MemoryTaskQueue(marks_retries=True)
    queue.add(task("a"))
    [first] = queue.lease_due(T0, 10, LEASE)
    assert queue.lease_due(T0 + LEASE / 2, 10, LEASE) == []
    assert queue.next_wake(T0) == T0 + LEASE
    [second] = queue.lease_due(T0 + LEASE, 10, LEASE)
    assert (first.id, first.attempts, second.attempts) == (second.id, 1, 2)
    assert not first.task.retried and second.task.retried
    # The first holder's lease was taken since: it can neither renew nor hand it back.
    assert queue.renew([first], T0 + 2 * LEASE) == []
    queue.retry(first.id, T0, first.attempts)
    assert queue.lease_due(T0 + LEASE, 10, LEASE) == []
    assert queue.renew([second], T0 + 3 * LEASE) == [second.id]
    queue.retry(second.id, T0 + 4 * LEASE, second.attempts)
    assert queue.next_wake(T0 + LEASE) == T0 + 4 * LEASE


def test_a_leased_task_is_not_taken_off_by_a_dequeue():
    queue = MemoryTaskQueue()
    queue.add(task("leased"))
    queue.add(task("waiting", T0 + LEASE))
    queue.lease_due(T0, 10, LEASE)
    assert not queue.remove("leased") and queue.remove("waiting")
    assert queue.names() == ["leased"]


def test_a_throttle_queue_never_has_more_leases_than_its_limit_as_last_imported():
    store, queue = build_memory_backend()
    store.run_in_transaction(lambda tx: tx.put_project(ProjectRow("p", settings={"throttles": {"t": 2}})))
    for index in range(4):
        queue.add(task(f"throttled-{index}", queue="p/t"))
    queue.add(task("other", queue="p/gone"))  # a throttle no longer defined runs unthrottled
    first = queue.lease_due(T0, 10, LEASE)
    assert sorted(item.task.name for item in first) == ["other", "throttled-0", "throttled-1"]
    assert queue.lease_due(T0, 10, LEASE, done=[first[0].id]) != []  # one slot freed
    store.run_in_transaction(lambda tx: tx.put_project(ProjectRow("p", settings={"throttles": {"t": 4}})))
    assert len(queue.lease_due(T0, 10, LEASE)) == 1
