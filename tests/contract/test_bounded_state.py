""""State that stays small", as contract tests: what must hold once a job's
per-event and per-occurrence state lives outside its record. Both failed on release
1da8c97: 50 of 50 starts lost to `409 Transaction lock timeout`, and the record was
67,924 bytes after the first backlog tick (later refused past 1,048,487 bytes).

- 50 start tasks of one fan-out occurrence, run at once as Cloud Tasks dispatches
  them, on Firestore in Datastore mode (which locks as production does).
- A `* * * * *` job under `catchup: {policy: all, window: 30d}` whose chain was broken
  for 30 days: its record stays small while the backlog is scanned and worked through,
  and no commit writes more than 500 entities.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta

import pytest

from engine.config_import import JobSnapshot, ProjectSnapshot
from engine.ports import ConflictError
from engine.service import build_engine
from statemachine import events as ev
from statemachine.definition import CatchupSpec, FanoutSpec, JobDefinition
from statemachine.policy import Catchup, FanoutPolicy, JobPolicy, Tuning
from statemachine.vocabulary import TaskKind
from tests.contract.backends import FirestoreBackend, FixedClock
from tests.contract.samples import T0
from tests.contract.test_engine_scenarios import Scenario
from tests.engine.harness import START, RecordingTarget
from tests.support.cloud_stores import FIRESTORE_IN_LONG_RUNS
from tests.support.records import MAX_JOB_RECORD_BYTES, largest_job_record

FANOUT = 50
MAX_ENTITIES_PER_COMMIT = 500  # legacy Datastore's mutations per commit (MAX_MUTATIONS in the store)
DELIVERIES = 300  # of the 30-day backlog's 43,200: enough to see the record while it is worked through
MAX_TASKS = 3_000  # a bound on the run, whatever the fix's chain looks like


class Contention:
    """Counts the store's ConflictErrors (on Firestore: 409 Transaction lock timeout, or a
    transaction aborted by another). Once one happened the run has failed, so every later
    transaction fails at once, and the threads end within seconds instead of minutes."""

    def __init__(self, store):
        self.errors: list[ConflictError] = []
        run = store.run_in_transaction

        def counted(body):
            if self.errors:
                raise ConflictError("not run: the test already saw contention")
            try:
                return run(body)
            except ConflictError as error:
                self.errors.append(error)
                raise

        store.run_in_transaction = counted


def test_50_concurrent_starts_of_one_fanout_occurrence_on_firestore(firestore):
    # ndb runs no body again: each lock timeout reaches the engine as a ConflictError, counted.
    backend = FirestoreBackend(firestore, retries=0)
    target = RecordingTarget()
    engine = build_engine(backend.store, {"noop": target}, FixedClock(T0), Tuning(), secret=b"s")
    policy = JobPolicy(schedule_text="triggered", fanout=FanoutPolicy(FANOUT, timedelta(0)), revision="r1")
    definition = JobDefinition(id="fan", schedule="triggered", fanout=FanoutSpec(FANOUT, "0s"), target={"noop": {}})
    engine.changes.apply("proj", "fan", ev.JobEnabled(policy), definition=definition, source="api")
    engine.changes.apply("proj", "fan", ev.ManualTrigger("request-1"))
    starts = [task for task in backend.queue.sent if task.kind == TaskKind.START]
    assert len(starts) == FANOUT
    contention, gate, failed = Contention(backend.store), threading.Barrier(FANOUT), []

    def dispatch(task) -> None:  # one attempt of the task, as Cloud Tasks makes it
        gate.wait()
        try:
            engine.tasks.handle(task)
        except Exception as error:  # counted below: an exception in a thread is otherwise lost
            failed.append(error)

    threads = [threading.Thread(target=dispatch, args=(task,)) for task in starts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    assert not contention.errors, (f"{len(contention.errors)} transactions lost to contention, {len(failed)} of "
                                   f"{FANOUT} start tasks failed; first: {contention.errors[0]}")
    assert failed == [], f"{len(failed)} of {FANOUT} start tasks failed, first: {failed[0]!r}"
    assert Counter(request.event_index for request in target.requests) == Counter(range(FANOUT))
    # The events' outcomes asked for checks of them all (one a second): the check ends it.
    checks = {task.name: task for task in backend.queue.sent if task.kind == TaskKind.CHECK}
    assert checks
    for task in checks.values():
        engine.tasks.handle(task)
    assert not contention.errors
    rows, _ = backend.store.list_invocations("proj", "fan", 10, None)
    assert [row.status for row in rows] == ["SUCCEEDED"]


class CommitSizes:
    """The most entities (Datastore) or rows (SQLite) one committed transaction of the
    store wrote: the store's own count of the commit's writes, or SQLite's changes."""

    def __init__(self, store):
        self.largest = 0
        run = store.run_in_transaction
        counters = getattr(store, "counters", None)

        def written() -> int:
            return counters["writes"] if counters is not None else store.connection().total_changes

        def measured(body):
            before = written()
            result = run(body)
            self.largest = max(self.largest, written() - before)
            return result

        store.run_in_transaction = measured


