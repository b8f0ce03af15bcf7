"""A job's inbox (engine/inbox.py), the same on every backend: triggers are appended
as rows of their own and folded into the job's record once each.

The bursts are the ones that collapsed on Firestore's lock-based transactions when
every trigger wrote the job's record (50 at once: 49 failed after 90 s): 200 API
triggers of one job at once, and 50 upstream jobs triggering one downstream job at
the same instant. Every request must be answered within 5 s, and every trigger
delivered exactly once.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta

import pytest

from engine import operations
from engine.inbox import FOLD_ROWS, Pending, inbox_task
from engine.ports import DeliveryResult, ProjectRow
from engine.recording import trigger_task
from engine.service import build_engine
from statemachine import events as ev
from statemachine.definition import JobDefinition
from statemachine.policy import JobPolicy, Overlap, Tuning
from statemachine.vocabulary import TaskKind, Trigger
from tests.contract.backends import FixedClock
from tests.contract.samples import T0

# Seconds, each request, counted from the instant all are released together. The 200
# come from threads of this one process (each trigger about 6 round trips to the store),
# so on a loaded machine most of it is this process's own CPU, not the store's locks.
ANSWER_WITHIN = 5.0


class CountingTarget:
    """The target the bursts deliver to: counts each invocation's deliveries."""

    def __init__(self) -> None:
        self.delivered: Counter[str] = Counter()
        self.lock = threading.Lock()

    def deliver(self, request) -> DeliveryResult:
        with self.lock:
            self.delivered[request.invocation_id] += 1
        return DeliveryResult("succeeded", detail="ok")


def _engine(backend, target=None):
    engine = build_engine(backend.store, {"noop": target or CountingTarget()}, FixedClock(T0), Tuning(),
                          secret=b"s")
    engine.changes.write(lambda tx: tx.put_project(ProjectRow("proj", "h")))
    return engine


def _enable(engine, job_id: str, triggers: tuple[str, ...] = ()) -> None:
    policy = JobPolicy(schedule_text="triggered", overlap=Overlap.ALLOW, max_concurrent=1000, revision="r1")
    definition = JobDefinition(id=job_id, schedule="triggered", target={"noop": {}}, triggers=triggers)
    engine.changes.apply("proj", job_id, ev.JobEnabled(policy), definition=definition, source="api")


def _drain(backend, engine) -> None:
    """Run every task, inbox folds and starts included, until the queue is empty."""
    for _ in range(100):
        if backend.run_due(T0 + timedelta(minutes=10), engine.tasks.handle) == 0 and backend.next_wake() is None:
            return
    raise AssertionError(f"the queue does not drain: {backend.queued_names()[:5]}")


def _at_once(count: int, work) -> list[float]:
    """Run work(i) for i < count in threads released together; each one's seconds."""
    gate, took, errors = threading.Barrier(count), [0.0] * count, []

    def run(number: int) -> None:
        try:
            gate.wait()
            began = time.monotonic()
            work(number)
            took[number] = time.monotonic() - began
        except Exception as error:  # reported below: an exception in a thread is otherwise lost
            errors.append(error)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    return took


def test_a_row_is_appended_once_per_key_and_listed_in_key_order(backend):
    engine = _engine(backend)
    first = Pending("r-1", Trigger.MANUAL, T0)
    assert engine.inbox.append("proj", "job", first) == first
    again = Pending("r-1", Trigger.MANUAL, T0 + timedelta(seconds=3))
    assert engine.inbox.append("proj", "job", again) == first  # the first one's time is kept
    engine.inbox.append("proj", "job", Pending("r-0", Trigger.MANUAL, T0))
    rows = backend.store.run_in_transaction(lambda tx: tx.list_inbox("proj", "job", 10))
    assert list(rows) == ["manual/r-0", "manual/r-1"]
    assert backend.queued_names() == [inbox_task("proj", "job", T0).name]  # one fold for the grain


def test_a_fold_steps_each_row_once_and_deletes_it_in_the_same_commit(backend):
    engine = _engine(backend)
    _enable(engine, "job")
    for number in range(3):
        engine.inbox.append("proj", "job", Pending(f"r-{number}", Trigger.MANUAL, T0))
    results = engine.inbox.fold("proj", "job")
    assert len(results) == 3
    assert backend.store.run_in_transaction(lambda tx: tx.list_inbox("proj", "job", 10)) == {}
    assert engine.inbox.fold("proj", "job") == []  # nothing left: nothing stepped again
    assert len(backend.store.get_job("proj", "job").record.active) == 3


