"""SqliteJobStore: jobs, invocations and projects in one SQLite file (WAL).

Each thread has its own connection. A write transaction takes the write lock (a
thread lock and an flock next to the database), then `BEGIN IMMEDIATE`, so
writers are serialized across threads and processes and a transaction never
loses a race at commit; the queue's enqueue is a row in the same file, which
makes it part of the same commit.

Rows, SQL and the transaction object live in sqlite_rows.py. How the engine's
transaction bodies run and commit is a strategy (commits.py), chosen once when
the store is built.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator, Mapping, TypeVar

from engine.adapters.local.commits import CommitStrategy, LockedCommits
from engine.adapters.local.readiness import StorageHealth
from engine.adapters.local.record_cache import RecordCache
from engine.adapters.local.schema import create_private, migrate
from engine.adapters.local.sqlite_rows import (
    IDS_PER_QUERY,
    JOB_COLUMNS,
    Row,
    SqliteFile,
    SqliteTransaction,
    audit_from_row,
    invocation_from_row,
    job_from_row,
    project_from_row,
)
from engine.adapters.local.write_lock import LOCK_WAIT, WriteLock
from engine.errors import WriteLockBusy
from engine.metrics import Metrics
from engine.ports import AuditEntry, InvocationRow, ProjectRow, StoredJob, StoreError, Transaction
from statemachine.budget import JOBS_PER_COMMIT
from statemachine.vocabulary import TERMINAL_STATUSES

T = TypeVar("T")
TERMINAL = tuple(status.value for status in TERMINAL_STATUSES)  # plain strings: it is written into SQL


class ThreadConnection(threading.local):
    """A thread's own connection to the database (None until its first use)."""

    conn: sqlite3.Connection | None = None