class Backlog:
    """Runs the chain's tasks one by one, measuring the job record after each; once the
    record is over its bound (or DELIVERIES were made) tasks other than ticks are dropped,
    so that a failing run ends at once and a passing one stops after the deliveries."""

    def __init__(self, scenario: Scenario):
        self.scenario, self.store = scenario, scenario.backend.store
        self.peak, self.peak_after, self.tasks, self.errors = 0, "", 0, []

    def measure(self, after: str) -> None:
        size = largest_job_record(self.store).bytes
        if size > self.peak:
            self.peak, self.peak_after = size, after

    def handle(self, task) -> None:
        delivered = len(self.scenario.target.requests)
        if self.peak > MAX_JOB_RECORD_BYTES or self.tasks >= MAX_TASKS:
            return
        if task.kind != TaskKind.TICK and delivered >= DELIVERIES:
            return
        self.tasks += 1
        try:
            self.scenario.engine.tasks.handle(task)
        except Exception as error:
            self.errors.append(error)
            raise  # the queue retries it, as in production
        finally:
            self.measure(f"task {self.tasks} ({task.kind}), {delivered} deliveries made")


# The Firestore emulator takes about 18 s of the suite for this one; it runs in long runs.
@pytest.mark.parametrize("backend", ["sqlite", "memory", "datastore", FIRESTORE_IN_LONG_RUNS], indirect=True)
def test_a_30_day_broken_chain_under_catchup_all_keeps_the_record_small(backend):
    scenario = Scenario(backend)
    schedule = "* * * * *"
    policy = JobPolicy(schedule_text=schedule, catchup=Catchup.ALL, catchup_window=timedelta(days=30), revision="v1")
    definition = JobDefinition(id="job", schedule=schedule, catchup=CatchupSpec(Catchup.ALL, "30d"),
                               target={"noop": {}})
    scenario.engine.configs.import_project(
        ProjectSnapshot("proj", "v1", jobs=(JobSnapshot("job", policy, definition, False),)))
    scenario.run_until(START + timedelta(minutes=2, seconds=30))
    assert len(scenario.target.requests) == 2
    _lose_every_task(backend)  # the chain breaks ...
    broken = scenario.clock.current
    scenario.clock.current += timedelta(days=30)  # ... for 30 days, then the watchdog finds it
    commits = CommitSizes(backend.store)
    backlog = Backlog(scenario)
    assert scenario.engine.maintenance.run_watchdog() == 1
    backlog.measure("the watchdog's repair")
    while backend.run_due(scenario.clock.now(), backlog.handle):
        pass
    assert backlog.peak <= MAX_JOB_RECORD_BYTES, (
        f"the job record reached {backlog.peak:,} bytes (bound {MAX_JOB_RECORD_BYTES:,}) after {backlog.peak_after}")
    assert backlog.errors == [], f"{len(backlog.errors)} tasks failed, first: {backlog.errors[0]}"
    assert commits.largest <= MAX_ENTITIES_PER_COMMIT, f"one commit wrote {commits.largest:,} entities"
    assert backlog.tasks < MAX_TASKS
    # The backlog (all but the newest due occurrence) is worked through oldest first, each once.
    newest = scenario.clock.now() - timedelta(minutes=1)
    caught = [r.scheduled_time for r in scenario.target.requests[2:] if r.scheduled_time < newest]
    first = broken.replace(second=0, microsecond=0) + timedelta(minutes=1)
    assert caught == [first + timedelta(minutes=n) for n in range(len(caught))]
    assert len(caught) >= DELIVERIES - 3


def _lose_every_task(backend) -> None:
    if backend.name == "sqlite":
        backend.store.connection().execute("DELETE FROM tasks")
    elif backend.name == "memory":
        backend.queue.clear()
    else:
        backend.queue.__init__()
    assert backend.next_wake() is None
