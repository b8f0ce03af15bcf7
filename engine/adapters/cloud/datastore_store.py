"""DatastoreJobStore: the JobStore port on Cloud Datastore through google-cloud-ndb.

Transactions are ndb's: optimistic, and on contention ndb runs the body again
(up to `retries` more times, with jittered backoff) before it gives up, which
is reported as ConflictError. Datastore reads in a transaction do not see the
transaction's own writes, so a transaction keeps its writes in memory (reads
see them, as the port requires) and hands them to ndb when the body returns.

Cloud Tasks is not transactional, so tasks go out after the commit: each run
of the body registers its tasks with ndb's `call_on_commit`, which fires only
for the run that committed; a run that was retried or rolled back never sends
anything. The tasks are sent once ndb has returned, outside its event loop, so
that a failing queue can never make ndb retry a body that already committed.
A task lost there (the queue failing right after the commit) is what the
watchdog repairs; it is logged and counted, not raised, because the commit
already happened and the caller's work is done.

Every method opens its own ndb context (ndb contexts are per thread), so the
store may be called from any thread; inside a context that is already open it
joins it. ndb's caches are off: a read always goes to Datastore.

`counters` counts what the benchmark reports: entity reads (lookups and
entities returned by queries; keys-only queries count as queries only), the
lookup calls of transactions (a batched one counts once), entity writes and
deletes that committed, tasks enqueued, committed transactions, body re-runs,
and the most entities one commit wrote (`largest_commit`, a maximum, not a sum).
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from datetime import datetime
from typing import Callable, Iterator, Protocol, TypeVar

from google.cloud import ndb

from engine.adapters.cloud import datastore_housekeeping as housekeeping
from engine.adapters.cloud.datastore_calls import ndb_context, read_shared_secret, storage_errors
from engine.adapters.cloud.datastore_entities import (
    INDEX_SHARDS,
    AuditEntity,
    InvocationEntity,
    JobEntity,
    MetaEntity,
    ProjectEntity,
    audit_key,
    audit_row,
    invocation_key,
    invocation_row,
    job_key,
    job_row,
    meta_key,
    project_key,
    project_row,
)
from engine.adapters.cloud.datastore_transaction import DatastoreTransaction
from engine.logs import log_event
from engine.ports import AuditEntry, InvocationRow, ProjectRow, StoredJob, Task

log = logging.getLogger("sundial.datastore")

T = TypeVar("T")
COUNTERS = ("reads", "lookups", "queries", "writes", "enqueues", "enqueue_failures", "transactions", "retries",
            "largest_commit")


class TaskSender(Protocol):
    """Where a committed transaction's tasks go (engine/adapters/cloud/cloud_tasks_queue.py)."""

    def enqueue_now(self, tasks: list[Task]) -> None:
        """Create the tasks; a name already taken is success (the task exists).

        :raises Exception: any failure; the store logs it and the watchdog repairs the chain.
        """


