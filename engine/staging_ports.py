"""The ports of staging (statemachine/staging.py): what a sender that can make an
attempt's request ready ahead of its time offers, and what the embedded backend's
staged path (engine/adapters/local/staged_sends.py) asks of it and of the store; and the
transaction runner the staged checks take, which the notifications take too.

Beside engine/ports.py, which is at the module size cap. The composition root
(app/bootstrap.py) hands the targets that stage to the engine by name
(`build_engine(staging=...)`); nothing finds them by looking for a method.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol, TypeVar

from engine.ports import DeliveryRequest, DeliveryResult, JobStore, StoredJob, Target, Transaction

# A writer's own work item and its answer: made by a StagedRequest, read by the writer
# of the same target only (engine/targets/http_batch.py Outgoing and Answer).
WriterItem = Any
WriterOutcome = Any

T = TypeVar("T")

JobKey = tuple[str, str]  # (project, job id)
# Jobs as the caller staged them, with their record's stored text (JobsReader.get_jobs).
KnownJobs = Mapping[JobKey, tuple[StoredJob, str]]


class StagedRequest(Protocol):
    """One attempt's request, made ready ahead of its time (rendered, encoded, checked)."""

    def warm(self) -> None:
        """Open what the write will need (a connection) ahead of the time. Never raises:
        a failure here is met again, and recorded, at the write."""

    def outgoing(self, ready: Callable[[], bool], done: Callable[[WriterOutcome | None], None]) -> WriterItem:
        """The request as its target's BatchWriter takes it: `ready()` is asked right
        before the write (False: not sent); `done(outcome)` gets the writer's answer, an
        error, or None (not written)."""

    def answered(self, outcome: WriterOutcome, written_at: float) -> DeliveryResult | None:
        """The result of what the writer read, at once on its thread; None when finishing
        it blocks (a redirect to follow): `finish` then does it on another thread.
        `written_at`: time.monotonic() right before the write."""

    def finish(self, outcome: WriterOutcome, written_at: float) -> DeliveryResult:
        """The result, doing whatever blocking work is left (a redirect followed)."""


class BatchWriter(Protocol):
    """One thread that writes the staged requests due at one instant, and reads their answers."""

    def start(self) -> None: ...

    def submit(self, items: list[WriterItem]) -> None:
        """Write these as soon as each one's connection takes it."""

    def backlog(self) -> int:
        """Requests submitted and not yet written."""

    def shutdown(self, timeout: float | None = None) -> None:
        """Finish what was submitted, then stop; wait `timeout` seconds at most."""


class StagingTarget(Target, Protocol):
    """A target that can make a request ready ahead of its time, and write many at once."""

    def stage(self, request: DeliveryRequest) -> StagedRequest | None:
        """deliver() up to the write; None when any of it fails (deliver() at the
        time then fails the same way)."""

    def batch_writer(self, hand_off: Callable[[Callable[[], None]], None]) -> BatchWriter:
        """The writer of this target's staged requests; `hand_off(work)` runs, on another
        thread, an answer the writer will not read itself."""


class JobsReader(Protocol):
    """The store's read of many jobs at once, for the check of the requests due at one instant."""

    def get_jobs(self, keys: list[JobKey], known: KnownJobs | None = None) -> dict[JobKey, StoredJob]:
        """The jobs of `keys` that exist, by key. `known`: a store that can tell a row is
        unchanged since the caller staged it may hand back the caller's own object.

        :raises StoreError: storage is failing.
        """


class RunTransaction(Protocol):
    """JobChanges.write as the staged checks (engine/staged.py) and the notifications
    (engine/notify.py) take it: a write of their own."""

    def __call__(self, body: Callable[[Transaction], T]) -> T:
        """Run `body(tx)` in one transaction, again when its commit loses a race.

        :raises StoreError: storage is failing (a task is retried).
        """


class OneByOne:
    """JobsReader for a store that reads one job at a time: a read per job."""

    def __init__(self, store: JobStore):
        self._store = store

    def get_jobs(self, keys: list[JobKey], known: KnownJobs | None = None) -> dict[JobKey, StoredJob]:
        found = {key: self._store.get_job(*key) for key in dict.fromkeys(keys)}
        return {key: job for key, job in found.items() if job is not None}
