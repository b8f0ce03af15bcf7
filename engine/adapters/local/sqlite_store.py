"""SqliteJobStore: jobs, invocations and projects in one SQLite file (WAL).

Each thread has its own connection. A transaction takes the write lock (a
thread lock and an flock next to the database), then `BEGIN IMMEDIATE`, so
writers are serialized across threads and processes and a transaction never
loses a race at commit; the queue's enqueue is a row in the same file, which
makes it part of the same commit.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator

from engine.adapters.local.schema import create_private, migrate
from engine.adapters.local.write_lock import WriteLock
from engine.ports import InvocationRow, ProjectRow, StoredJob, StoreError, Task
from statemachine.durations import UTC
from statemachine.record import record_from_dict, record_to_dict

TERMINAL = ("SUCCEEDED", "FAILED", "SKIPPED", "ABORTED")
OPTIMISTIC_TRIES = 3  # lost races before a transaction body runs under the write lock

SELECT_JOB = "SELECT record, definition, source, config_error FROM jobs WHERE project = ? AND job_id = ?"
PUT_JOB = (
    "INSERT OR REPLACE INTO jobs (project, job_id, record, definition, source, config_error,"
    " state, watchdog_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
DELETE_JOB = "DELETE FROM jobs WHERE project = ? AND job_id = ?"
SELECT_INVOCATION = "SELECT * FROM invocations WHERE project = ? AND job_id = ? AND id = ?"
PUT_INVOCATION = (
    "INSERT OR REPLACE INTO invocations (project, job_id, id, status, reason, scheduled_time,"
    " trigger, created_time, started_time, finished_time, attempt, event_count, log)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
ENQUEUE = "INSERT OR IGNORE INTO tasks (name, kind, payload, eta, queue) VALUES (?, ?, ?, ?, ?)"
SELECT_PROJECT = "SELECT * FROM projects WHERE id = ?"
PUT_PROJECT = (
    "INSERT OR REPLACE INTO projects (id, config_hash, config_error, job_errors, settings)"
    " VALUES (?, ?, ?, ?, ?)"
)
DELETE_PROJECT = "DELETE FROM projects WHERE id = ?"


def to_seconds(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def from_seconds(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


class SqliteJobStore:
    def __init__(self, path: str | Path, optimistic: bool = False):
        self.path = str(path)
        # Optimistic transactions pay off when several processes share the database
        # (serve --processes N): the write lock is then held only to commit. In one
        # process they cost more than they save (see run_in_transaction).
        self.optimistic = optimistic
        if self.path != ":memory:":
            create_private(Path(self.path))
        self._local = threading.local()
        # One writer at a time, among this process's threads and among the processes
        # serving this database: SQLite's busy handler sleeps while its lock sits
        # free, a thread lock and an flock hand it over at once (write_lock.py).
        self._write_lock = WriteLock(self.path)
        # Called with the earliest ETA of the tasks a transaction enqueued, after
        # it commits: the dispatcher sleeps until the earliest ETA and must hear of earlier ones.
        self.enqueue_listeners: list[Callable[[datetime], None]] = []
        from engine.adapters.local.group_commit import GroupCommitter  # it builds on this module

        self._committer = GroupCommitter(self)
        # Optimistic bodies run one at a time in a process. They are pure Python, so
        # the GIL serializes them anyway, but 32 threads contending for the GIL hand
        # it over far more often (and at a higher cost) than they would this lock.
        # Other processes' bodies still run alongside.
        self._body_lock = threading.Lock()
        with self._write_lock:
            migrate(self.connection())

    def connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
            conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a commit survives a killed process; only a power
            # loss may drop the newest commits, and never corrupts the file.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=30000")
            self._local.conn = conn
        return conn

    @contextmanager
    def transaction(self) -> Iterator["SqliteTransaction"]:
        conn = self.connection()
        with self._write_lock:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as error:
                raise StoreError(f"sqlite: cannot begin: {error}") from error
            tx = SqliteTransaction(conn)
            try:
                yield tx
                tx.flush()
                conn.execute("COMMIT")
            except sqlite3.Error as error:
                _rollback(conn)
                raise StoreError(f"sqlite: {error}") from error
            except BaseException:
                _rollback(conn)
                raise
        if tx.earliest_eta is not None:
            for listener in self.enqueue_listeners:
                listener(tx.earliest_eta)

    def shared_secret(self, generate: Callable[[], str]) -> str:
        """The secret every process on this database puts on the tasks it creates."""
        with self.transaction() as tx:
            row = tx.conn.execute("SELECT value FROM meta WHERE key = 'task_secret'").fetchone()
            if row:
                return row[0]
            secret = generate()
            tx.conn.execute("INSERT INTO meta (key, value) VALUES ('task_secret', ?)", (secret,))
            return secret

    def read_meta(self, key: str) -> str | None:
        """A small value kept beside the jobs (e.g. the UI's sign-out generations)."""
        with self.transaction() as tx:
            row = tx.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            return row[0] if row else None

    def write_meta(self, key: str, value: str) -> None:
        with self.transaction() as tx:
            tx.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def run_in_transaction(self, body):
        """Run `body(tx)` in one transaction and return what it returns.

        By default the body runs inside `BEGIN IMMEDIATE`, so it never runs twice.
        With `optimistic`, it runs without the write lock, and the lock is held
        only to check that what it read is unchanged and to write (optimistic.py),
        for many threads' bodies at once (group_commit.py); after OPTIMISTIC_TRIES
        lost races, or for a body that uses `tx.conn`, it runs the default way.
        Measured on 2 cores (10,000 deliveries due at once): with two processes,
        1,250-1,630/s against 990/s; with one, 740-780/s against 900/s, as its
        threads then contend for the GIL instead of the lock.
        """
        from engine.adapters.local.optimistic import BufferedTransaction, NeedsLock

        for _ in range(OPTIMISTIC_TRIES if self.optimistic else 0):
            buffered = BufferedTransaction(self.connection())
            try:
                with self._body_lock:
                    result = body(buffered)
            except NeedsLock:
                break
            except sqlite3.Error as error:
                raise StoreError(f"sqlite: {error}") from error
            if self._committer.commit(buffered):
                return result
        with self.transaction() as tx:
            return body(tx)

    # --- queries outside transactions -------------------------------------------------

    def jobs_due_for_watchdog(self, now: datetime, limit: int) -> list[tuple[str, str]]:
        rows = self.connection().execute(
            "SELECT project, job_id FROM jobs WHERE watchdog_at IS NOT NULL AND watchdog_at < ?"
            " ORDER BY watchdog_at LIMIT ?",
            (now.timestamp(), limit),
        )
        return [(project, job_id) for project, job_id in rows]

    def list_projects(self) -> list[ProjectRow]:
        rows = self.connection().execute("SELECT * FROM projects ORDER BY id")
        return [_project(row) for row in rows]

    def list_jobs(self, project: str) -> list[StoredJob]:
        rows = self.connection().execute(
            "SELECT record, definition, source, config_error FROM jobs WHERE project = ? ORDER BY job_id",
            (project,),
        )
        return [_job(row) for row in rows]

    def count_jobs(self, project: str) -> int:
        (count,) = self.connection().execute("SELECT COUNT(*) FROM jobs WHERE project = ?", (project,)).fetchone()
        return count

    def get_job(self, project: str, job_id: str) -> StoredJob | None:
        return SqliteTransaction(self.connection()).get_job(project, job_id)

    def get_project(self, project: str) -> ProjectRow | None:
        return SqliteTransaction(self.connection()).get_project(project)

    def get_invocation(self, project: str, job_id: str, invocation_id: str) -> InvocationRow | None:
        return SqliteTransaction(self.connection()).get_invocation(project, job_id, invocation_id)

    def list_invocations(
        self, project: str, job_id: str, page_size: int, page_token: str | None
    ) -> tuple[list[InvocationRow], str | None]:
        # Ids sort newest first, so the token is simply the last id returned.
        rows = self.connection().execute(
            "SELECT * FROM invocations WHERE project = ? AND job_id = ? AND id > ? ORDER BY id LIMIT ?",
            (project, job_id, page_token or "", page_size + 1),
        ).fetchall()
        page = [_invocation(row) for row in rows[:page_size]]
        return page, (page[-1].id if len(rows) > page_size else None)

    def delete_invocations_before(self, cutoff: datetime, limit: int) -> int:
        with self.transaction() as tx:
            cursor = tx.conn.execute(
                "DELETE FROM invocations WHERE rowid IN (SELECT rowid FROM invocations"
                f" WHERE created_time < ? AND status IN {TERMINAL} LIMIT ?)",
                (cutoff.timestamp(), limit),
            )
            return cursor.rowcount

    # --- paged reads for the web UI ----------------------------------------------------

    def list_jobs_page(
        self, project: str, page_size: int, page_token: str | None, prefix: str = ""
    ) -> tuple[list[StoredJob], str | None]:
        # A range on the primary key (project, job_id): the page costs the same
        # however many jobs the project has. Ids are ASCII, so prefix + U+FFFF bounds it.
        rows = self.connection().execute(
            "SELECT record, definition, source, config_error FROM jobs WHERE project = ?"
            " AND job_id > ? AND job_id >= ? AND job_id < ? ORDER BY job_id LIMIT ?",
            (project, page_token or "", prefix, prefix + "\uffff", page_size + 1),
        ).fetchall()
        page = [_job(row) for row in rows[:page_size]]
        return page, (page[-1].record.job_id if len(rows) > page_size else None)

    def list_invocations_with_status(
        self, project: str, job_id: str, statuses: tuple[str, ...], page_size: int, page_token: str | None
    ) -> tuple[list[InvocationRow], str | None]:
        # One range read of the (project, job_id, status, id) index per status, merged:
        # an IN over several statuses would make SQLite sort every match before the LIMIT.
        rows = []
        for status in dict.fromkeys(statuses):
            rows += self.connection().execute(
                "SELECT * FROM invocations WHERE project = ? AND job_id = ? AND status = ?"
                " AND id > ? ORDER BY id LIMIT ?",
                (project, job_id, status, page_token or "", page_size + 1),
            ).fetchall()
        rows = sorted(rows, key=lambda row: row[2])[:page_size + 1]
        page = [_invocation(row) for row in rows[:page_size]]
        return page, (page[-1].id if len(rows) > page_size else None)

    def recent_invocations(self, project: str, job_ids: list[str], count: int) -> dict[str, list[InvocationRow]]:
        # One short range read per job on the primary key; the log is left out.
        conn, recent = self.connection(), {}
        for job_id in job_ids:
            rows = conn.execute(
                "SELECT project, job_id, id, status, reason, scheduled_time, trigger, created_time,"
                " started_time, finished_time, attempt, event_count, '[]' FROM invocations"
                " WHERE project = ? AND job_id = ? ORDER BY id LIMIT ?",
                (project, job_id, count),
            ).fetchall()
            recent[job_id] = [_invocation(row) for row in rows]
        return recent


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass  # the transaction is gone already (e.g. the database went away)


class SqliteTransaction:
    """One transaction's reads and writes.

    Invocation rows are written once, at commit: an outcome transaction creates,
    notes and finishes the same invocation, and writing (and re-reading) the row
    each time cost more than the rest of the transaction. Reads in the transaction
    see its own pending rows, so nothing but the number of writes changes.
    """

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        self.earliest_eta: datetime | None = None
        self._pending: dict[tuple[str, str, str], InvocationRow] = {}

    def flush(self) -> None:
        """Write the pending invocation rows (the store calls it just before COMMIT)."""
        pending, self._pending = self._pending, {}
        if pending:
            self.conn.executemany(PUT_INVOCATION, [invocation_values(row) for row in pending.values()])

    def get_job(self, project: str, job_id: str) -> StoredJob | None:
        row = self.conn.execute(SELECT_JOB, (project, job_id)).fetchone()
        return None if row is None else _job(row)

    def put_job(self, job: StoredJob) -> None:
        self.conn.execute(PUT_JOB, job_values(job))

    def delete_job(self, project: str, job_id: str) -> None:
        self.conn.execute(DELETE_JOB, (project, job_id))

    def get_invocation(self, project: str, job_id: str, invocation_id: str) -> InvocationRow | None:
        pending = self._pending.get((project, job_id, invocation_id))
        if pending is not None:
            return _copy(pending)  # the caller may change it; only a put keeps that
        row = self.conn.execute(SELECT_INVOCATION, (project, job_id, invocation_id)).fetchone()
        return None if row is None else _invocation(row)

    def put_invocation(self, row: InvocationRow) -> None:
        self._pending[(row.project, row.job_id, row.id)] = _copy(row)

    def enqueue(self, task: Task) -> None:
        # A pending task of the same name makes this a no-op: enqueueing is idempotent.
        self.conn.execute(ENQUEUE, task_values(task))
        self.saw_eta(task.eta)

    def saw_eta(self, eta: datetime) -> None:
        if self.earliest_eta is None or eta < self.earliest_eta:
            self.earliest_eta = eta

    def get_project(self, project: str) -> ProjectRow | None:
        row = self.conn.execute(SELECT_PROJECT, (project,)).fetchone()
        return None if row is None else _project(row)

    def put_project(self, row: ProjectRow) -> None:
        self.conn.execute(PUT_PROJECT, project_values(row))

    def delete_project(self, project: str) -> None:
        self.conn.execute(DELETE_PROJECT, (project,))


def job_values(job: StoredJob) -> tuple:
    record = job.record
    text = json.dumps(record_to_dict(record), separators=(",", ":"))
    _remember_record(text, record)
    return (
        record.project,
        record.job_id,
        text,
        json.dumps(job.definition, separators=(",", ":")),
        job.source,
        job.config_error,
        record.state.value,
        to_seconds(record.watchdog_at),
    )


def task_values(task: Task) -> tuple:
    payload = json.dumps(task.payload, separators=(",", ":"))
    return (task.name, task.kind, payload, task.eta.timestamp(), task.queue)


def project_values(row: ProjectRow) -> tuple:
    return (row.id, row.config_hash, row.config_error, json.dumps(row.job_errors), json.dumps(row.settings))


# Decoded job records by their stored text. A delivery reads its job twice (tick,
# outcome) and the second read finds the text this process just wrote; JobRecord
# is immutable, so the cached one can be handed out as it is. Definitions are
# plain dicts that callers could change, so they are decoded every time.
_RECORDS: dict[str, object] = {}
_RECORDS_LIMIT = 4_096  # a few per task in flight; a miss only costs a decode


def _remember_record(text: str, record) -> None:
    if len(_RECORDS) >= _RECORDS_LIMIT:
        _RECORDS.clear()  # a whole generation at once: cheaper than an LRU, as good here
    _RECORDS[text] = record


def _job(row) -> StoredJob:
    text, definition, source, config_error = row
    record = _RECORDS.get(text)
    if record is None:
        record = record_from_dict(json.loads(text))
        _remember_record(text, record)
    return StoredJob(record, json.loads(definition), source, config_error)


def _project(row) -> ProjectRow:
    project, config_hash, config_error, job_errors, settings = row
    return ProjectRow(project, config_hash, config_error, json.loads(job_errors), json.loads(settings))


def _copy(row: InvocationRow) -> InvocationRow:
    return replace(row, log=list(row.log))  # entries are never changed, only added or cut


def invocation_values(row: InvocationRow) -> tuple:
    return (
        row.project, row.job_id, row.id, row.status, row.reason,
        row.scheduled_time.timestamp(), row.trigger, to_seconds(row.created_time),
        to_seconds(row.started_time), to_seconds(row.finished_time), row.attempt,
        row.event_count, json.dumps(row.log, separators=(",", ":")),
    )


def _invocation(row) -> InvocationRow:
    (project, job_id, invocation_id, status, reason, scheduled, trigger, created, started,
     finished, attempt, event_count, log) = row
    return InvocationRow(
        project=project, job_id=job_id, id=invocation_id, status=status, reason=reason,
        scheduled_time=from_seconds(scheduled), trigger=trigger, created_time=from_seconds(created),
        started_time=from_seconds(started), finished_time=from_seconds(finished),
        attempt=attempt, event_count=event_count, log=json.loads(log),
    )