class DatastoreJobStore:
    # One job per transaction. Each job is its own entity group: a transaction over many
    # is cross-group, which legacy Datastore limits to 25 groups, and on Firestore in
    # Datastore mode it locks every job it read until it commits, so a task handler
    # stepping any of them waits or aborts the whole batch, which then runs again.
    jobs_per_commit = 1
    # A simple finish is left to its invocation's row: it spares an entity write a minute
    # per job (engine/deferred_finish.py); so any job may hold one to replay.
    defers_finishes = True
    holds_deferred_finishes = True

    def __init__(self, client: ndb.Client, queue: TaskSender, retries: int = 3,
                 on_enqueue: Callable[[datetime], None] | None = None, index_shards: int = INDEX_SHARDS):
        """`queue` has `enqueue_now(tasks: list[Task])`; `retries` is how many times
        ndb re-runs a contended transaction before ConflictError; `on_enqueue(eta)` is
        called with the earliest ETA of the tasks a transaction enqueued, after it
        commits (as the SQLite store does for its dispatcher; Cloud Tasks needs nothing).
        `index_shards` is part of the stored layout (datastore_entities.py): only tests,
        on a Datastore of their own, pass fewer, as each housekeeping query runs per shard."""
        self.client, self.queue, self.retries = client, queue, retries
        self.index_shards = index_shards
        self._on_enqueue = on_enqueue
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._lock = threading.Lock()

    def count(self, **amounts: int) -> None:
        with self._lock:
            for name, amount in amounts.items():
                self.counters[name] += amount

    def reset_counters(self) -> dict[str, int]:
        """Zero the counters (in place: holders of `counters` keep seeing them); returns what they were."""
        with self._lock:
            before = dict(self.counters)
            self.counters.update(dict.fromkeys(COUNTERS, 0))
        return before

    @contextmanager
    def context(self) -> Iterator[None]:
        """An ndb context for this thread, or the one already open in it."""
        with ndb_context(self.client):
            yield

    # --- transactions -------------------------------------------------------------------

    def run_in_transaction(self, body: Callable[["DatastoreTransaction"], T]) -> T:
        committed: list[DatastoreTransaction] = []
        runs = 0

        def run_once() -> T:
            nonlocal runs
            runs += 1
            tx = DatastoreTransaction(self)
            result = body(tx)
            tx.flush()
            ndb.get_context().call_on_commit(lambda: committed.append(tx))
            return result

        try:
            with self.call("transaction"):
                result: T = ndb.transaction(run_once, retries=self.retries)
        finally:
            self.count(retries=max(runs - 1, 0))
        tx = committed[-1]
        self.count(transactions=1, writes=len(tx.writes))
        with self._lock:
            self.counters["largest_commit"] = max(self.counters["largest_commit"], len(tx.writes))
        self._send(tx.tasks)
        return result

    def _send(self, tasks: list[Task]) -> None:
        if not tasks:
            return
        try:
            self.queue.enqueue_now(list(tasks))
        except Exception as error:  # committed already; the watchdog repairs a lost task
            self.count(enqueue_failures=len(tasks))
            log_event(log, "enqueue after commit failed", tasks=[t.name for t in tasks], error=repr(error))
            return
        self.count(enqueues=len(tasks))
        if self._on_enqueue is not None:
            self._on_enqueue(min(task.eta for task in tasks))

    def shared_secret(self, generate: Callable[[], str]) -> str:
        """The secret every process on this Datastore puts on the tasks it creates."""
        secret = read_shared_secret(self.client, generate, self.retries)
        self.count(reads=1)
        return secret

    def read_meta(self, key: str) -> str | None:
        """A small value kept beside the jobs (e.g. the UI's sign-out generations)."""
        with self.call("read meta"):
            entity = meta_key(key).get()
            self.count(reads=1)
            return entity.value if entity is not None else None

    def write_meta(self, key: str, value: str) -> None:
        with self.call("write meta"):
            MetaEntity(key=meta_key(key), value=value).put()
            self.count(writes=1)

    # --- reads outside transactions ---------------------------------------------------------

    @contextmanager
    def call(self, what: str) -> Iterator[None]:
        """An ndb context (keys need one too) and the port's errors, around one call."""
        with self.context(), storage_errors(what):
            yield

    def _lookup(self, key: ndb.Key) -> ndb.Model | None:
        entity = key.get()
        self.count(reads=1)
        return entity

    def get_job(self, project: str, job_id: str) -> StoredJob | None:
        with self.call("get job"):
            entity = self._lookup(job_key(project, job_id))
        return None if entity is None else job_row(entity)

    def get_project(self, project: str) -> ProjectRow | None:
        with self.call("get project"):
            entity = self._lookup(project_key(project))
        return None if entity is None else project_row(entity)

    def get_invocation(self, project: str, job_id: str, invocation_id: str) -> InvocationRow | None:
        with self.call("get invocation"):
            entity = self._lookup(invocation_key(project, job_id, invocation_id))
        return None if entity is None else invocation_row(entity)

    def get_invocations(self, project: str, keys: list[tuple[str, str]]) -> dict[tuple[str, str], InvocationRow]:
        if not keys:
            return {}
        with self.call("get invocations"):
            entities = ndb.get_multi([invocation_key(project, job_id, invocation_id) for job_id, invocation_id in keys])
        self.count(reads=len(keys), lookups=1)
        return {key: invocation_row(entity) for key, entity in zip(keys, entities) if entity is not None}

    def _fetch(self, query: ndb.Query, **options: object) -> list[ndb.Model]:
        results: list[ndb.Model] = query.fetch(**options)
        self.count(queries=1, reads=0 if options.get("keys_only") else len(results))
        return results

    def jobs_due_for_watchdog(
        self, now: datetime, limit: int, cursor: str | None = None
    ) -> tuple[list[tuple[str, str]], str | None]:
        with self.call("watchdog query"):
            return housekeeping.due_page(self, now, limit, cursor)

    def defer_watchdog(self, project: str, job_id: str, until: datetime) -> bool:
        with self.call("defer watchdog"):
            return housekeeping.defer(self, project, job_id, until)

    def list_projects(self) -> list[ProjectRow]:
        with self.call("list projects"):
            entities = self._fetch(ProjectEntity.query())
        return [project_row(e) for e in entities]

    def list_jobs(self, project: str) -> list[StoredJob]:
        with self.call("list jobs"):
            entities = self._fetch(JobEntity.query(JobEntity.project == project).order(JobEntity.key))
        return [job_row(e) for e in entities]

    def count_jobs(self, project: str) -> int:
        with self.call("count jobs"):
            keys = self._fetch(JobEntity.query(JobEntity.project == project), keys_only=True)
        return len(keys)

    def list_invocations(
        self, project: str, job_id: str, page_size: int, page_token: str | None
    ) -> tuple[list[InvocationRow], str | None]:
        # Ids sort newest first, so key order is the listing order and the token
        # is the last id returned.
        with self.call("list invocations"):
            query = InvocationEntity.query(ancestor=job_key(project, job_id))
            if page_token:
                query = query.filter(InvocationEntity.key > invocation_key(project, job_id, page_token))
            entities = self._fetch(query.order(InvocationEntity.key), limit=page_size + 1)
        page = [invocation_row(e) for e in entities[:page_size]]
        return page, (page[-1].id if len(entities) > page_size else None)

    def delete_invocations_before(self, cutoff: datetime, limit: int) -> int:
        with self.call("retention"):
            return housekeeping.delete_invocations(self, cutoff, limit)

    def delete_finished_progress(
        self, cutoff: datetime, limit: int, cursor: str | None = None
    ) -> tuple[int, str | None]:
        with self.call("retention of progress"):
            return housekeeping.delete_progress(self, cutoff, limit, cursor)

    def delete_audit_before(self, cutoff: datetime, limit: int) -> int:
        with self.call("retention of audit"):
            return housekeeping.delete_audit(self, cutoff, limit)

    def list_audit(
        self, project: str, job_id: str | None, page_size: int, page_token: str | None
    ) -> tuple[list[AuditEntry], str | None]:
        # A job's: an ancestor query in key order (built in); a project's: `project` and
        # `entry_id` (index.yaml). Ids sort newest first either way.
        with self.call("list audit"):
            if job_id:
                query = AuditEntity.query(ancestor=job_key(project, job_id))
                if page_token:
                    query = query.filter(AuditEntity.key > audit_key(project, job_id, page_token))
                query = query.order(AuditEntity.key)
            else:
                query = AuditEntity.query(AuditEntity.project == project)
                if page_token:
                    query = query.filter(AuditEntity.entry_id > page_token)
                query = query.order(AuditEntity.entry_id)
            entities = self._fetch(query, limit=page_size + 1)
        page = [audit_row(e) for e in entities[:page_size]]
        return page, (page[-1].id if len(entities) > page_size else None)

    # --- paged reads for the web UI ---------------------------------------------------------

    def list_jobs_page(
        self, project: str, page_size: int, page_token: str | None, prefix: str = ""
    ) -> tuple[list[StoredJob], str | None]:
        # A key range inside the built-in (project, key) index; ids are ASCII, so
        # prefix + U+FFFF bounds the names that start with the prefix.
        with self.call("list jobs page"):
            query = JobEntity.query(JobEntity.project == project)
            low = job_key(project, page_token) if page_token else None
            if prefix and (page_token is None or page_token < prefix):
                query = query.filter(JobEntity.key >= job_key(project, prefix))
            elif low is not None:
                query = query.filter(JobEntity.key > low)
            if prefix:
                query = query.filter(JobEntity.key < job_key(project, prefix + "\uffff"))
            entities = self._fetch(query.order(JobEntity.key), limit=page_size + 1)
        page = [job_row(e) for e in entities[:page_size]]
        return page, (page[-1].record.job_id if len(entities) > page_size else None)

    def list_invocations_with_status(
        self, project: str, job_id: str, statuses: tuple[str, ...], page_size: int, page_token: str | None
    ) -> tuple[list[InvocationRow], str | None]:
        # One ancestor query per status on the (status, key) index of index.yaml, merged.
        with self.call("list invocations by status"):
            futures = []
            for status in dict.fromkeys(statuses):
                query = InvocationEntity.query(InvocationEntity.status == status, ancestor=job_key(project, job_id))
                if page_token:
                    query = query.filter(InvocationEntity.key > invocation_key(project, job_id, page_token))
                futures.append(query.order(InvocationEntity.key).fetch_async(limit=page_size + 1))
            entities = [entity for future in futures for entity in future.result()]
            self.count(queries=len(futures), reads=len(entities))
        entities = sorted(entities, key=lambda entity: entity.key.id())[:page_size + 1]
        page = [invocation_row(e) for e in entities[:page_size]]
        return page, (page[-1].id if len(entities) > page_size else None)

    def recent_invocations(self, project: str, job_ids: list[str], count: int) -> dict[str, list[InvocationRow]]:
        # The page's ancestor queries run concurrently: one round trip, not one per job.
        with self.call("recent invocations"):
            futures = {job_id: InvocationEntity.query(ancestor=job_key(project, job_id))
                       .order(InvocationEntity.key).fetch_async(limit=count) for job_id in job_ids}
            found = {job_id: future.result() for job_id, future in futures.items()}
            self.count(queries=len(futures), reads=sum(len(rows) for rows in found.values()))
        recent = {}
        for job_id, entities in found.items():
            rows = [invocation_row(e) for e in entities]
            for row in rows:
                row.log = []  # as on every backend: the strip needs no logs
            recent[job_id] = rows
        return recent
