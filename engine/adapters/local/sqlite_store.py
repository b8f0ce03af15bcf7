"""SqliteJobStore: jobs, invocations and projects in one SQLite file (WAL).

Each thread has its own connection. A transaction takes the write lock (a
thread lock and an flock next to the database), then `BEGIN IMMEDIATE`, so
writers are serialized across threads and processes and a transaction never
loses a race at commit; the queue's enqueue is a row in the same file, which
makes it part of the same commit.

Rows, SQL and the transaction object live in sqlite_rows.py; the two other commit
strategies, optimistic.py and group_commit.py, build on those, and this module
chooses among the three (`optimistic`, fixed when the store is built).
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator

from engine.adapters.local.group_commit import GroupCommitter
from engine.adapters.local.optimistic import BufferedTransaction, NeedsLock
from engine.adapters.local.schema import create_private, migrate
from engine.adapters.local.sqlite_rows import (
    JOB_COLUMNS,
    SqliteTransaction,
    invocation_from_row,
    job_from_row,
    project_from_row,
)
from engine.adapters.local.write_lock import WriteLock
from engine.ports import InvocationRow, ProjectRow, StoredJob, StoreError
from statemachine.vocabulary import TERMINAL_STATUSES

TERMINAL = tuple(status.value for status in TERMINAL_STATUSES)  # plain strings: it is written into SQL
OPTIMISTIC_TRIES = 3  # lost races before a transaction body runs under the write lock

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
        return [project_from_row(row) for row in rows]

    def list_jobs(self, project: str) -> list[StoredJob]:
        rows = self.connection().execute(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE project = ? ORDER BY job_id",
            (project,),
        )
        return [job_from_row(row) for row in rows]

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
        page = [invocation_from_row(row) for row in rows[:page_size]]
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
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE project = ?"
            " AND job_id > ? AND job_id >= ? AND job_id < ? ORDER BY job_id LIMIT ?",
            (project, page_token or "", prefix, prefix + "\uffff", page_size + 1),
        ).fetchall()
        page = [job_from_row(row) for row in rows[:page_size]]
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


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass  # the transaction is gone already (e.g. the database went away)
