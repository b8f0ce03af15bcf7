"""The shell's ports: what the engine needs from storage, queues, targets and time.
Adapters implement these for one technology each (SQLite, Cloud Datastore, Cloud Tasks,
HTTP, ...); the engine core sees only these names and engine/inbox_ports.py's."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Callable, Protocol, TypeVar

from engine.errors import ConflictError as ConflictError
from engine.errors import StoreError as StoreError
from engine.inbox_ports import InboxRows
from statemachine.definition import JobDefinition
from statemachine.notification import NO_NOTIFICATION, NotificationState
from statemachine.record import JobRecord
from statemachine.vocabulary import DeliveryOutcome, TaskKind

T = TypeVar("T")


@dataclass(frozen=True)
class Task:
    """One task-queue task. `name` makes enqueueing idempotent while it is pending."""

    name: str
    kind: TaskKind | str  # a str: a kind this version does not know (its handler logs and drops it)
    payload: dict[str, Any]
    eta: datetime
    # The queue it goes on: "" for the chain's own; "PROJECT/THROTTLE" for the start
    # tasks of a throttled job, whose queue runs at most max_in_flight at once.
    queue: str = ""
    # As a queue hands it to a handler: it ran before and that run gave no 2xx answer
    # (Cloud Tasks' retry count); what that run began died with it (events.TickArrived).
    retried: bool = False


class JobSource(StrEnum):
    """Who defines a job: its project's config file, or the REST API."""

    CONFIG = "config"
    API = "api"


@dataclass
class StoredJob:
    """A job row: the machine's record plus what the shell needs to deliver."""

    record: JobRecord
    definition: JobDefinition  # the normalized job entry (target, templates, policies)
    source: JobSource = JobSource.CONFIG
    config_error: str = ""  # the error of a broken job entry that kept this older definition
    # The API is deleting it (engine/operations.py): hidden everywhere, then removed.
    deleted: bool = False


@dataclass
class InvocationRow:
    project: str
    job_id: str
    id: str
    status: str
    scheduled_time: datetime
    trigger: str
    reason: str = ""
    created_time: datetime | None = None
    started_time: datetime | None = None
    finished_time: datetime | None = None
    attempt: int = 0
    event_count: int = 1
    # The story for people to read; nothing decides anything from it.
    log: list[dict[str, Any]] = field(default_factory=list)
    # Its `on_failure` notification (statemachine/notification.py).
    notification: NotificationState = NO_NOTIFICATION


@dataclass
class ProjectRow:
    id: str
    config_hash: str = ""
    config_error: str = ""
    job_errors: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)  # acl, allowed_hosts, throttles, defaults


@dataclass(frozen=True)
class AuditEntry:
    """One operator action (engine/audit.py). `id` is unique in its project and sorts
    newest first (the time inverted, then random digits), so it is the paging token."""

    project: str
    job_id: str
    id: str
    time: datetime
    actor: str  # an API principal (`user:EMAIL`, `serviceAccount:EMAIL`), `anonymous` or `local`
    action: str  # an AuditAction
    detail: dict[str, Any] = field(default_factory=dict)


