"""Optimistic transactions: the engine's work runs without the write lock.

An engine transaction decodes a job, steps its machine and encodes it again, during
which every other writer (in every process on the database) used to wait. Here
the body runs on reads outside any write transaction, and its writes are kept in
memory. Then, holding the write lock, one short transaction checks that every row
the body read is still exactly as it read it, and writes. If one changed, nothing
is written and the body runs again on fresh reads: the engine's bodies may run more
than once (the Datastore store retries them too), and only the run that commits
counts. What this costs and saves is measured in docs/PERFORMANCE.md ("Commit
strategies").

A body that reaches for the connection itself (`tx.conn`) cannot be replayed like
this: it raises NeedsLock, and the strategy runs it again the classic way, inside
`BEGIN IMMEDIATE` (commits.py).
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from typing import Any, NoReturn

from engine.adapters.local import sqlite_rows as sql
from engine.adapters.local.record_cache import RecordCache
from engine.ports import AuditEntry, InvocationRow, ProjectRow, StoredJob, Task


class NeedsLock(Exception):
    """The body used the connection directly: run it under the write lock instead."""


class Stale(Exception):
    """A row the body read changed before its writes could commit."""


class BufferedTransaction:
    """The body's view: committed rows (or its own writes), writes kept for `check_and_write`.

    It implements the port's Transaction on a connection it only reads from
    (`reader`); it has no connection to offer a body (see `conn`).
    """

    def __init__(self, reader: sqlite3.Connection, records: RecordCache):
        self._reader, self._records = reader, records
        self.earliest_eta: datetime | None = None
        self._reads: dict[sql.Row, sql.Row | None] = {}  # (kind, key...) -> the row as first read
        self._jobs: dict[tuple[str, str], tuple[StoredJob, sql.Row] | None] = {}  # None: deleted
        self._projects: dict[str, tuple[ProjectRow, sql.Row] | None] = {}
        self._invocations: dict[tuple[str, str, str], InvocationRow] = {}
        self._tasks: list[sql.Row] = []
        self._dequeued: list[sql.Row] = []  # (name,) of tasks to take off the queue
        self._progress: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self._holds: dict[sql.Row, sql.Row | None] = {}  # hold key -> its row to write (None: delete)
        self._audit: list[AuditEntry] = []

    @property
    def conn(self) -> NoReturn:
        """:raises NeedsLock: always; SQL of the body's own cannot be checked and replayed."""
        raise NeedsLock()

    def _read(self, kind: str, sql_text: str, key: sql.Row) -> sql.Row | None:
        row: sql.Row | None = self._reader.execute(sql_text, key).fetchone()
        self._reads.setdefault((kind, *key), row)
        return row

    def get_job(self, project: str, job_id: str) -> StoredJob | None:
        if (project, job_id) in self._jobs:
            pending = self._jobs[(project, job_id)]
            return None if pending is None else pending[0]
        row = self._read("job", sql.SELECT_JOB, (project, job_id))
        return None if row is None else sql.job_from_row(row, self._records)

    def put_job(self, job: StoredJob) -> None:
        # Encoded now, outside the lock; StoredJob and its record are immutable.
        self._jobs[(job.record.project, job.record.job_id)] = (job, sql.job_values(job, self._records))

    def delete_job(self, project: str, job_id: str) -> None:
        self._jobs[(project, job_id)] = None

    def get_invocation(self, project: str, job_id: str, invocation_id: str) -> InvocationRow | None:
        pending = self._invocations.get((project, job_id, invocation_id))
        if pending is not None:
            return sql.copy_invocation(pending)  # the caller may change it; only a put keeps that
        row = self._read("invocation", sql.SELECT_INVOCATION, (project, job_id, invocation_id))
        return None if row is None else sql.invocation_from_row(row)

    def put_invocation(self, row: InvocationRow) -> None:
        self._invocations[(row.project, row.job_id, row.id)] = sql.copy_invocation(row)

    def existing_invocations(self, project: str, job_id: str, invocation_ids: list[str]) -> set[str]:
        found = {i for i in invocation_ids if (project, job_id, i) in self._invocations}
        unread = [i for i in invocation_ids if i not in found]
        present = sql.select_existing(self._reader, project, job_id, unread)
        for invocation_id in unread:
            if invocation_id not in present:
                # Checked at commit like any read: one written meanwhile must not be overwritten.
                self._reads.setdefault(("invocation", project, job_id, invocation_id), None)
        return found | present

    def get_progress(self, project: str, job_id: str, invocation_id: str, part: str) -> dict[str, Any] | None:
        key = (project, job_id, invocation_id, part)
        if key in self._progress:
            return dict(self._progress[key])
        row = self._read("progress", sql.SELECT_PROGRESS, key)
        return None if row is None else dict(json.loads(row[0]))

    def put_progress(self, project: str, job_id: str, invocation_id: str, part: str, value: dict[str, Any]) -> None:
        self._progress[(project, job_id, invocation_id, part)] = dict(value)

    def list_progress(self, project: str, job_id: str, invocation_id: str) -> dict[str, dict[str, Any]]:
        """:raises NeedsLock: a listing cannot be checked row by row at commit (a row
        added meanwhile would go unseen); the few bodies that list run under the lock."""
        raise NeedsLock()

    def get_inbox(self, project: str, job_id: str, key: str) -> dict[str, Any] | None:
        """:raises NeedsLock: the inbox's bodies (engine/inbox.py) are few, and run under the lock."""
        raise NeedsLock()

    def put_inbox(self, project: str, job_id: str, key: str, value: dict[str, Any]) -> None:
        raise NeedsLock()

    def list_inbox(self, project: str, job_id: str, limit: int) -> dict[str, dict[str, Any]]:
        raise NeedsLock()

    def delete_inbox(self, project: str, job_id: str, key: str) -> None:
        raise NeedsLock()

    def get_hold(self, key: sql.Row) -> sql.Row | None:
        if key in self._holds:
            pending = self._holds[key]
            return None if pending is None else pending[4:6]
        return self._read("hold", sql.SELECT_HOLD, key)

    def put_hold(self, values: sql.Row) -> None:
        self._holds[values[:4]] = values

    def delete_hold(self, key: sql.Row) -> None:
        self._holds[key] = None

    def put_audit(self, entry: AuditEntry) -> None:
        self._audit.append(entry)  # a new row: nothing read, nothing to check at commit

    def dequeue(self, name: str) -> None:
        self._dequeued.append((name,))

    def enqueue(self, task: Task) -> None:
        self._tasks.append(sql.task_values(task))
        if self.earliest_eta is None or task.eta < self.earliest_eta:
            self.earliest_eta = task.eta

    def get_project(self, project: str) -> ProjectRow | None:
        if project in self._projects:
            pending = self._projects[project]
            return None if pending is None else pending[0]
        row = self._read("project", sql.SELECT_PROJECT, (project,))
        return None if row is None else sql.project_from_row(row)

    def put_project(self, row: ProjectRow) -> None:
        self._projects[row.id] = (row, sql.project_values(row))

    def delete_project(self, project: str) -> None:
        self._projects[project] = None

    def check_budget(self) -> None:
        """:raises CommitTooLarge: the writes would not fit one Datastore commit (sqlite_rows.check_budget)."""
        written: list[sql.Row] = [("job", *key) for key in self._jobs]
        written += [("project", key) for key in self._projects]
        written += [("invocation", *key) for key in self._invocations]
        written += [("progress", *key) for key in self._progress]
        written += [("audit", entry.project, entry.id) for entry in self._audit]
        sql.check_budget(written)

    # --- at commit, under the write lock ------------------------------------------------

    def check_and_write(self, tx: sql.SqliteTransaction) -> None:
        """Inside the real transaction `tx`: :raises Stale: if a row read has changed."""
        conn = tx.conn
        checks = {"job": sql.SELECT_JOB, "invocation": sql.SELECT_INVOCATION, "project": sql.SELECT_PROJECT,
                  "progress": sql.SELECT_PROGRESS, "hold": sql.SELECT_HOLD}
        for (kind, *key), seen in self._reads.items():
            if conn.execute(checks[kind], key).fetchone() != seen:
                raise Stale(f"{kind} {'/'.join(map(str, key))} changed")
        for job_key, job in self._jobs.items():
            if job is None:
                conn.execute(sql.DELETE_JOB, job_key)
            else:  # (what was read is what the row still holds: checked above)
                sql.write_job(conn, job[1], self._reads.get(("job", *job_key)))
        for project, pending in self._projects.items():
            if pending is None:
                conn.execute(sql.DELETE_PROJECT, (project,))
            else:
                conn.execute(sql.PUT_PROJECT, pending[1])
        if self._dequeued:
            conn.executemany(sql.DEQUEUE, self._dequeued)
        if self._tasks:
            conn.executemany(sql.ENQUEUE, self._tasks)
        if self._progress:
            conn.executemany(sql.PUT_PROGRESS, [(*key, sql.progress_text(value))
                                                for key, value in self._progress.items()])
        if self._audit:
            conn.executemany(sql.PUT_AUDIT, [sql.audit_values(entry) for entry in self._audit])
        if self._invocations:
            conn.executemany(sql.PUT_INVOCATION, [sql.invocation_values(r) for r in self._invocations.values()])
        for hold_key, hold in self._holds.items():
            if hold is None:
                conn.execute(sql.DELETE_HOLD, hold_key)
            else:
                conn.execute(sql.PUT_HOLD, hold)
        if self.earliest_eta is not None:
            tx.saw_eta(self.earliest_eta)  # so that the store tells the dispatcher
