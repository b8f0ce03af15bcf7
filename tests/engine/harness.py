"""A real SQLite store and queue, a fake clock, tasks run inline: the engine in milliseconds."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from datetime import datetime, timedelta

from engine.adapters.local.dispatcher import Dispatcher
from engine.adapters.local.sqlite_queue import SqliteTaskQueue
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.config_import import JobSnapshot, ProjectSnapshot, import_project
from engine.ports import ConflictError, DeliveryResult, StoreError
from engine.service import Engine
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


class RecordingTarget:
    """Stands in for the network: records each delivery and answers as told."""

    def __init__(self):
        self.requests = []
        self.answers: list[DeliveryResult] = []
        self.lock = threading.Lock()

    def deliver(self, request):
        with self.lock:
            self.requests.append(request)
            return self.answers.pop(0) if self.answers else DeliveryResult("succeeded", detail="ok")

    def invocations(self) -> list[str]:
        return [r.invocation_id for r in self.requests]


class FlakyStore:
    """Wraps the real store: fails or re-runs transactions on demand."""

    def __init__(self, store: SqliteJobStore):
        self.inner = store
        self.fail_next = 0  # transactions that fail before their body runs
        self.conflict_every_other = False
        self._conflicted = False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def run_in_transaction(self, body):
        with self.transaction() as tx:
            return body(tx)

    @contextmanager
    def transaction(self):
        if self.fail_next:
            self.fail_next -= 1
            raise StoreError("injected: storage unavailable")
        with self.inner.transaction() as tx:
            yield tx
            if self.conflict_every_other and not self._conflicted:
                # The body ran; its writes are rolled back, as a Datastore retry would see.
                self._conflicted = True
                raise ConflictError("injected conflict")
        self._conflicted = False


class Harness:
    def __init__(self, tmp_path, tuning: Tuning | None = None):
        self.clock = FakeClock()
        self.store = FlakyStore(SqliteJobStore(tmp_path / "sundial.db"))
        self.target = RecordingTarget()
        targets = {"http": self.target, "noop": self.target}
        self.engine = Engine(self.store, targets, self.clock, tuning or Tuning(), secret=b"s")
        self.queue = SqliteTaskQueue(self.store.inner)
        self.dispatcher = Dispatcher(self.queue, self.engine.handle_task, self.clock)

    def define(self, job_id: str = "job", project: str = "proj", content: str = "v1", **policy) -> None:
        policy.setdefault("schedule_text", "every 1m")
        policy.setdefault("revision", content)
        definition = {"id": job_id, "target": {"noop": {}}, "timezone": "UTC", "rev": content}
        job = JobSnapshot(job_id, JobPolicy(**policy), definition, False)
        import_project(self.engine, ProjectSnapshot(project, content, jobs=(job,)))

    def run_until(self, when: datetime) -> int:
        """Advance the clock to `when` through every task ETA on the way, running tasks."""
        ran = 0
        while True:
            ran += self.dispatcher.run_due_now()
            wake = self.queue.next_wake(self.clock.current)
            if wake is None or wake > when:
                self.clock.current = max(self.clock.current, when)
                return ran + self.dispatcher.run_due_now()
            self.clock.current = max(self.clock.current, wake)

    def invocations(self, job_id: str = "job", project: str = "proj"):
        rows, _ = self.store.list_invocations(project, job_id, 10_000, None)
        return list(reversed(rows))  # oldest first