class Transaction(InboxRows, Protocol):
    """One unit of work, handed to the body of `JobStore.run_in_transaction`.

    Reads see its own writes; nothing is visible to others, and no task enqueued, until the body
    returns and the store commits. Any method may raise StoreError, which rolls it all back.
    """

    def get_job(self, project: str, job_id: str) -> StoredJob | None:
        """The job's row; None when there is none."""

    def put_job(self, job: StoredJob) -> None:
        """Create or replace the job's row (record, definition, source, config error)."""

    def delete_job(self, project: str, job_id: str) -> None:
        """Remove the job row; its invocations stay until retention removes them."""

    def get_invocation(self, project: str, job_id: str, invocation_id: str) -> InvocationRow | None:
        """The invocation's history record; None when there is none (yet, or any more)."""

    def put_invocation(self, row: InvocationRow) -> None:
        """Create or replace one invocation's history record."""

    def existing_invocations(self, project: str, job_id: str, invocation_ids: list[str]) -> set[str]:
        """Which of the invocations have a history record (this transaction's own
        writes included), in one batched read rather than one read per id."""

    def get_progress(self, project: str, job_id: str, invocation_id: str, part: str) -> dict[str, Any] | None:
        """One part of a fan-out invocation's progress (an event's state:
        engine/event_rows.py), as stored; None when it has no row yet."""

    def put_progress(self, project: str, job_id: str, invocation_id: str, part: str, value: dict[str, Any]) -> None:
        """Create or replace one part of an invocation's progress."""

    def list_progress(self, project: str, job_id: str, invocation_id: str) -> dict[str, dict[str, Any]]:
        """Every part of an invocation's progress, by part name."""

    def put_audit(self, entry: AuditEntry) -> None:
        """Add one audit entry, committed with the action it records."""

    def enqueue(self, task: Task) -> None:
        """Enqueue with the commit (SQLite), or right after it (Cloud Tasks). A task
        whose name is already pending is not enqueued twice."""

    def dequeue(self, name: str) -> None:
        """Take pending task `name` off at the commit (SQLite's own queue); elsewhere nothing: it comes, stale."""

    def get_project(self, project: str) -> ProjectRow | None:
        """The project's row; None for a project without a config file."""

    def put_project(self, row: ProjectRow) -> None:
        """Create or replace the project's row."""

    def delete_project(self, project: str) -> None:
        """Remove the project's row (its jobs are the caller's to stop first)."""


class MetaStore(Protocol):
    """Small values kept beside the jobs (the shared task secret, sign-out generations)."""

    def read_meta(self, key: str) -> str | None:
        """The value; None when never written. :raises StoreError: storage is failing."""

    def write_meta(self, key: str, value: str) -> None:
        """:raises StoreError: storage is failing; the value may or may not be written."""


