"""Transactions, the same on every backend: reads see the transaction's writes,
enqueues leave with the commit and only with it, a body that runs again
leaves only its last run's writes and tasks, and concurrent read-modify-write
of one job loses no update."""

from __future__ import annotations

import threading

import pytest

from engine.ports import ProjectRow, Task
from engine.service import build_engine
from statemachine import events as ev
from statemachine.definition import JobDefinition
from statemachine.policy import JobPolicy, Overlap, Tuning
from tests.contract import samples
from tests.contract.backends import FixedClock
from tests.contract.samples import T0
from tests.support.cloud_stores import FIRESTORE_IN_LONG_RUNS


def task(name: str) -> Task:
    return Task(name, "tick", {"project": "proj", "job": "job", "nonce": name}, T0)


def test_a_transaction_reads_its_own_writes(store):
    def body(tx):
        tx.put_job(samples.job())
        row = samples.invocation(T0)
        tx.put_invocation(row)
        tx.put_project(ProjectRow("proj", "h"))
        seen = (tx.get_job("proj", "job"), tx.get_invocation("proj", "job", row.id), tx.get_project("proj"))
        tx.delete_project("proj")
        return seen + (tx.get_project("proj"),)

    job, row, project, deleted = store.run_in_transaction(body)
    assert job == samples.job() and row == samples.invocation(T0)
    assert project == ProjectRow("proj", "h") and deleted is None
    assert store.get_project("proj") is None


def test_tasks_reach_the_queue_only_when_the_transaction_commits(backend):
    seen_inside = []

    def body(tx):
        tx.enqueue(task("t-1"))
        seen_inside.append(backend.queued_names())
        tx.put_job(samples.job())
        seen_inside.append(backend.queued_names())
        return "done"

    assert backend.store.run_in_transaction(body) == "done"
    assert seen_inside == [[], []]
    assert backend.queued_names() == ["t-1"]


def test_a_body_that_raises_writes_nothing_and_enqueues_nothing(backend):
    class Refused(Exception):
        pass

    def body(tx):
        tx.put_job(samples.job())
        tx.enqueue(task("t-1"))
        raise Refused("no")

    with pytest.raises(Refused):
        backend.store.run_in_transaction(body)
    assert backend.store.get_job("proj", "job") is None
    assert backend.queued_names() == []


def test_a_body_run_again_leaves_only_its_last_runs_writes_and_tasks(backend):
    backend.store.run_in_transaction(lambda tx: tx.put_job(samples.job()))
    runs = []

    def body(tx):
        runs.append(len(runs) + 1)
        tx.get_job("proj", "job")  # read it, so that a write from elsewhere conflicts
        if len(runs) == 1:
            backend.interfere("proj", "job")
        tx.put_project(ProjectRow("proj", f"run-{len(runs)}"))
        tx.enqueue(task(f"from-run-{len(runs)}"))
        return len(runs)

    last = backend.store.run_in_transaction(body)
    assert runs == ([1, 2] if backend.reruns_on_conflict else [1]) and last == runs[-1]
    assert backend.store.get_project("proj").config_hash == f"run-{last}"
    assert backend.queued_names() == [f"from-run-{last}"]


def test_one_task_name_enqueued_twice_in_a_transaction_is_one_task(backend):
    def body(tx):
        tx.enqueue(task("same"))
        tx.enqueue(task("same"))

    backend.store.run_in_transaction(body)
    assert backend.queued_names() == ["same"]


# Firestore's lock waits make this about 18 s of the suite there; tests/contract/test_inbox.py
# holds 200 concurrent triggers of one job on Firestore in every run.
@pytest.mark.parametrize("backend", ["sqlite", "memory", "datastore", FIRESTORE_IN_LONG_RUNS], indirect=True)
def test_concurrent_triggers_of_one_job_lose_no_update(backend):
    """N threads step the same job through the real engine at once; each step is
    a read-modify-write of the job record. Every trigger must survive."""
    engine = build_engine(backend.store, {}, FixedClock(T0), Tuning(), secret=b"s")
    policy = JobPolicy(schedule_text="triggered", overlap=Overlap.ALLOW, max_concurrent=100, revision="r1")
    definition = JobDefinition(id="job", schedule="triggered", target={"noop": {}})
    engine.changes.apply("proj", "job", ev.JobEnabled(policy), definition=definition, source="api")
    count, errors = 8, []
    gate = threading.Barrier(count)

    def trigger(number: int) -> None:
        try:
            gate.wait()
            engine.changes.apply("proj", "job", ev.ManualTrigger(f"request-{number}"))
        except Exception as error:  # reported below: an exception in a thread is otherwise lost
            errors.append(error)

    threads = [threading.Thread(target=trigger, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    record = backend.store.get_job("proj", "job").record
    invocations, _ = backend.store.list_invocations("proj", "job", 100, None)
    assert len(invocations) == count
    assert sorted(e.invocation_id for e in record.active) == sorted(r.id for r in invocations)
    assert len(backend.queued_names()) == count  # one start task per invocation, nothing else
    if backend.reruns_on_conflict:
        assert backend.store.counters["retries"] > 0  # the race was real: bodies ran again