class SqliteJobStore:
    # Many jobs per commit: one writer holds the lock at a time anyway, and a commit's
    # cost (its lock, its WAL frame) is shared by the batch.
    jobs_per_commit = JOBS_PER_COMMIT
    # A finish is written to the job's record at once (engine/deferred_finish.py): sparing
    # that row write costs two replays of the machine's step, more than the write.
    defers_finishes = False

    def __init__(
        self,
        path: str | Path,
        commits: Callable[[SqliteFile], CommitStrategy] = LockedCommits,
        on_enqueue: Callable[[datetime], None] | None = None,
        health: StorageHealth | None = None,
    ):
        """`commits` builds the strategy that runs `run_in_transaction`'s bodies
        (commits.py). `on_enqueue(eta)` is called after each commit that enqueued
        tasks, with the earliest ETA among them: the dispatcher sleeps until the
        earliest task it knows of and must hear of earlier ones."""
        self.path = str(path)
        if self.path != ":memory:":
            create_private(Path(self.path))
        self._local = ThreadConnection()
        # One writer at a time, among this process's threads and among the processes
        # serving this database: SQLite's busy handler sleeps while its lock sits
        # free, a thread lock and an flock hand it over at once (write_lock.py).
        # (Public: the readiness probe writes under it too, readiness.py.)
        self.write_lock = WriteLock(self.path)
        self._on_enqueue = on_enqueue
        self._health = health if health is not None else StorageHealth(Metrics())
        # Shared by this store's transactions, and by no other store's.
        self.records = RecordCache()
        self._commits = commits(self)
        with self.write_lock:
            migrate(self.connection())
        # Whether a job's record lists an invocation its row says finished: a finish an
        # earlier version left to its row (engine/deferred_finish.py), which a step must
        # replay first. This store writes finishes to the record (defers_finishes), and
        # the schema keeps older versions away, so once none is left none comes back.
        self.holds_deferred_finishes = bool(self.connection().execute(_DEFERRED_FINISH).fetchone())

    def connection(self) -> sqlite3.Connection:
        conn = self._local.conn
        if conn is None:
            # SQLite's own lock (a writer outside the flock, the file's recovery) is waited
            # for as long as the flock is, no longer: a stalled holder costs a bounded pause.
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=LOCK_WAIT)
            conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a commit survives a killed process; only a power
            # loss may drop the newest commits, and never corrupts the file.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(LOCK_WAIT * 1000)}")
            self._local.conn = conn
        return conn

    @contextmanager
    def transaction(self) -> Iterator[SqliteTransaction]:
        conn = self.connection()
        with self._health.writing(), self._locked():
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as error:
                self._failed("begin", error)
                kind = WriteLockBusy if _is_busy(error) else StoreError
                raise kind(f"sqlite: cannot begin: {error}") from error
            except sqlite3.Error as error:
                self._failed("begin", error)
                raise StoreError(f"sqlite: cannot begin: {error}") from error
            tx = SqliteTransaction(conn, self.records)
            try:
                yield tx
                tx.flush()
                conn.execute("COMMIT")
            except sqlite3.Error as error:
                _rollback(conn)
                self._failed("commit", error)
                raise StoreError(f"sqlite: {error}") from error
            except BaseException:
                _rollback(conn)
                raise
        self._health.succeeded()
        if tx.earliest_eta is not None and self._on_enqueue is not None:
            self._on_enqueue(tx.earliest_eta)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.write_lock.__enter__()
        except WriteLockBusy as error:
            self._health.failed("begin", error)
            raise
        try:
            yield
        finally:
            self.write_lock.__exit__()

    def _failed(self, operation: str, error: sqlite3.Error) -> None:
        self._health.failed(operation, error)

    def shared_secret(self, generate: Callable[[], str]) -> str:
        """The secret every process on this database puts on the tasks it creates."""
        with self.transaction() as tx:
            row = tx.conn.execute("SELECT value FROM meta WHERE key = 'task_secret'").fetchone()
            if row:
                return str(row[0])
            secret = generate()
            tx.conn.execute("INSERT INTO meta (key, value) VALUES ('task_secret', ?)", (secret,))
            return secret

    def read_meta(self, key: str) -> str | None:
        """A small value kept beside the jobs (e.g. the UI's sign-out generations)."""
        with self.transaction() as tx:
            row = tx.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            return str(row[0]) if row else None

    def write_meta(self, key: str, value: str) -> None:
        with self.transaction() as tx:
            tx.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def run_in_transaction(self, body: Callable[[Transaction], T]) -> T:
        """Run `body(tx)` in one transaction and return what it returns, the way the
        store's commit strategy runs it (commits.py).

        :raises StoreError: storage failed; nothing of the body was committed.
        """
        return self._commits.run(body)

    # --- queries outside transactions -------------------------------------------------

    def jobs_due_for_watchdog(
        self, now: datetime, limit: int, cursor: str | None = None
    ) -> tuple[list[tuple[str, str]], str | None]:
        # Keyset paging on (watchdog_at, rowid): the partial index on watchdog_at holds
        # the rowid too, so the page is one range read with no sort. A job rewritten
        # meanwhile has a new rowid, and a new watchdog_at past `now` unless a step left
        # it due; such a job may be seen twice or next run, never lost.
        after_at, after_row = (float(part) for part in cursor.split(":")) if cursor else (float("-inf"), -1)
        rows = self.connection().execute(
            "SELECT rowid, watchdog_at, project, job_id FROM jobs WHERE watchdog_at IS NOT NULL"
            " AND watchdog_at < ? AND (watchdog_at, rowid) > (?, ?) ORDER BY watchdog_at, rowid LIMIT ?",
            (now.timestamp(), after_at, int(after_row), limit),
        ).fetchall()
        page = [(project, job_id) for _, _, project, job_id in rows]
        if len(rows) < limit:
            return page, None
        last_row, last_at, _, _ = rows[-1]
        return page, f"{last_at!r}:{last_row}"

    def defer_watchdog(self, project: str, job_id: str, until: datetime) -> bool:
        with self.transaction() as tx:
            moved = tx.conn.execute(
                "UPDATE jobs SET watchdog_at = ? WHERE project = ? AND job_id = ? AND watchdog_at < ?",
                (until.timestamp(), project, job_id, until.timestamp()),
            ).rowcount
        return moved > 0

    def list_projects(self) -> list[ProjectRow]:
        rows = self.connection().execute("SELECT * FROM projects ORDER BY id")
        return [project_from_row(row) for row in rows]

    def list_jobs(self, project: str) -> list[StoredJob]:
        rows = self.connection().execute(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE project = ? ORDER BY job_id",
            (project,),
        )
        return [job_from_row(row, self.records) for row in rows]

    def count_jobs(self, project: str) -> int:
        (count,) = self.connection().execute("SELECT COUNT(*) FROM jobs WHERE project = ?", (project,)).fetchone()
        return int(count)

    def get_job(self, project: str, job_id: str) -> StoredJob | None:
        return SqliteTransaction(self.connection(), self.records).get_job(project, job_id)

    def get_jobs(self, keys: list[tuple[str, str]],
                 known: Mapping[tuple[str, str], tuple[StoredJob, str]] | None = None,
                 ) -> dict[tuple[str, str], StoredJob]:
        """The jobs of `keys` that exist, by (project, job id): one range read of the
        primary key per project and up to IDS_PER_QUERY ids. `known`: jobs as the caller last saw
        them, with their record's stored text; a row still holding exactly that is
        handed back as the caller's own object, decoded from nothing (a burst's staged
        jobs are read back at their time, more than the record cache keeps)."""
        by_project: dict[str, list[str]] = {}
        for project, job_id in dict.fromkeys(keys):
            by_project.setdefault(project, []).append(job_id)
        conn = self.connection()
        found: dict[tuple[str, str], StoredJob] = {}
        for project, ids in by_project.items():
            for start in range(0, len(ids), IDS_PER_QUERY):
                part = ids[start:start + IDS_PER_QUERY]
                rows = conn.execute(f"SELECT job_id, {JOB_COLUMNS} FROM jobs WHERE project = ?"
                                    f" AND job_id IN ({','.join('?' * len(part))})", (project, *part))
                for row in rows:
                    key = (project, row[0])
                    seen = known.get(key) if known else None
                    found[key] = seen[0] if seen is not None and self._holds_still(row[1:], *seen) else \
                        job_from_row(row[1:], self.records)
        return found

    def _holds_still(self, row: Row, job: StoredJob, record_text: str) -> bool:
        """Whether a row (JOB_COLUMNS) is `job` as written with `record_text`."""
        text, definition, source, config_error, deleted = row
        return (text == record_text and definition == self.records.definition_text(job.definition)
                and source == job.source and config_error == job.config_error and bool(deleted) == job.deleted)

    def get_project(self, project: str) -> ProjectRow | None:
        return SqliteTransaction(self.connection(), self.records).get_project(project)

    def get_invocation(self, project: str, job_id: str, invocation_id: str) -> InvocationRow | None:
        return SqliteTransaction(self.connection(), self.records).get_invocation(project, job_id, invocation_id)

    def get_invocations(self, project: str, keys: list[tuple[str, str]]) -> dict[tuple[str, str], InvocationRow]:
        # Point reads on the primary key of a local file: a batch would save nothing.
        reader = SqliteTransaction(self.connection(), self.records)
        found = {key: reader.get_invocation(project, *key) for key in keys}
        return {key: row for key, row in found.items() if row is not None}

    def list_invocations(
        self, project: str, job_id: str, page_size: int, page_token: str | None
    ) -> tuple[list[InvocationRow], str | None]:
        # Ids sort newest first, so the token is simply the last id returned.
        rows = self.connection().execute(
            "SELECT * FROM invocations WHERE project = ? AND job_id = ? AND id > ? ORDER BY id LIMIT ?",
            (project, job_id, page_token or "", page_size + 1),
        ).fetchall()
        page = [invocation_from_row(row) for row in rows[:page_size]]
        return page, (page[-1].id if len(rows) > page_size else None)

    def delete_invocations_before(self, cutoff: datetime, limit: int) -> int:
        with self.transaction() as tx:
            doomed = tx.conn.execute(
                "SELECT rowid, project, job_id, id, event_count FROM invocations"
                f" WHERE created_time < ? AND status IN {TERMINAL} LIMIT ?",
                (cutoff.timestamp(), limit),
            ).fetchall()
            # A fan-out's progress rows go with it (engine/event_rows.py).
            tx.conn.executemany("DELETE FROM progress WHERE project = ? AND job_id = ? AND invocation_id = ?",
                                [(project, job_id, id_) for _, project, job_id, id_, count in doomed if count > 1])
            tx.conn.executemany("DELETE FROM invocations WHERE rowid = ?", [(rowid,) for rowid, *_ in doomed])
            return len(doomed)

    def delete_finished_progress(
        self, cutoff: datetime, limit: int, cursor: str | None = None
    ) -> tuple[int, str | None]:
        # Nothing to sweep here: a fan-out's progress rows are deleted in the same
        # transaction as their invocation (above), so none outlives it.
        return 0, None

    def delete_audit_before(self, cutoff: datetime, limit: int) -> int:
        # A range of audit_by_time: what it deletes leaves the range, so no cursor is needed.
        with self.transaction() as tx:
            return int(tx.conn.execute(
                "DELETE FROM audit WHERE rowid IN (SELECT rowid FROM audit WHERE time < ? LIMIT ?)",
                (cutoff.timestamp(), limit)).rowcount)

    def list_audit(
        self, project: str, job_id: str | None, page_size: int, page_token: str | None
    ) -> tuple[list[AuditEntry], str | None]:
        # Ids sort newest first: a range of the primary key (project, id), or of
        # audit_by_job (project, job_id, id), from the token on.
        where, values = ("project = ? AND job_id = ?", (project, job_id)) if job_id else ("project = ?", (project,))
        rows = self.connection().execute(
            f"SELECT project, id, job_id, time, actor, action, detail FROM audit WHERE {where}"
            " AND id > ? ORDER BY id LIMIT ?", (*values, page_token or "", page_size + 1)).fetchall()
        page = [audit_from_row(row) for row in rows[:page_size]]
        return page, (page[-1].id if len(rows) > page_size else None)

    # --- paged reads for the web UI ----------------------------------------------------

    def list_jobs_page(
        self, project: str, page_size: int, page_token: str | None, prefix: str = ""
    ) -> tuple[list[StoredJob], str | None]:
        # A range on the primary key (project, job_id): the page costs the same
        # however many jobs the project has. Ids are ASCII, so prefix + U+FFFF bounds it.
        rows = self.connection().execute(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE project = ?"
            " AND job_id > ? AND job_id >= ? AND job_id < ? ORDER BY job_id LIMIT ?",
            (project, page_token or "", prefix, prefix + "\uffff", page_size + 1),
        ).fetchall()
        page = [job_from_row(row, self.records) for row in rows[:page_size]]
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
        page = [invocation_from_row(row) for row in rows[:page_size]]
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
            recent[job_id] = [invocation_from_row(row) for row in rows]
        return recent


_DEFERRED_FINISH = """
SELECT 1 FROM jobs j, json_each(j.record, '$.active') a
JOIN invocations i ON i.project = j.project AND i.job_id = j.job_id AND i.id = json_extract(a.value, '$.id')
WHERE j.state IN ('RUNNING', 'QUEUED') AND i.status IN ('SUCCEEDED', 'FAILED') LIMIT 1
"""


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass  # the transaction is gone already (e.g. the database went away)


def _is_busy(error: sqlite3.OperationalError) -> bool:
    """SQLite's own lock stayed taken past the busy timeout ("database is locked")."""
    return error.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