class JobStore(MetaStore, Protocol):
    """Where jobs, their invocations and projects live (SQLite, Cloud Datastore).

    Every read below runs outside any transaction and sees committed data only; each
    :raises StoreError: when storage is failing, and changes nothing.
    """

    jobs_per_commit: int  # jobs one transaction may step for a bulk writer (the config import)
    defers_finishes: bool  # a finish may be left to its invocation's row (engine/deferred_finish.py)
    holds_deferred_finishes: bool  # its data may hold such a finish (an older version's): steps replay it

    def run_in_transaction(self, body: Callable[[Transaction], T]) -> T:
        """Run `body(tx)` in one transaction; commit if it returns, roll back if it raises.

        A store may run the body more than once (Datastore retries contention);
        only the last run's writes and enqueues take effect.

        :raises ConflictError: the commit kept losing races; the caller may try again.
        :raises StoreError: storage is failing.
        """

    def jobs_due_for_watchdog(
        self, now: datetime, limit: int, cursor: str | None = None
    ) -> tuple[list[tuple[str, str]], str | None]:
        """One page of up to `limit` (project, job_id) whose watchdog_at is before `now`, earliest
        first within each part of the store (SQLite: one; Datastore: each shard of its indexed
        times), keys only, and the cursor of the page after it (None: this was the last). The
        cursor is a position in the query's order, not an offset: jobs repaired meanwhile
        (watchdog_at moved past `now`) neither shift the next page nor come back in it; give it the same `now`.
        """

    def defer_watchdog(self, project: str, job_id: str, until: datetime) -> bool:
        """Move the job's indexed watchdog time later, to `until`, leaving its record
        alone: a job whose repair failed leaves the head of the watchdog's query for a
        while. Never moves it earlier, and does nothing for a job that is gone or has
        no watchdog time; the job's next step sets it from its record again. True if
        it moved. Reads nothing but the indexed time, so a job whose record cannot be
        read can still be deferred.

        :raises StoreError: storage is failing; nothing moved.
        """

    def list_projects(self) -> list[ProjectRow]:
        """Every project's row, broken ones included."""

    def get_project(self, project: str) -> ProjectRow | None:
        """The project's row; None for a project without a config file."""

    def list_jobs(self, project: str) -> list[StoredJob]:
        """Every job row of the project, hidden ones included (for the config import)."""

    def count_jobs(self, project: str) -> int:
        """How many job rows the project has, without loading them."""

    def get_job(self, project: str, job_id: str) -> StoredJob | None:
        """The job's row; None when there is none."""

    def list_invocations(
        self, project: str, job_id: str, page_size: int, page_token: str | None
    ) -> tuple[list[InvocationRow], str | None]:
        """Newest first; the token is the id to continue after."""

    def get_invocation(self, project: str, job_id: str, invocation_id: str) -> InvocationRow | None:
        """One invocation's history record with its log; None when there is none."""

    def get_invocations(self, project: str, keys: list[tuple[str, str]]) -> dict[tuple[str, str], InvocationRow]:
        """The rows of several (job id, invocation id) of one project in one batched
        read: those that exist, by their key."""

    def delete_invocations_before(self, cutoff: datetime, limit: int) -> int:
        """Remove up to `limit` finished invocations created before `cutoff` (never one
        still running, never a younger one); returns how many. Called again, it goes on
        with the next ones: what it removed is gone from its query.

        :raises StoreError: storage failed; what was removed before stays removed.
        """

    def delete_finished_progress(
        self, cutoff: datetime, limit: int, cursor: str | None = None
    ) -> tuple[int, str | None]:
        """Remove the progress rows (engine/event_rows.py) of fan-out invocations
        scheduled before `cutoff` that have finished or are gone, looking at up to
        `limit` rows from `cursor` on; returns how many were removed and the cursor
        to go on from (None: none left to look at). Rows of an invocation still
        running are stepped over, and stay.

        :raises StoreError: storage failed; what was removed before stays removed.
        """

    def delete_audit_before(self, cutoff: datetime, limit: int) -> int:
        """Remove up to `limit` audit entries older than `cutoff`; returns how many.

        :raises StoreError: storage failed; what was removed before stays removed.
        """

    def list_audit(
        self, project: str, job_id: str | None, page_size: int, page_token: str | None
    ) -> tuple[list[AuditEntry], str | None]:
        """The project's audit entries (only the job's, given `job_id`), newest first,
        one page; the token is the last entry's id, None after the last page."""

    # --- paged reads for the web UI (a page costs the same with 10 or 10,000 rows) ---
    def list_jobs_page(
        self, project: str, page_size: int, page_token: str | None, prefix: str = ""
    ) -> tuple[list[StoredJob], str | None]:
        """The project's jobs whose id starts with `prefix`, in id order, one page;
        the token is the last id returned, None after the last page."""

    def list_invocations_with_status(
        self, project: str, job_id: str, statuses: tuple[str, ...], page_size: int, page_token: str | None
    ) -> tuple[list[InvocationRow], str | None]:
        """Like list_invocations, only those whose status is one of `statuses` (indexed)."""

    def recent_invocations(self, project: str, job_ids: list[str], count: int) -> dict[str, list[InvocationRow]]:
        """Each job's newest `count` invocations, newest first, without their logs;
        for a page of jobs at once (a job without history maps to [])."""


class SecretReader(Protocol):
    def __call__(self, project: str, name: str) -> str:
        """The value of the project's secret `name`.

        :raises engine.secrets.SecretError: no such secret, or it cannot be read.
        """


class Clock(Protocol):
    def now(self) -> datetime:
        """An aware UTC datetime."""


