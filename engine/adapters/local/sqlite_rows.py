"""The SQLite adapter's rows: SQL text, the codecs between rows and the port's types,
and the transaction object that reads and writes them.

A leaf of the adapter: the store (sqlite_store.py) and its commit strategies
(commits.py, optimistic.py, group_commit.py) build on it, and it imports none of them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from engine.adapters.local.record_text import policy_text, record_text
from engine.errors import CommitTooLarge
from engine.ports import AuditEntry, InvocationRow, JobSource, ProjectRow, StoredJob, Task
from engine.recording import notification_text, stored_notification
from statemachine.budget import COMMIT_ENTITY_LIMIT
from statemachine.definition import JobDefinition
from statemachine.durations import UTC
from statemachine.policy import JobPolicy
from statemachine.record import JobRecord, record_from_dict, record_to_dict

Row = tuple[Any, ...]  # one row as sqlite3 returns it, or the values of one to write

JOB_COLUMNS = "record, definition, source, config_error, deleted"  # what job_from_row reads
SELECT_JOB = f"SELECT {JOB_COLUMNS} FROM jobs WHERE project = ? AND job_id = ?"
PUT_JOB = (
    "INSERT OR REPLACE INTO jobs (project, job_id, record, definition, source, config_error,"
    " state, watchdog_at, deleted) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
DELETE_JOB = "DELETE FROM jobs WHERE project = ? AND job_id = ?"
SELECT_INVOCATION = "SELECT * FROM invocations WHERE project = ? AND job_id = ? AND id = ?"
PUT_INVOCATION = (
    "INSERT OR REPLACE INTO invocations (project, job_id, id, status, reason, scheduled_time,"
    " trigger, created_time, started_time, finished_time, attempt, event_count, log, notification)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
ENQUEUE = "INSERT OR IGNORE INTO tasks (name, kind, payload, eta, queue) VALUES (?, ?, ?, ?, ?)"
SELECT_PROJECT = "SELECT * FROM projects WHERE id = ?"
PUT_PROJECT = (
    "INSERT OR REPLACE INTO projects (id, config_hash, config_error, job_errors, settings)"
    " VALUES (?, ?, ?, ?, ?)"
)
DELETE_PROJECT = "DELETE FROM projects WHERE id = ?"
SELECT_PROGRESS = "SELECT value FROM progress WHERE project = ? AND job_id = ? AND invocation_id = ? AND part = ?"
LIST_PROGRESS = "SELECT part, value FROM progress WHERE project = ? AND job_id = ? AND invocation_id = ?"
PUT_PROGRESS = "INSERT OR REPLACE INTO progress (project, job_id, invocation_id, part, value) VALUES (?, ?, ?, ?, ?)"
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

# json.dumps builds an encoder per call when given options; the same text from one encoder.
_compact = json.JSONEncoder(separators=(",", ":")).encode


def to_seconds(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def from_seconds(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def instant(value: float) -> datetime:
    """A NOT NULL time column as a datetime."""
    return datetime.fromtimestamp(value, UTC)


class RecordCache:
    """Decoded job records and definitions by their stored text, for one store and its
    transactions.

    A delivery reads its job twice (tick, outcome) and the second read finds the text
    this store just wrote; JobRecord and JobDefinition are frozen, so the cached ones
    can be handed out as they are (a definition's target specs are dicts shared by
    every reader: nothing may change one in place; rendering makes new ones). A
    definition read and written back unchanged is not encoded again either.
    """

    LIMIT = 4_096  # a few per task in flight; a miss only costs a decode

    def __init__(self) -> None:
        self._records: dict[str, JobRecord] = {}
        self._definitions: dict[str, JobDefinition] = {}
        # id of a definition handed out -> it and its text (it is kept, so its id stays its own)
        self._definition_texts: dict[int, tuple[JobDefinition, str]] = {}
        # id of a policy -> it and its JSON: a job's policy object lives on through
        # every step of its chain, and is most of the record's text.
        self._policy_texts: dict[int, tuple[JobPolicy, str]] = {}

    def remember(self, text: str, record: JobRecord) -> None:
        if len(self._records) >= self.LIMIT:
            self._records.clear()  # a whole generation at once: cheaper than an LRU, as good here
        self._records[text] = record

    def decode(self, text: str) -> JobRecord:
        record = self._records.get(text)
        if record is None:
            record = record_from_dict(json.loads(text))
            self.remember(text, record)
        return record

    def decode_definition(self, text: str) -> JobDefinition:
        definition = self._definitions.get(text)
        if definition is None:
            definition = JobDefinition.from_dict(json.loads(text))
            self._remember_definition(text, definition)
        return definition

    def definition_text(self, definition: JobDefinition) -> str:
        known = self._definition_texts.get(id(definition))
        if known is not None and known[0] is definition:
            return known[1]
        text = definition.canonical_json  # encoded once already for its revision
        if not text.isascii():  # written as before: non-ASCII escaped, a lone surrogate too
            text = _compact(definition.to_dict())
        self._remember_definition(text, definition)
        return text

    def record_text(self, record: JobRecord) -> str:
        """The record's stored text: `json.dumps(record_to_dict(record))` with compact
        separators, its policy's part encoded once per policy object."""
        policy = record.policy
        if policy is None:
            return record_text(record, "null") or _compact(record_to_dict(record))
        known = self._policy_texts.get(id(policy))
        if known is None or known[0] is not policy:
            if len(self._policy_texts) >= self.LIMIT:
                self._policy_texts.clear()
            known = self._policy_texts[id(policy)] = (policy, policy_text(policy))
        text = record_text(record, known[1])  # spelled directly (record_text.py)
        if text is not None:
            return text
        text = _compact(record_to_dict(record, with_policy=False))
        # The first `"policy":null` is the key's: only "version", "project", "job_id" and
        # "state" come before it, and a quote inside an encoded string is escaped.
        return text.replace('"policy":null', '"policy":' + known[1], 1)

    def _remember_definition(self, text: str, definition: JobDefinition) -> None:
        # Both maps bound: one definition text may be written from many objects.
        if len(self._definitions) >= self.LIMIT or len(self._definition_texts) >= self.LIMIT:
            self._definitions.clear()
            self._definition_texts.clear()
        self._definitions[text] = definition
        self._definition_texts[id(definition)] = (definition, text)


