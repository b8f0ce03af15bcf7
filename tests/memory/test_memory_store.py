"""The in-memory store's own promises, beyond the contract suite: production's size
limits, rows that callers cannot change behind its back, and the order of a
transaction's enqueues and dequeues."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engine.adapters.memory import build_memory_backend
from engine.adapters.memory.tables import MAX_ENTITY_BYTES, MAX_PROPERTY_BYTES, RowTooLarge
from engine.ports import Task
from tests.contract import samples
from tests.contract.samples import T0


def test_a_row_over_datastores_limits_is_refused_and_nothing_of_its_transaction_is_written():
    store, queue = build_memory_backend()
    row = samples.invocation(T0)
    row.log = [{"message": "x" * MAX_PROPERTY_BYTES}]

    def body(tx):
        tx.put_job(samples.job())
        tx.put_invocation(row)
        tx.enqueue(Task("t", "tick", {}, T0))

    with pytest.raises(RowTooLarge) as refused:
        store.run_in_transaction(body)
    assert f"invocation {row.id} of job proj/job" in str(refused.value)
    assert store.get_job("proj", "job") is None and queue.names() == []
    # Under each property's limit, over the entity's together.
    job = samples.job()
    job.config_error = "e" * (MAX_ENTITY_BYTES - len(job.definition.canonical_json))
    with pytest.raises(RowTooLarge, match="job proj/job"):
        store.run_in_transaction(lambda tx: tx.put_job(job))


def test_rows_read_or_written_are_copies():
    store, _ = build_memory_backend()
    row = samples.invocation(T0)
    job = samples.job()

    def body(tx):
        tx.put_job(job)
        tx.put_invocation(row)
        tx.get_invocation("proj", "job", row.id).log.append({"message": "read in the transaction"})

    store.run_in_transaction(body)
    row.log.append({"message": "after the put"})
    job.config_error = "after the put"
    store.get_invocation("proj", "job", row.id).log.append({"message": "read outside"})
    assert store.get_invocation("proj", "job", row.id).log == samples.invocation(T0).log
    assert store.get_job("proj", "job").config_error == samples.job().config_error


def test_a_transactions_enqueues_and_dequeues_take_effect_in_their_order():
    store, queue = build_memory_backend()

    def body(tx):
        tx.enqueue(Task("gone", "tick", {}, T0))
        tx.dequeue("gone")
        tx.dequeue("back")
        tx.enqueue(Task("back", "tick", {}, T0))

    store.run_in_transaction(body)
    assert queue.names() == ["back"]
    assert store.counters == {"commits": 1, "writes": 0, "enqueues": 2}


def test_the_watchdog_pages_by_a_cursor_that_a_deferral_does_not_shift():
    store, _ = build_memory_backend()
    for n in range(5):
        job = samples.job(job_id=f"job-{n}", watchdog_at=T0 + timedelta(seconds=n))
        store.run_in_transaction(lambda tx, job=job: tx.put_job(job))
    now = T0 + timedelta(minutes=1)
    page, cursor = store.jobs_due_for_watchdog(now, 2)
    assert page == [("proj", "job-0"), ("proj", "job-1")] and cursor is not None
    assert store.defer_watchdog("proj", "job-0", now + timedelta(minutes=1))
    assert not store.defer_watchdog("proj", "job-1", T0)  # never earlier
    page, cursor = store.jobs_due_for_watchdog(now, 2, cursor)
    assert page == [("proj", "job-2"), ("proj", "job-3")]
    assert store.jobs_due_for_watchdog(now, 2, cursor) == ([("proj", "job-4")], None)


def test_reading_one_progress_part_copies_that_part_alone(monkeypatch):
    # A fan-out's event reads its own part: copying all of them made a 600-event
    # completion report quadratic (3 s instead of 0.4 s).
    from engine.adapters.memory import transaction

    store, _ = build_memory_backend()
    parts = {f"event/{i}": {"state": i} for i in range(50)}
    store.run_in_transaction(lambda tx: [tx.put_progress("proj", "job", "inv", p, v) for p, v in parts.items()])
    copied = []
    real = transaction.copy_value
    monkeypatch.setattr(transaction, "copy_value", lambda value: copied.append(value) or real(value))
    assert store.run_in_transaction(lambda tx: tx.get_progress("proj", "job", "inv", "event/7")) == {"state": 7}
    assert len(copied) == 1


def test_the_shared_secret_is_made_once_and_its_maker_not_called_again():
    store, _ = build_memory_backend()
    made = []

    def generate() -> str:
        made.append(1)
        return f"secret-{len(made)}"

    assert store.shared_secret(generate) == store.shared_secret(generate) == "secret-1"
    assert made == [1]
