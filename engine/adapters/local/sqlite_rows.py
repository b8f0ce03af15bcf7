"""The SQLite adapter's rows: SQL text, the codecs between rows and the port's types,
and the transaction object that reads and writes them.

A leaf of the adapter: the store (sqlite_store.py) and its commit strategies
(commits.py) builds on it, and it imports none of them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from engine.adapters.local.record_cache import RecordCache, compact
from engine.errors import CommitTooLarge
from engine.ports import AuditEntry, InvocationRow, JobSource, ProjectRow, StoredJob, Task
from engine.recording import notification_text, stored_notification
from statemachine.budget import COMMIT_ENTITY_LIMIT
from statemachine.durations import UTC

Row = tuple[Any, ...]  # one row as sqlite3 returns it, or the values of one to write

JOB_COLUMNS = "record, definition, source, config_error, deleted"  # what job_from_row reads
SELECT_JOB = f"SELECT {JOB_COLUMNS} FROM jobs WHERE project = ? AND job_id = ?"
PUT_JOB = (
    "INSERT OR REPLACE INTO jobs (project, job_id, record, definition, source, config_error,"
    " state, watchdog_at, deleted) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# A step changes the record alone (and what derives from it): updated in place, the
# definition's text is not written again, nor the row moved and re-indexed as a REPLACE does.
UPDATE_JOB_RECORD = "UPDATE jobs SET record = ?, state = ?, watchdog_at = ? WHERE project = ? AND job_id = ?"
DELETE_JOB = "DELETE FROM jobs WHERE project = ? AND job_id = ?"
SELECT_INVOCATION = "SELECT * FROM invocations WHERE project = ? AND job_id = ? AND id = ?"
PUT_INVOCATION = (
    "INSERT OR REPLACE INTO invocations (project, job_id, id, status, reason, scheduled_time,"
    " trigger, created_time, started_time, finished_time, attempt, event_count, log, notification)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
ENQUEUE = "INSERT OR IGNORE INTO tasks (name, kind, payload, eta, queue) VALUES (?, ?, ?, ?, ?)"
# A task no dispatcher holds (one that holds it finds it stale when it runs it).
DEQUEUE = "DELETE FROM tasks WHERE name = ? AND lease_until = 0"
SELECT_PROJECT = "SELECT * FROM projects WHERE id = ?"
PUT_PROJECT = (
    "INSERT OR REPLACE INTO projects (id, config_hash, config_error, job_errors, settings)"
    " VALUES (?, ?, ?, ?, ?)"
)
DELETE_PROJECT = "DELETE FROM projects WHERE id = ?"
SELECT_PROGRESS = "SELECT value FROM progress WHERE project = ? AND job_id = ? AND invocation_id = ? AND part = ?"
LIST_PROGRESS = "SELECT part, value FROM progress WHERE project = ? AND job_id = ? AND invocation_id = ?"
PUT_PROGRESS = "INSERT OR REPLACE INTO progress (project, job_id, invocation_id, part, value) VALUES (?, ?, ?, ?, ?)"
INBOX_KEY = "project = ? AND job_id = ? AND key = ?"
SELECT_INBOX = f"SELECT value FROM inbox WHERE {INBOX_KEY}"
LIST_INBOX = "SELECT key, value FROM inbox WHERE project = ? AND job_id = ? ORDER BY key LIMIT ?"
PUT_INBOX = "INSERT OR REPLACE INTO inbox (project, job_id, key, value) VALUES (?, ?, ?, ?)"
DELETE_INBOX = f"DELETE FROM inbox WHERE {INBOX_KEY}"
# Which process holds each event's attempt in flight (liveness.py), keyed by
# (project, job_id, invocation_id, event).
HOLD_KEY = "project = ? AND job_id = ? AND invocation_id = ? AND event = ?"
SELECT_HOLD = f"SELECT attempt, holder FROM held_attempts WHERE {HOLD_KEY}"
PUT_HOLD = (
    "INSERT OR REPLACE INTO held_attempts (project, job_id, invocation_id, event, attempt, holder, since)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)
DELETE_HOLD = f"DELETE FROM held_attempts WHERE {HOLD_KEY}"
PUT_AUDIT = "INSERT INTO audit (project, id, job_id, time, actor, action, detail) VALUES (?, ?, ?, ?, ?, ?, ?)"


def to_seconds(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def from_seconds(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def instant(value: float) -> datetime:
    """A NOT NULL time column as a datetime."""
    return datetime.fromtimestamp(value, UTC)


class SqliteFile(Protocol):
    """The store as its commit strategy sees it (commits.py)."""

    records: RecordCache

    def connection(self) -> sqlite3.Connection:
        """This thread's connection, for reads outside a write transaction."""

    def transaction(self) -> AbstractContextManager[SqliteTransaction]:
        """A write transaction under the write lock (`BEGIN IMMEDIATE`), committed
        when the block ends; :raises StoreError: SQLite failed, nothing committed."""


