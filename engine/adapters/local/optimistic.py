"""Optimistic transactions: the engine's work runs without the write lock.

An engine transaction decodes a job, steps its machine and encodes it again: about
0.2 ms of Python, during which every other writer (in every process on the
database) used to wait. Here the body runs on reads outside any write transaction,
and its writes are kept in memory. Then, holding the write lock, one short
transaction checks that every row the body read is still exactly as it read it,
and writes. If one changed, nothing is written and the body runs again on fresh
reads: the engine's bodies may run more than once (the Datastore store retries
them too), and only the run that commits counts.

A body that reaches for the connection itself (`tx.conn`) cannot be replayed like
this; it runs again the classic way, inside `BEGIN IMMEDIATE`.
"""

from __future__ import annotations

from engine.adapters.local import sqlite_rows as sql
from engine.ports import ProjectRow, StoredJob, Task


class NeedsLock(Exception):
    """The body used the connection directly: run it under the write lock instead."""


class Stale(Exception):
    """A row the body read changed before its writes could commit."""


class BufferedTransaction(sql.SqliteTransaction):
    """The body's view: committed rows (or its own writes), writes kept for commit()."""

    def __init__(self, reader):
        super().__init__(reader)
        self._reads: dict[tuple, tuple | None] = {}  # (kind, key...) -> the row as first read
        self._jobs: dict[tuple[str, str], tuple[StoredJob, tuple] | None] = {}  # None: deleted
        self._projects: dict[str, tuple[ProjectRow, tuple] | None] = {}
        self._tasks: list[tuple] = []

    @property
    def conn(self):
        raise NeedsLock()

    @conn.setter
    def conn(self, reader) -> None:
        self._reader = reader

    def _read(self, kind: str, sql_text: str, key: tuple):
        row = self._reader.execute(sql_text, key).fetchone()
        self._reads.setdefault((kind, *key), row)
        return row

    def get_job(self, project: str, job_id: str) -> StoredJob | None:
        if (project, job_id) in self._jobs:
            pending = self._jobs[(project, job_id)]
            return None if pending is None else pending[0]
        row = self._read("job", sql.SELECT_JOB, (project, job_id))
        return None if row is None else sql.job_from_row(row)

    def put_job(self, job: StoredJob) -> None:
        # Encoded now, outside the lock; StoredJob and its record are immutable.
        self._jobs[(job.record.project, job.record.job_id)] = (job, sql.job_values(job))

    def delete_job(self, project: str, job_id: str) -> None:
        self._jobs[(project, job_id)] = None

    def get_invocation(self, project: str, job_id: str, invocation_id: str):
        pending = self._pending.get((project, job_id, invocation_id))
        if pending is not None:
            return sql.copy_invocation(pending)
        row = self._read("invocation", sql.SELECT_INVOCATION, (project, job_id, invocation_id))
        return None if row is None else sql.invocation_from_row(row)

    def enqueue(self, task: Task) -> None:
        self._tasks.append(sql.task_values(task))
        self.saw_eta(task.eta)

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

    # --- at commit, under the write lock ------------------------------------------------

    def check_and_write(self, tx: sql.SqliteTransaction) -> None:
        """Inside the real transaction `tx`: :raises Stale: if a row read has changed."""
        conn = tx.conn
        checks = {"job": sql.SELECT_JOB, "invocation": sql.SELECT_INVOCATION, "project": sql.SELECT_PROJECT}
        for (kind, *key), seen in self._reads.items():
            if conn.execute(checks[kind], key).fetchone() != seen:
                raise Stale(f"{kind} {'/'.join(key)} changed")
        for key, pending in self._jobs.items():
            if pending is None:
                conn.execute(sql.DELETE_JOB, key)
            else:
                conn.execute(sql.PUT_JOB, pending[1])
        for project, pending in self._projects.items():
            if pending is None:
                conn.execute(sql.DELETE_PROJECT, (project,))
            else:
                conn.execute(sql.PUT_PROJECT, pending[1])
        if self._tasks:
            conn.executemany(sql.ENQUEUE, self._tasks)
        if self._pending:
            conn.executemany(sql.PUT_INVOCATION, [sql.invocation_values(r) for r in self._pending.values()])
        if self.earliest_eta is not None:
            tx.saw_eta(self.earliest_eta)  # so that the store tells its listeners
