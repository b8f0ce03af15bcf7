"""The in-memory store and queue (engine/adapters/memory), a fake clock, tasks run
inline: the engine in milliseconds.

- `Harness(tmp_path, sqlite=True)` runs it on a real SQLite store and queue in
  `tmp_path` instead, for what is about that backend (its file, its processes).

The fault-injection suite (tests/faults) drives the same harness harder:
- `Harness(tmp_path, backend=...)` runs it on another store and queue (a backend
  of tests/contract/backends.py: `store`, `run_due(now, handle)`, `next_wake()`);
- `FlakyStore.fault` decides, transaction by transaction, to fail it before its
  body runs, after its body ran (rolled back), or after it committed (the commit
  landed but the caller sees an error, as with an ambiguous commit RPC), or, on
  a backend that sends tasks after the commit, to lose the tasks it sent;
- `Harness.tag_steps()` tells the store which step of the chain each
  transaction is (tick, start, result, watchdog, import, ...);
- `Harness.every(period, work)` and `Harness.add_source(source)` add periodic
  work (the watchdog, the config import) and other things that wake the fake
  clock (late task deliveries) to `run_until`;
- `RecordingTarget.check` and `.respond` inspect each delivery as it happens and
  choose its answer.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable

from engine.adapters.local.dispatcher import InlineDispatcher
from engine.adapters.local.sqlite_queue import SqliteTaskQueue
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.adapters.memory import build_memory_backend
from engine.config_import import JobSnapshot, ProjectSnapshot
from engine.ports import ConflictError, DeliveryResult, StoreError
from engine.service import build_engine
from statemachine import events as ev
from statemachine.definition import JobDefinition
from statemachine.durations import UTC
from statemachine.policy import JobPolicy, Tuning

START = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self, now: datetime = START):
        self.current = now

    def now(self) -> datetime:
        return self.current

    def advance(self, **delta) -> datetime:
        self.current += timedelta(**delta)
        return self.current

    # Run once by the next `sleep`, before the clock gets there: how a test acts while
    # a staged request waits for its time (engine/staged.py).
    while_sleeping: Callable[[], object] | None = None

    def sleep(self, seconds: float) -> None:
        """A wait moves the fake clock on instead of taking time."""
        until = self.current + timedelta(seconds=seconds)
        hook, self.while_sleeping = self.while_sleeping, None
        if hook is not None:
            hook()
        self.current = max(self.current, until)


class RecordingTarget:
    """Stands in for the network: records each delivery and answers as told.

    `check(request)`, if set, runs first (e.g. to look at what storage holds at
    the instant of the call); `respond(request)`, if set, gives the answer when
    `answers` is empty.
    """

    def __init__(self):
        self.requests = []
        self.answers: list[DeliveryResult] = []
        self.check: Callable[[object], None] | None = None
        self.respond: Callable[[object], DeliveryResult] | None = None
        self.lock = threading.Lock()

    def deliver(self, request):
        if self.check is not None:
            self.check(request)
        with self.lock:
            self.requests.append(request)
            if self.answers:
                return self.answers.pop(0)
        if self.respond is not None:
            return self.respond(request)
        return DeliveryResult("succeeded", detail="ok")

    def invocations(self) -> list[str]:
        return [r.invocation_id for r in self.requests]


# How a transaction fails (FlakyStore.fault's answers).
BEFORE = "before"  # fails before its body runs: nothing written
ROLLBACK = "rollback"  # its body ran, then it failed: rolled back, nothing written
AFTER_COMMIT = "after-commit"  # it committed, and then the caller got an error anyway
MODES = (BEFORE, ROLLBACK, AFTER_COMMIT)
# It committed, and the tasks it enqueued were lost: only where tasks go out after
# the commit (Cloud Tasks); on SQLite the enqueue is part of the commit.
LOSE_TASKS = "lose-tasks"


class FlakyStore:
    """Wraps a store (in-memory, SQLite, Datastore): fails or re-runs transactions on demand.

    `fault(step)` is asked before every transaction, with the step of the chain
    it belongs to (see `Harness.tag_steps`; "" when untagged), and answers None
    or one of MODES. `fail_queries(name)` may make a read outside transactions
    (e.g. the watchdog's query) raise StoreError. `injected` counts what was done.
    """

    def __init__(self, store):
        self.inner = store
        self.fail_next = 0  # transactions that fail before their body runs
        self.conflict_every_other = False
        self._conflicted = False
        self.fault: Callable[[str], str | None] | None = None
        self.fail_queries: Callable[[str], bool] | None = None
        self.injected: dict[tuple[str, str], int] = {}
        self._local = threading.local()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @property
    def step(self) -> str:
        return getattr(self._local, "step", "")

    @step.setter
    def step(self, value: str) -> None:
        self._local.step = value

    def _count(self, mode: str, step: str | None = None) -> None:
        key = (self.step if step is None else step, mode)
        self.injected[key] = self.injected.get(key, 0) + 1

    def run_in_transaction(self, body):
        if self.fail_next:
            self.fail_next -= 1
            raise StoreError("injected: storage unavailable")
        mode = self.fault(self.step) if self.fault is not None else None
        if mode == BEFORE:
            self._count(mode)
            raise StoreError(f"injected: storage unavailable ({self.step})")
        conflict = self.conflict_every_other and not self._conflicted

        def run(tx):
            result = body(tx)
            if conflict:
                # The body ran; its writes are rolled back, as a Datastore retry would see.
                self._conflicted = True
                raise ConflictError("injected conflict")
            if mode == ROLLBACK:
                self._count(mode)
                raise StoreError(f"injected: commit failed ({self.step})")
            return result

        self._local.losing = mode == LOSE_TASKS
        try:
            result = self.inner.run_in_transaction(run)
        finally:
            self._local.losing = False
        if mode == LOSE_TASKS:
            self._count(mode)
        self._conflicted = False
        if mode == AFTER_COMMIT:
            self._count(mode)
            raise StoreError(f"injected: commit outcome unknown ({self.step})")
        return result

    @property
    def losing_tasks(self) -> bool:
        """The transaction running in this thread is to lose the tasks it sends."""
        return getattr(self._local, "losing", False)

    def jobs_due_for_watchdog(self, now, limit, cursor=None):
        if self.fail_queries is not None and self.fail_queries("watchdog-query"):
            self._count("failed", step="watchdog-query")
            raise StoreError("injected: watchdog query failed")
        return self.inner.jobs_due_for_watchdog(now, limit, cursor)


# Which step of the chain an engine call is, by the event it applies.
_STEPS = {
    ev.TickArrived: "tick",
    ev.InvocationStarting: "start",
    ev.WatchdogFired: "watchdog",
    ev.JobEnabled: "import",
    ev.JobDisabled: "import",
    ev.ScheduleChanged: "import",
    ev.ManualTrigger: "trigger",
}


def step_of(event, note) -> str:
    if note is not None:  # an attempt's outcome, with its log line
        return "result"
    return _STEPS.get(type(event), type(event).__name__)


@dataclass
class Periodic:
    """Work done every `period` of fake time (e.g. the watchdog); failures are
    swallowed and counted, as serve's loops log them and carry on."""

    period: timedelta
    work: Callable[[], object]
    next_at: datetime
    runs: int = 0
    failures: int = 0
    stopped: bool = False

    def stop(self) -> None:
        self.stopped = True

    def next_wake(self) -> datetime | None:
        return None if self.stopped else self.next_at

    def run_due(self, now: datetime) -> int:
        if self.stopped or now < self.next_at:
            return 0
        self.next_at = now + self.period
        self.runs += 1
        try:
            self.work()
        except StoreError:
            self.failures += 1
        return 1


class Harness:
    def __init__(self, tmp_path=None, tuning: Tuning | None = None, backend=None, defer_finishes: bool | None = None,
                 sqlite: bool = False):
        """On the in-memory store and queue, on SQLite in `tmp_path` (`sqlite`), or on
        `backend` (see the module's doc); `defer_finishes` as build_engine takes it."""
        self.clock = FakeClock()
        self.backend = backend
        if backend is not None:
            inner = backend.store
        elif sqlite:
            inner = SqliteJobStore(tmp_path / "sundial.db")
            self.queue = SqliteTaskQueue(inner)
        else:
            inner, self.queue = build_memory_backend()
        self.store = FlakyStore(inner)
        self.target = RecordingTarget()
        targets = {"http": self.target, "noop": self.target}
        self.engine = build_engine(self.store, targets, self.clock, tuning or Tuning(), secret=b"s",
                                   defer_finishes=defer_finishes, sleep=self.clock.sleep)
        self.sources: list = []  # more things with next_wake() and run_due(now)
        if backend is None:
            self.dispatcher = InlineDispatcher(self.queue, self.engine.tasks.handle, self.clock)
        else:
            self.handle = self.engine.tasks.handle
            self._lose_tasks_on_demand(getattr(backend, "queue", None))

    def _lose_tasks_on_demand(self, queue) -> None:
        """A queue fed after the commit (the stand-in for Cloud Tasks) fails when
        the store's fault says LOSE_TASKS; the store logs it, as it would in production."""
        send = getattr(queue, "enqueue_now", None)
        if send is None:
            return
        store = self.store

        def enqueue_now(tasks):
            if store.losing_tasks:
                raise ConnectionError("injected: tasks lost after the commit")
            send(tasks)

        queue.enqueue_now = enqueue_now

    # --- what runs the tasks --------------------------------------------------------

    def set_handler(self, handle: Callable) -> None:
        """Hand every task the queue delivers to `handle` instead of the engine."""
        if self.backend is None:
            self.dispatcher.handle = handle
        else:
            self.handle = handle

    def run_due(self) -> int:
        """Run the queue's due tasks, then every other source's due work."""
        if self.backend is None:
            ran = self.dispatcher.run_due_now()
        else:
            ran = self.backend.run_due(self.clock.now(), self.handle)
        for source in self.sources:
            ran += source.run_due(self.clock.now())
        return ran

    def next_wake(self) -> datetime | None:
        if self.backend is None:
            wakes = [self.queue.next_wake(self.clock.current)]
        else:
            wakes = [self.backend.next_wake()]
        wakes += [source.next_wake() for source in self.sources]
        wakes = [w for w in wakes if w is not None]
        return min(wakes) if wakes else None

    def add_source(self, source) -> None:
        self.sources.append(source)

    def every(self, period: timedelta, work: Callable[[], object]) -> Periodic:
        periodic = Periodic(period, work, self.clock.now() + period)
        self.sources.append(periodic)
        return periodic

    def tag_steps(self) -> None:
        """Let `store.fault` see which step of the chain each transaction is."""
        changes = self.engine.changes
        apply, apply_many, write = changes.apply, changes.apply_many, changes.write
        store = self.store

        def tagged_apply(project, job_id, event, **kwargs):
            outer, store.step = store.step, step_of(event, kwargs.get("note"))
            try:
                return apply(project, job_id, event, **kwargs)
            finally:
                store.step = outer

        def tagged_apply_many(many):
            # The chain's tasks run one at a time here: the batch is one change.
            outer, store.step = store.step, step_of(many[0].event, many[0].note) if many else "write"
            try:
                return apply_many(many)
            finally:
                store.step = outer

        def tagged_write(change):
            outer, store.step = store.step, store.step or "write"
            try:
                return write(change)
            finally:
                store.step = outer

        changes.apply, changes.apply_many, changes.write = tagged_apply, tagged_apply_many, tagged_write

    # --- jobs and time --------------------------------------------------------------

    def define(self, job_id: str = "job", project: str = "proj", content: str = "v1", **policy) -> None:
        policy.setdefault("schedule_text", "every 1m")
        policy.setdefault("revision", content)
        definition = JobDefinition(id=job_id, schedule=policy["schedule_text"], target={"noop": {}})
        job = JobSnapshot(job_id, JobPolicy(**policy), definition, False)
        self.engine.configs.import_project(ProjectSnapshot(project, content, jobs=(job,)))

    def run_until(self, when: datetime) -> int:
        """Advance the clock to `when` through every task ETA on the way, running tasks."""
        ran = 0
        while True:
            ran += self.run_due()
            wake = self.next_wake()
            if wake is None or wake > when:
                self.clock.current = max(self.clock.current, when)
                return ran + self.run_due()
            self.clock.current = max(self.clock.current, wake)

    def invocations(self, job_id: str = "job", project: str = "proj"):
        rows, _ = self.store.list_invocations(project, job_id, 10_000, None)
        return list(reversed(rows))  # oldest first
