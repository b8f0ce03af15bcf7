"""One unit of work on the in-memory store: reads see the committed rows and this
transaction's own writes; writes and tasks are buffered until the store commits.

It runs under the tables' lock (store.py), so what it read cannot change before it
commits: no commit-time conflict check is needed, and a body never runs twice, as
with SQLite's `BEGIN IMMEDIATE`.
"""

from __future__ import annotations

from typing import Any

from engine.adapters.memory.tables import (
    MemoryTables,
    Writes,
    copy_invocation,
    copy_job,
    copy_project,
    copy_value,
)
from engine.ports import AuditEntry, InvocationRow, ProjectRow, StoredJob, Task


class MemoryTransaction:
    """The Transaction port (engine/ports.py) over MemoryTables, and `dequeue`, which
    the embedded store has too: the queue is the store's own, so a cancelled tick can
    be taken off it in the same commit."""

    def __init__(self, tables: MemoryTables):
        self.tables = tables
        self.writes = Writes()

    def get_job(self, project: str, job_id: str) -> StoredJob | None:
        key = (project, job_id)
        job = self.writes.jobs[key] if key in self.writes.jobs else self.tables.jobs.get(key)
        return None if job is None else copy_job(job)

    def put_job(self, job: StoredJob) -> None:
        self.writes.jobs[(job.record.project, job.record.job_id)] = copy_job(job)

    def delete_job(self, project: str, job_id: str) -> None:
        self.writes.jobs[(project, job_id)] = None

    def get_invocation(self, project: str, job_id: str, invocation_id: str) -> InvocationRow | None:
        key = (project, job_id, invocation_id)
        mine = self.writes.invocations.get(key)
        return copy_invocation(mine) if mine is not None else self.tables.invocation(key)

    def put_invocation(self, row: InvocationRow) -> None:
        self.writes.invocations[(row.project, row.job_id, row.id)] = copy_invocation(row)

    def existing_invocations(self, project: str, job_id: str, invocation_ids: list[str]) -> set[str]:
        stored = self.tables.invocations.get((project, job_id), {})
        return {invocation_id for invocation_id in invocation_ids
                if invocation_id in stored or (project, job_id, invocation_id) in self.writes.invocations}

    def get_progress(self, project: str, job_id: str, invocation_id: str, part: str) -> dict[str, Any] | None:
        key = (project, job_id, invocation_id)
        value = self.writes.progress.get(key, {}).get(part)
        if value is None:
            value = self.tables.progress.get(key, {}).get(part)
        return None if value is None else copy_value(value)

    def put_progress(self, project: str, job_id: str, invocation_id: str, part: str, value: dict[str, Any]) -> None:
        self.writes.progress.setdefault((project, job_id, invocation_id), {})[part] = copy_value(value)

    def list_progress(self, project: str, job_id: str, invocation_id: str) -> dict[str, dict[str, Any]]:
        key = (project, job_id, invocation_id)
        parts = {**self.tables.progress.get(key, {}), **self.writes.progress.get(key, {})}
        return {part: copy_value(value) for part, value in parts.items()}

    def get_inbox(self, project: str, job_id: str, key: str) -> dict[str, Any] | None:
        row_key = (project, job_id, key)
        value = self.writes.inbox[row_key] if row_key in self.writes.inbox else \
            self.tables.inbox.get((project, job_id), {}).get(key)
        return None if value is None else copy_value(value)

    def put_inbox(self, project: str, job_id: str, key: str, value: dict[str, Any]) -> None:
        self.writes.inbox[(project, job_id, key)] = copy_value(value)

    def list_inbox(self, project: str, job_id: str, limit: int) -> dict[str, dict[str, Any]]:
        rows: dict[str, dict[str, Any] | None] = dict(self.tables.inbox.get((project, job_id), {}))
        for (row_project, row_job, key), value in self.writes.inbox.items():
            if (row_project, row_job) == (project, job_id):
                rows[key] = value  # None: deleted in this transaction
        pending = [(key, value) for key, value in sorted(rows.items()) if value is not None]
        return {key: copy_value(value) for key, value in pending[:limit]}

    def delete_inbox(self, project: str, job_id: str, key: str) -> None:
        self.writes.inbox[(project, job_id, key)] = None

    def put_audit(self, entry: AuditEntry) -> None:
        self.writes.audit[(entry.project, entry.id)] = entry

    def enqueue(self, task: Task) -> None:
        self.writes.queue_changes.append(task)

    def dequeue(self, name: str) -> None:
        """Take a queued task off the queue with the commit, unless a dispatcher holds it."""
        self.writes.queue_changes.append(name)

    def get_project(self, project: str) -> ProjectRow | None:
        row = self.writes.projects[project] if project in self.writes.projects else self.tables.projects.get(project)
        return None if row is None else copy_project(row)

    def put_project(self, row: ProjectRow) -> None:
        self.writes.projects[row.id] = copy_project(row)

    def delete_project(self, project: str) -> None:
        self.writes.projects[project] = None
