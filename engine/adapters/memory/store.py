"""MemoryJobStore: the JobStore port (engine/ports.py) on MemoryTables.

Transactions are serialized: a body runs under the tables' lock and commits before
it is released, so no transaction loses a race and none runs twice (SQLite's
`BEGIN IMMEDIATE` model, not Datastore's optimistic one). A body that raises
writes nothing and enqueues nothing; one that commits hands its tasks to the queue
in the same critical section, so a reader never sees the writes without them.
Reads outside a transaction see committed rows only. See tables.py for what the
store models of production's limits and what it leaves out.
"""

from __future__ import annotations

from datetime import datetime
from typing import Callable, TypeVar

from engine.adapters.memory.queue import MemoryTaskQueue
from engine.adapters.memory.tables import MemoryTables, copy_invocation, copy_job, copy_project
from engine.adapters.memory.transaction import MemoryTransaction
from engine.ports import AuditEntry, InvocationRow, ProjectRow, StoredJob, Transaction
from statemachine.budget import JOBS_PER_COMMIT
from statemachine.vocabulary import TERMINAL_STATUSES

T = TypeVar("T")
_FINISHED = frozenset(status.value for status in TERMINAL_STATUSES)


class MemoryJobStore:
    jobs_per_commit = JOBS_PER_COMMIT
    # As the embedded store: a finish is written to the job's record at once, and no
    # finish was ever left to a row (engine/deferred_finish.py).
    defers_finishes = False
    holds_deferred_finishes = False

    def __init__(self, tables: MemoryTables, queue: MemoryTaskQueue):
        self.tables = tables
        self.queue = queue
        # What committed transactions did, for tests and the simulator to measure:
        # "commits", "writes" (entities, as one commit's budget counts them), "enqueues".
        self.counters = {"commits": 0, "writes": 0, "enqueues": 0}

    def run_in_transaction(self, body: Callable[[Transaction], T]) -> T:
        """:raises CommitTooLarge, RowTooLarge: the writes are over production's limits;
        nothing was written."""
        with self.tables.lock:
            tx = MemoryTransaction(self.tables)
            result = body(tx)
            self.tables.apply(tx.writes)
            for change in tx.writes.queue_changes:
                if isinstance(change, str):
                    self.queue.remove(change)
                else:
                    self.counters["enqueues"] += self.queue.add(change)
            self.counters["commits"] += 1
            self.counters["writes"] += tx.writes.entity_count()
            return result

    def read_meta(self, key: str) -> str | None:
        with self.tables.lock:
            return self.tables.meta.get(key)

    def write_meta(self, key: str, value: str) -> None:
        with self.tables.lock:
            self.tables.meta[key] = value

    def shared_secret(self, generate: Callable[[], str]) -> str:
        """The secret this process puts on its tasks: made once, then kept."""
        with self.tables.lock:
            if "task_secret" not in self.tables.meta:
                self.tables.meta["task_secret"] = generate()
            return self.tables.meta["task_secret"]

    # --- the watchdog's index ----------------------------------------------------------

    def jobs_due_for_watchdog(
        self, now: datetime, limit: int, cursor: str | None = None
    ) -> tuple[list[tuple[str, str]], str | None]:
        # Keyset paging on (watchdog_at, project, job id), as SQLite's on (watchdog_at, rowid).
        after = _from_cursor(cursor)
        with self.tables.lock:
            due = sorted((at, key) for key, at in self.tables.watchdog_at.items() if at < now)
        page = [(at, key) for at, key in due if after is None or (at, key) > after][:limit]
        keys = [key for _, key in page]
        if len(page) < limit:
            return keys, None
        last_at, (project, job_id) = page[-1]
        return keys, "\n".join((last_at.isoformat(), project, job_id))

    def defer_watchdog(self, project: str, job_id: str, until: datetime) -> bool:
        with self.tables.lock:
            at = self.tables.watchdog_at.get((project, job_id))
            if at is None or at >= until:
                return False
            self.tables.watchdog_at[(project, job_id)] = until
            return True

    # --- reads of committed rows ----------------------------------------------------------

    def list_projects(self) -> list[ProjectRow]:
        with self.tables.lock:
            return [copy_project(self.tables.projects[p]) for p in sorted(self.tables.projects)]

    def get_project(self, project: str) -> ProjectRow | None:
        with self.tables.lock:
            row = self.tables.projects.get(project)
            return None if row is None else copy_project(row)

    def _jobs_of(self, project: str) -> list[StoredJob]:
        with self.tables.lock:
            found = [job for (p, _), job in self.tables.jobs.items() if p == project]
        return sorted((copy_job(job) for job in found), key=lambda job: job.record.job_id)

    def list_jobs(self, project: str) -> list[StoredJob]:
        return self._jobs_of(project)

    def count_jobs(self, project: str) -> int:
        with self.tables.lock:
            return sum(1 for p, _ in self.tables.jobs if p == project)

    def get_job(self, project: str, job_id: str) -> StoredJob | None:
        with self.tables.lock:
            job = self.tables.jobs.get((project, job_id))
        return None if job is None else copy_job(job)

    def get_jobs(self, keys: list[tuple[str, str]], known: object = None) -> dict[tuple[str, str], StoredJob]:
        """The jobs of `keys` that exist, in one read (engine/staged.py reads a burst's
        jobs so); `known` is the embedded store's hint, of no use here."""
        with self.tables.lock:
            found = {key: self.tables.jobs.get(key) for key in keys}
        return {key: copy_job(job) for key, job in found.items() if job is not None}

    def get_invocation(self, project: str, job_id: str, invocation_id: str) -> InvocationRow | None:
        with self.tables.lock:
            return self.tables.invocation((project, job_id, invocation_id))

    def get_invocations(self, project: str, keys: list[tuple[str, str]]) -> dict[tuple[str, str], InvocationRow]:
        with self.tables.lock:
            found = {key: self.tables.invocation((project, *key)) for key in keys}
        return {key: row for key, row in found.items() if row is not None}

    def _newest_first(self, project: str, job_id: str, keep: Callable[[InvocationRow], bool],
                      page_size: int, page_token: str | None) -> tuple[list[InvocationRow], str | None]:
        # Ids sort newest first, so the token is the last id returned.
        with self.tables.lock:
            rows = self.tables.invocations.get((project, job_id), {})
            ids = sorted(i for i, row in rows.items() if i > (page_token or "") and keep(row))[:page_size + 1]
            page = [copy_invocation(rows[i]) for i in ids[:page_size]]
        return page, (page[-1].id if len(ids) > page_size else None)

    def list_invocations(
        self, project: str, job_id: str, page_size: int, page_token: str | None
    ) -> tuple[list[InvocationRow], str | None]:
        return self._newest_first(project, job_id, lambda row: True, page_size, page_token)

    def list_invocations_with_status(
        self, project: str, job_id: str, statuses: tuple[str, ...], page_size: int, page_token: str | None
    ) -> tuple[list[InvocationRow], str | None]:
        return self._newest_first(project, job_id, lambda row: row.status in statuses, page_size, page_token)

    def recent_invocations(self, project: str, job_ids: list[str], count: int) -> dict[str, list[InvocationRow]]:
        recent = {}
        for job_id in job_ids:
            rows, _ = self.list_invocations(project, job_id, count, None)
            for row in rows:
                row.log = []  # a summary: the log is left out
            recent[job_id] = rows
        return recent

    def list_jobs_page(
        self, project: str, page_size: int, page_token: str | None, prefix: str = ""
    ) -> tuple[list[StoredJob], str | None]:
        jobs = [job for job in self._jobs_of(project)
                if job.record.job_id > (page_token or "") and job.record.job_id.startswith(prefix)]
        page = jobs[:page_size]
        return page, (page[-1].record.job_id if len(jobs) > page_size else None)

    def list_audit(
        self, project: str, job_id: str | None, page_size: int, page_token: str | None
    ) -> tuple[list[AuditEntry], str | None]:
        # Ids sort newest first: the token is the last entry's id.
        with self.tables.lock:
            entries = sorted((entry for (p, entry_id), entry in self.tables.audit.items()
                              if p == project and entry_id > (page_token or "")
                              and (job_id is None or entry.job_id == job_id)), key=lambda entry: entry.id)
        page = entries[:page_size]
        return page, (page[-1].id if len(entries) > page_size else None)

    # --- retention ------------------------------------------------------------------------

    def delete_invocations_before(self, cutoff: datetime, limit: int) -> int:
        with self.tables.lock:
            doomed = [(row.created_time, key, row.id) for key, rows in self.tables.invocations.items()
                      for row in rows.values() if row.status in _FINISHED
                      and row.created_time is not None and row.created_time < cutoff]
            for _, key, invocation_id in sorted(doomed)[:limit]:
                del self.tables.invocations[key][invocation_id]
                # A fan-out's progress rows go with it (engine/event_rows.py).
                self.tables.progress.pop((*key, invocation_id), None)
            return min(len(doomed), limit)

    def delete_finished_progress(
        self, cutoff: datetime, limit: int, cursor: str | None = None
    ) -> tuple[int, str | None]:
        # Nothing to sweep: progress rows go with their invocation (above).
        return 0, None

    def delete_audit_before(self, cutoff: datetime, limit: int) -> int:
        with self.tables.lock:
            doomed = sorted((entry.time, key) for key, entry in self.tables.audit.items() if entry.time < cutoff)
            for _, key in doomed[:limit]:
                del self.tables.audit[key]
            return min(len(doomed), limit)


def _from_cursor(cursor: str | None) -> tuple[datetime, tuple[str, str]] | None:
    if cursor is None:
        return None
    at, project, job_id = cursor.split("\n")
    return datetime.fromisoformat(at), (project, job_id)