class SqliteFile(Protocol):
    """The store as its commit strategies see it (commits.py, group_commit.py)."""

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
        return None if row is None else job_from_row(row, self.records)

    def put_job(self, job: StoredJob) -> None:
        self.conn.execute(PUT_JOB, job_values(job, self.records))
        self._written.add(("job", job.record.project, job.record.job_id))

    def delete_job(self, project: str, job_id: str) -> None:
        self.conn.execute(DELETE_JOB, (project, job_id))
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
_IDS_PER_QUERY = 500


def select_existing(conn: sqlite3.Connection, project: str, job_id: str, invocation_ids: list[str]) -> set[str]:
    """Which of the invocations have a row, in one query per _IDS_PER_QUERY ids."""
    found: set[str] = set()
    for start in range(0, len(invocation_ids), _IDS_PER_QUERY):
        batch = invocation_ids[start:start + _IDS_PER_QUERY]
        marks = ", ".join("?" * len(batch))
        rows = conn.execute(f"SELECT id FROM invocations WHERE project = ? AND job_id = ? AND id IN ({marks})",
                            (project, job_id, *batch))
        found.update(row[0] for row in rows)
    return found


def job_values(job: StoredJob, records: RecordCache) -> Row:
    record = job.record
    text = records.record_text(record)
    records.remember(text, record)  # the next read of this job finds it decoded
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


def job_from_row(row: Row, records: RecordCache) -> StoredJob:
    text, definition, source, config_error, deleted = row
    return StoredJob(records.decode(text), records.decode_definition(definition), JobSource(source),
                     config_error, bool(deleted))


def progress_text(value: dict[str, Any]) -> str:
    return _compact(value)


def task_values(task: Task) -> Row:
    payload = _compact(task.payload)
    return (task.name, task.kind, payload, task.eta.timestamp(), task.queue)


def audit_values(entry: AuditEntry) -> Row:
    return (entry.project, entry.id, entry.job_id, entry.time.timestamp(), entry.actor, entry.action,
            _compact(entry.detail))


def audit_from_row(row: Row) -> AuditEntry:
    project, entry_id, job_id, time, actor, action, detail = row
    return AuditEntry(project, job_id, entry_id, instant(time), actor, action, json.loads(detail))


def project_values(row: ProjectRow) -> Row:
    return (row.id, row.config_hash, row.config_error, json.dumps(row.job_errors), json.dumps(row.settings))


def project_from_row(row: Row) -> ProjectRow:
    project, config_hash, config_error, job_errors, settings = row
    return ProjectRow(project, config_hash, config_error, json.loads(job_errors), json.loads(settings))


def copy_invocation(row: InvocationRow) -> InvocationRow:
    return replace(row, log=list(row.log))  # entries are never changed, only added or cut


def invocation_values(row: InvocationRow) -> Row:
    return (
        row.project, row.job_id, row.id, row.status, row.reason,
        row.scheduled_time.timestamp(), row.trigger, to_seconds(row.created_time),
        to_seconds(row.started_time), to_seconds(row.finished_time), row.attempt,
        row.event_count, _compact(row.log), notification_text(row.notification),
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