@dataclass(frozen=True)
class DeliveryRequest:
    """Everything a target needs for one attempt of one event; templates already rendered.
    `attempt_of_job`: of the job's own target, closed if its invocation is aborted (not a hook's, nor a cancel)."""

    project: str
    job_id: str
    invocation_id: str
    scheduled_time: datetime
    attempt: int
    event_index: int
    event_count: int
    target: dict[str, Any]  # {"http": {...}} with template values substituted
    allowed_hosts: tuple[str, ...] = ()
    completion_url: str = ""
    completion_token: str = ""
    secret_headers: frozenset[str] = frozenset()  # names of headers whose values are secrets
    attempt_of_job: bool = True


@dataclass(frozen=True)
class DeliveryResult:
    outcome: DeliveryOutcome  # ACCEPTED: an async target started it; its completion comes later
    reason: str = ""  # for failed: e.g. "http 500", "timeout", "connection error: ..."
    detail: str = ""  # what to log on the invocation: status line, a bounded snippet
    duration: timedelta = timedelta(0)
    # What was sent, safe to store (engine/sent.py); None where nothing reached a sender.
    sent: dict[str, Any] | None = None


class Target(Protocol):
    """Sends one attempt somewhere (HTTP, Pub/Sub, Cloud Tasks)."""

    def deliver(self, request: DeliveryRequest) -> DeliveryResult:
        """Send the request and say how it went.

        Never raises for the target's own failures (refused, timed out, an error
        answer, a forbidden address): they are a failed result. Anything it raises is
        a bug: the task goes back to its queue, and the watchdog issues the attempt
        again under the same invocation id.
        """


class RetryTask(Exception):
    """Raised by a task handler: hand the task back to its queue, due again after `delay`."""

    def __init__(self, delay: timedelta, why: str = ""):
        super().__init__(why or f"retry in {delay.total_seconds():.3f}s")
        self.delay = delay


# --- the task queue, as a dispatcher of this process sees it -----------------------------


@dataclass(frozen=True)
class LeasedTask:
    """A task a dispatcher holds until its lease runs out (or it hands it back)."""

    id: int
    task: Task
    attempts: int  # deliveries of this task so far, this one included


class TaskQueue(Protocol):
    """A queue a dispatcher runs: it leases what is due, runs it, and settles it.

    A leased task belongs to its dispatcher until the lease runs out; a dispatcher
    that dies stops renewing, and its tasks become due again. Every method may fail
    with storage; the dispatcher logs that and tries again later, and a lease it
    could not settle simply runs out. Tasks that this process's own transactions
    enqueue are announced to the dispatcher through the hook its store was built
    with (`SqliteJobStore(on_enqueue=...)`), not through the queue.
    """

    def lease_due(
        self, now: datetime, limit: int, lease: timedelta, done: list[int] | None = None
    ) -> list[LeasedTask]:
        """Lease up to `limit` tasks due at `now`, earliest first, for `lease`; the `done`
        tasks are deleted in the same commit.

        :raises StoreError: nothing was leased or deleted.
        """

    def complete(self, task_ids: list[int]) -> None:
        """Delete finished tasks. :raises StoreError: none was deleted."""

    def retry(self, task_id: int, eta: datetime, attempts: int | None = None) -> None:
        """Hand a leased task back, due again at `eta`; with `attempts` (its LeasedTask's),
        only if no other lease took it since. :raises StoreError: it stays leased."""

    def renew(self, tasks: list[LeasedTask], until: datetime) -> list[int]:
        """Extend the leases of tasks still being worked on, each only if no other lease
        took it since (its `attempts` still count this lease last); returns the ids of
        those renewed. :raises StoreError: none was renewed."""

    def next_wake(self, now: datetime) -> datetime | None:
        """When a task is next takeable (an ETA, or a lease running out); None: nothing queued.

        :raises StoreError: storage failed.
        """

    def pending(self) -> int:
        """Tasks in the queue, leased or not. :raises StoreError: storage failed."""