class SqliteTransaction:
    """One transaction's reads and writes, on a connection inside `BEGIN IMMEDIATE`.

    Invocation rows are written once, at commit: an outcome transaction creates,
    notes and finishes the same invocation, and writing (and re-reading) the row
    each time cost more than the rest of the transaction. Reads in the transaction
    see its own pending rows, so nothing but the number of writes changes.

    `conn` is open to the store and the queue for SQL of their own; the engine's
    bodies use only the port's methods.
    """

    def __init__(self, conn: sqlite3.Connection, records: RecordCache):
        self.conn = conn
        self.records = records
        self.earliest_eta: datetime | None = None
        self._pending: dict[tuple[str, str, str], InvocationRow] = {}
        self._written: set[Row] = set()  # (kind, key...) of the other rows written, for the budget
        self._jobs_read: dict[tuple[str, str], Row] = {}  # job rows as read or written here

    def flush(self) -> None:
        """Write the pending invocation rows (the store calls it just before COMMIT).

        :raises CommitTooLarge: the transaction wrote more rows than one Datastore
            commit takes; it is rolled back (see `check_budget`)."""
        check_budget(self._written | {("invocation", *key) for key in self._pending})
        pending, self._pending = self._pending, {}
        if pending:
            self.conn.executemany(PUT_INVOCATION, [invocation_values(row) for row in pending.values()])

    def get_job(self, project: str, job_id: str) -> StoredJob | None:
        row = self.conn.execute(SELECT_JOB, (project, job_id)).fetchone()
        if row is None:
            return None
        self._jobs_read[(project, job_id)] = row
        return job_from_row(row, self.records)

    def put_job(self, job: StoredJob) -> None:
        key = (job.record.project, job.record.job_id)
        values = job_values(job, self.records)
        write_job(self.conn, values, self._jobs_read.get(key))
        self._jobs_read[key] = stored_columns(values)  # what it holds now
        self._written.add(("job", *key))

    def delete_job(self, project: str, job_id: str) -> None:
        self.conn.execute(DELETE_JOB, (project, job_id))
        self._jobs_read.pop((project, job_id), None)
        self._written.add(("job", project, job_id))

    def get_invocation(self, project: str, job_id: str, invocation_id: str) -> InvocationRow | None:
        pending = self._pending.get((project, job_id, invocation_id))
        if pending is not None:
            return copy_invocation(pending)  # the caller may change it; only a put keeps that
        row = self.conn.execute(SELECT_INVOCATION, (project, job_id, invocation_id)).fetchone()
        return None if row is None else invocation_from_row(row)

    def put_invocation(self, row: InvocationRow) -> None:
        self._pending[(row.project, row.job_id, row.id)] = copy_invocation(row)

    def existing_invocations(self, project: str, job_id: str, invocation_ids: list[str]) -> set[str]:
        found = {i for i in invocation_ids if (project, job_id, i) in self._pending}
        return found | select_existing(self.conn, project, job_id, [i for i in invocation_ids if i not in found])

    def get_progress(self, project: str, job_id: str, invocation_id: str, part: str) -> dict[str, Any] | None:
        row = self.conn.execute(SELECT_PROGRESS, (project, job_id, invocation_id, part)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def put_progress(self, project: str, job_id: str, invocation_id: str, part: str, value: dict[str, Any]) -> None:
        self.conn.execute(PUT_PROGRESS, (project, job_id, invocation_id, part, progress_text(value)))
        self._written.add(("progress", project, job_id, invocation_id, part))

    def list_progress(self, project: str, job_id: str, invocation_id: str) -> dict[str, dict[str, Any]]:
        rows = self.conn.execute(LIST_PROGRESS, (project, job_id, invocation_id))
        return {part: json.loads(value) for part, value in rows}

    def get_inbox(self, project: str, job_id: str, key: str) -> dict[str, Any] | None:
        row = self.conn.execute(SELECT_INBOX, (project, job_id, key)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def put_inbox(self, project: str, job_id: str, key: str, value: dict[str, Any]) -> None:
        self.conn.execute(PUT_INBOX, (project, job_id, key, progress_text(value)))
        self._written.add(("inbox", project, job_id, key))

    def list_inbox(self, project: str, job_id: str, limit: int) -> dict[str, dict[str, Any]]:
        return {key: json.loads(value) for key, value in self.conn.execute(LIST_INBOX, (project, job_id, limit))}

    def delete_inbox(self, project: str, job_id: str, key: str) -> None:
        self.conn.execute(DELETE_INBOX, (project, job_id, key))
        self._written.add(("inbox", project, job_id, key))

    def get_hold(self, key: Row) -> Row | None:
        """(attempt, holder) of the event's attempt in flight (liveness.py); None if none is held."""
        row: Row | None = self.conn.execute(SELECT_HOLD, key).fetchone()
        return row

    def put_hold(self, values: Row) -> None:
        self.conn.execute(PUT_HOLD, values)

    def delete_hold(self, key: Row) -> None:
        self.conn.execute(DELETE_HOLD, key)

    def put_audit(self, entry: AuditEntry) -> None:
        self.conn.execute(PUT_AUDIT, audit_values(entry))
        self._written.add(("audit", entry.project, entry.id))

    def enqueue(self, task: Task) -> None:
        # A pending task of the same name makes this a no-op: enqueueing is idempotent.
        self.conn.execute(ENQUEUE, task_values(task))
        self.saw_eta(task.eta)

    def dequeue(self, name: str) -> None:
        """Take a queued task off the queue, unless a dispatcher has leased it."""
        self.conn.execute(DEQUEUE, (name,))

    def saw_eta(self, eta: datetime) -> None:
        if self.earliest_eta is None or eta < self.earliest_eta:
            self.earliest_eta = eta

    def get_project(self, project: str) -> ProjectRow | None:
        row = self.conn.execute(SELECT_PROJECT, (project,)).fetchone()
        return None if row is None else project_from_row(row)

    def put_project(self, row: ProjectRow) -> None:
        self.conn.execute(PUT_PROJECT, project_values(row))
        self._written.add(("project", row.id))

    def delete_project(self, project: str) -> None:
        self.conn.execute(DELETE_PROJECT, (project,))
        self._written.add(("project", project))


def check_budget(written: Collection[Row]) -> None:
    """The embedded store holds every transaction to the budget of one Datastore
    commit (statemachine/budget.py), which SQLite itself does not need: so that a
    step that outgrew it fails the embedded backend's tests as it would fail on
    legacy Datastore, rather than only there. `written`: (kind, key...) of each job,
    invocation, progress and project row written or deleted (not the queue's tasks
    nor the attempt holds, which are no Datastore entities).

    :raises CommitTooLarge: more rows than one commit takes.
    """
    if len(written) > COMMIT_ENTITY_LIMIT:
        jobs = dict.fromkeys(f"{key[1]}/{key[2]}" for key in written if key[0] != "project")
        raise CommitTooLarge("sqlite", list(jobs), len(written))


# Ids per query: well under SQLite's limit of bound parameters (32,766; 999 before 3.32).
IDS_PER_QUERY = 500


def select_existing(conn: sqlite3.Connection, project: str, job_id: str, invocation_ids: list[str]) -> set[str]:
    """Which of the invocations have a row, in one query per IDS_PER_QUERY ids."""
    found: set[str] = set()
    for start in range(0, len(invocation_ids), IDS_PER_QUERY):
        batch = invocation_ids[start:start + IDS_PER_QUERY]
        marks = ", ".join("?" * len(batch))
        rows = conn.execute(f"SELECT id FROM invocations WHERE project = ? AND job_id = ? AND id IN ({marks})",
                            (project, job_id, *batch))
        found.update(row[0] for row in rows)
    return found


def job_values(job: StoredJob, records: RecordCache) -> Row:
    record = job.record
    text = records.record_text(record)
    records.wrote(record, text)  # the next read of this job finds it decoded
    return (
        record.project,
        record.job_id,
        text,
        records.definition_text(job.definition),
        job.source,
        job.config_error,
        record.state.value,
        to_seconds(record.watchdog_at),
        int(job.deleted),
    )


def stored_columns(values: Row) -> Row:
    """Of a job's row (`job_values`), what a read of JOB_COLUMNS gives back."""
    return values[2], values[3], values[4], values[5], values[8]


def write_job(conn: sqlite3.Connection, values: Row, read: Row | None) -> None:
    """Write a job's row (`job_values`); `read`: the row as this transaction read it
    (JOB_COLUMNS), unchanged since. When only the record changed, it is updated in place."""
    if read is not None and read[1:] == stored_columns(values)[1:]:
        conn.execute(UPDATE_JOB_RECORD, (values[2], values[6], values[7], values[0], values[1]))
    else:
        conn.execute(PUT_JOB, values)


def job_from_row(row: Row, records: RecordCache) -> StoredJob:
    text, definition, source, config_error, deleted = row
    return StoredJob(records.decode(text), records.decode_definition(definition), JobSource(source),
                     config_error, bool(deleted))


def progress_text(value: dict[str, Any]) -> str:
    return compact(value)


def task_values(task: Task) -> Row:
    payload = compact(task.payload)
    return (task.name, task.kind, payload, task.eta.timestamp(), task.queue)


def audit_values(entry: AuditEntry) -> Row:
    return (entry.project, entry.id, entry.job_id, entry.time.timestamp(), entry.actor, entry.action,
            compact(entry.detail))


def audit_from_row(row: Row) -> AuditEntry:
    project, entry_id, job_id, time, actor, action, detail = row
    return AuditEntry(project, job_id, entry_id, instant(time), actor, action, json.loads(detail))


def project_values(row: ProjectRow) -> Row:
    return (row.id, row.config_hash, row.config_error, json.dumps(row.job_errors), json.dumps(row.settings))


def project_from_row(row: Row) -> ProjectRow:
    project, config_hash, config_error, job_errors, settings = row
    return ProjectRow(project, config_hash, config_error, json.loads(job_errors), json.loads(settings))


def copy_invocation(row: InvocationRow) -> InvocationRow:
    # Entries are never changed, only added or cut: a new list of the same entries.
    # Copied field by field (no __init__ to run again): a step copies several rows.
    copy = object.__new__(InvocationRow)
    copy.__dict__.update(row.__dict__)
    copy.log = list(row.log)
    return copy


def invocation_values(row: InvocationRow) -> Row:
    return (
        row.project, row.job_id, row.id, row.status, row.reason,
        row.scheduled_time.timestamp(), row.trigger, to_seconds(row.created_time),
        to_seconds(row.started_time), to_seconds(row.finished_time), row.attempt,
        row.event_count, compact(row.log), notification_text(row.notification),
    )


def invocation_from_row(row: Row) -> InvocationRow:
    """A row of `SELECT *`, or of a summary read that leaves out the log ('[]') and
    the notification (the last column)."""
    (project, job_id, invocation_id, status, reason, scheduled, trigger, created, started,
     finished, attempt, event_count, log, *notification) = row
    entries = json.loads(log)
    return InvocationRow(
        project=project, job_id=job_id, id=invocation_id, status=status, reason=reason,
        scheduled_time=instant(scheduled), trigger=trigger, created_time=from_seconds(created),
        started_time=from_seconds(started), finished_time=from_seconds(finished),
        attempt=attempt, event_count=event_count, log=entries,
        notification=stored_notification(notification[0] if notification else None, entries),
    )
