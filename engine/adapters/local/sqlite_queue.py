"""The embedded task queue: rows of the `tasks` table, leased by dispatchers.

A lease is a time until which a task belongs to the dispatcher that took it;
a dispatcher that dies simply stops renewing, and the task becomes due again
when the lease runs out. Leasing is one `BEGIN IMMEDIATE` transaction, so two
processes on one database never take the same task.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from engine.adapters.local.sqlite_store import SqliteJobStore, from_seconds
from engine.ports import Task


@dataclass(frozen=True)
class LeasedTask:
    id: int
    task: Task
    attempts: int  # deliveries of this task so far, this one included


class SqliteTaskQueue:
    def __init__(self, store: SqliteJobStore):
        self.store = store

    def lease_due(
        self, now: datetime, limit: int, lease: timedelta, done: list[int] | None = None
    ) -> list[LeasedTask]:
        """Lease up to `limit` due tasks; `done` tasks are deleted in the same commit."""
        if limit <= 0 and not done:
            return []
        with self.store.transaction() as tx:
            if done:
                tx.conn.executemany("DELETE FROM tasks WHERE id = ?", [(i,) for i in done])
            if limit <= 0:
                return []
            rows = tx.conn.execute(
                "UPDATE tasks SET lease_until = ?, attempts = attempts + 1 WHERE id IN ("
                " SELECT id FROM tasks WHERE eta <= ? AND lease_until <= ? ORDER BY eta LIMIT ?)"
                " RETURNING id, name, kind, payload, eta, attempts",
                ((now + lease).timestamp(), now.timestamp(), now.timestamp(), limit),
            ).fetchall()
        rows.sort(key=lambda row: row[4])
        return [
            LeasedTask(task_id, Task(name, kind, json.loads(payload), from_seconds(eta)), attempts)
            for task_id, name, kind, payload, eta, attempts in rows
        ]

    def complete(self, task_ids: list[int]) -> None:
        if not task_ids:
            return
        with self.store.transaction() as tx:
            tx.conn.executemany("DELETE FROM tasks WHERE id = ?", [(i,) for i in task_ids])

    def retry(self, task_id: int, eta: datetime) -> None:
        with self.store.transaction() as tx:
            tx.conn.execute("UPDATE tasks SET eta = ?, lease_until = 0 WHERE id = ?", (eta.timestamp(), task_id))

    def renew(self, task_ids: list[int], until: datetime) -> None:
        """Keep leases of tasks still being worked on."""
        if not task_ids:
            return
        with self.store.transaction() as tx:
            tx.conn.executemany(
                "UPDATE tasks SET lease_until = ? WHERE id = ?", [(until.timestamp(), i) for i in task_ids]
            )

    def next_wake(self, now: datetime) -> datetime | None:
        """When the earliest task becomes takeable: the earliest ETA of an unleased
        task, or the earliest lease to run out (both read from an index)."""
        conn = self.store.connection()
        free = conn.execute(
            "SELECT eta FROM tasks WHERE lease_until <= ? ORDER BY eta LIMIT 1", (now.timestamp(),)
        ).fetchone()
        leased = conn.execute("SELECT min(lease_until) FROM tasks WHERE lease_until > 0").fetchone()
        candidates = [row[0] for row in (free, leased) if row and row[0] is not None]
        return from_seconds(min(candidates)) if candidates else None

    def pending(self) -> int:
        return self.store.connection().execute("SELECT count(*) FROM tasks").fetchone()[0]