def test_a_job_gone_meanwhile_drops_its_rows(backend):
    engine = _engine(backend)
    engine.inbox.append("proj", "nobody", Pending("r-1", Trigger.MANUAL, T0))
    assert len(engine.inbox.fold("proj", "nobody")) == 1  # refused: no such job
    assert backend.store.run_in_transaction(lambda tx: tx.list_inbox("proj", "nobody", 10)) == {}


def warm_ups(backend) -> set[str]:
    return {row.id for row in backend.store.list_invocations("proj", "warm-up", 100, None)[0]}


def _skip_legacy_datastore(backend) -> None:
    if backend.name == "datastore":
        pytest.skip("legacy Datastore locks a job's entity group, inbox rows included (docs/ARCHITECTURE.md)")


@pytest.mark.serial  # a latency bound: not beside another xdist worker's load
def test_200_api_triggers_of_one_job_at_once_are_answered_in_time_and_delivered_once(backend):
    _skip_legacy_datastore(backend)
    target = CountingTarget()
    engine = _engine(backend, target)
    _enable(engine, "job")
    _enable(engine, "warm-up")
    # Untimed: an emulator just started answers its first requests several times slower (a
    # cold JVM); the bound is about a burst on a store already serving.
    _at_once(20, lambda number: operations.trigger(engine, "proj", "warm-up", f"w-{number}"))
    count, answers = 200, {}

    def trigger(number: int) -> None:
        answers[number] = operations.trigger(engine, "proj", "job", f"request-{number}")

    took = _at_once(count, trigger)
    assert max(took) < ANSWER_WITHIN, f"slowest answer {max(took):.1f} s"
    assert {answer.status for answer in answers.values()} <= {"STARTING", "RUNNING", "SUCCEEDED"}
    _drain(backend, engine)
    ids = {answer.id for answer in answers.values()}
    assert len(ids) == count  # one invocation per request, named in its answer
    assert set(target.delivered) - warm_ups(backend) == ids and set(target.delivered.values()) == {1}
    assert count > FOLD_ROWS  # so the folds took more than one commit


@pytest.mark.serial
def test_50_upstream_jobs_trigger_one_downstream_job_at_the_same_instant(backend):
    _skip_legacy_datastore(backend)
    target = CountingTarget()
    engine = _engine(backend, target)
    _enable(engine, "down")
    count = 50
    tasks = [trigger_task("proj", f"up-{n}", "down", f"up-{n}-invocation", T0, T0) for n in range(count)]
    assert {task.kind for task in tasks} == {TaskKind.TRIGGER}
    took = _at_once(count, lambda number: engine.tasks.handle(tasks[number]))
    assert max(took) < ANSWER_WITHIN, f"slowest trigger task {max(took):.1f} s"
    engine.tasks.handle(tasks[0])  # a trigger task delivered twice triggers once
    _drain(backend, engine)
    engine.tasks.handle(tasks[1])  # and so does one delivered again after the fold
    _drain(backend, engine)
    rows, _ = backend.store.list_invocations("proj", "down", 100, None)
    assert sorted(row.trigger for row in rows) == sorted(f"job:up-{n}" for n in range(count))
    assert len(target.delivered) == count and set(target.delivered.values()) == {1}


def test_a_retried_trigger_whose_fold_task_was_lost_arms_a_fold_again(backend):
    engine = _engine(backend)
    _enable(engine, "job")
    pending = Pending("r-1", Trigger.MANUAL, T0)
    # The row committed, its task lost (Cloud Tasks refused it for longer than its retries).
    backend.store.run_in_transaction(lambda tx: tx.put_inbox("proj", "job", pending.key, pending.to_dict()))
    _drain(backend, engine)
    assert backend.store.list_invocations("proj", "job", 10, None)[0] == []
    engine.inbox.append("proj", "job", pending)  # the client retries
    _drain(backend, engine)
    rows, _ = backend.store.list_invocations("proj", "job", 10, None)
    assert [(row.trigger, row.status) for row in rows] == [("manual", "SUCCEEDED")]
