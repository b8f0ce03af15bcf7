"""The SQLite schema, versioned: each migration runs once, in order, on start.

Times are stored as Unix seconds (REAL, UTC) so that indexes order them and
comparisons are plain numbers.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

MIGRATIONS: list[str] = [
    # 1: jobs, their invocations, projects, and the task queue in the same file
    # so that enqueueing is part of the transaction that decided it.
    """
    CREATE TABLE projects (
        id TEXT PRIMARY KEY,
        config_hash TEXT NOT NULL DEFAULT '',
        config_error TEXT NOT NULL DEFAULT '',
        job_errors TEXT NOT NULL DEFAULT '[]',
        settings TEXT NOT NULL DEFAULT '{}'
    );
    CREATE TABLE jobs (
        project TEXT NOT NULL,
        job_id TEXT NOT NULL,
        record TEXT NOT NULL,
        definition TEXT NOT NULL,
        source TEXT NOT NULL,
        config_error TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL,
        watchdog_at REAL,
        PRIMARY KEY (project, job_id)
    );
    CREATE INDEX jobs_by_watchdog ON jobs (watchdog_at) WHERE watchdog_at IS NOT NULL;
    CREATE TABLE invocations (
        project TEXT NOT NULL,
        job_id TEXT NOT NULL,
        id TEXT NOT NULL,
        status TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        scheduled_time REAL NOT NULL,
        trigger TEXT NOT NULL,
        created_time REAL,
        started_time REAL,
        finished_time REAL,
        attempt INTEGER NOT NULL DEFAULT 0,
        event_count INTEGER NOT NULL DEFAULT 1,
        log TEXT NOT NULL DEFAULT '[]',
        PRIMARY KEY (project, job_id, id)
    );
    CREATE INDEX invocations_by_created ON invocations (created_time);
    CREATE TABLE tasks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL,
        payload TEXT NOT NULL,
        eta REAL NOT NULL,
        lease_until REAL NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX tasks_by_eta ON tasks (eta);
    """,
    # 2: find the earliest lease to expire without scanning the queue.
    """
    CREATE INDEX tasks_by_lease ON tasks (lease_until) WHERE lease_until > 0;
    """,
    # 3: a job's history filtered by status (the web UI's filters), newest first.
    """
    CREATE INDEX invocations_by_status ON invocations (project, job_id, status, id);
    """,
    # 4: throttles. A throttled job's start tasks carry their queue ('PROJECT/THROTTLE';
    # '' is the chain's own), and leasing reads each queue's due tasks in ETA order.
    """
    ALTER TABLE tasks ADD COLUMN queue TEXT NOT NULL DEFAULT '';
    CREATE INDEX tasks_by_queue ON tasks (queue, eta);
    """,
    # 5: an invocation's on_failure notification state (statemachine/notification.py),
    # as JSON. NULL: a row written before it had one; reading it derives the state
    # from the row's log once (recording.stored_notification), and its next write stores it.
    """
    ALTER TABLE invocations ADD COLUMN notification TEXT;
    """,
    # 6: a job whose deletion through the API has begun (engine/operations.py) says so in
    # a column of its own. Before, a `"deleted": true` key in its definition's JSON said
    # so; this moves the mark out of the definition. Touches the jobs table only, so it
    # may run before or after any migration of another table.
    """
    ALTER TABLE jobs ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0;
    UPDATE jobs SET deleted = json_type(definition, '$.deleted') = 'true',
        definition = json_remove(definition, '$.deleted')
        WHERE json_type(definition, '$.deleted') IS NOT NULL
    """,
    # 7: a fan-out invocation's progress (engine/event_rows.py): one row per event that
    # has started, so that the job's record stays small and an event's
    # step writes its own row. Records of version 1 keep their events inline until
    # those invocations end, so nothing is moved here.
    """
    CREATE TABLE progress (
        project TEXT NOT NULL,
        job_id TEXT NOT NULL,
        invocation_id TEXT NOT NULL,
        part TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (project, job_id, invocation_id, part)
    );
    """,
    # 8: the processes serving this database, each with its heartbeat, and which of them
    # holds each attempt in flight (liveness.py), so that the attempts of a process that
    # died are settled at once rather than when their leases run out. One row per event
    # in flight, written with "attempt N starting" and deleted with its result. New
    # tables only: an older database simply has no holds for the attempts it had in flight
    # (they are left to the watchdog, as before).
    """
    CREATE TABLE processes (
        id TEXT PRIMARY KEY,
        machine TEXT NOT NULL,
        pid INTEGER NOT NULL,
        started TEXT NOT NULL,
        role TEXT NOT NULL,
        heartbeat REAL NOT NULL
    );
    CREATE TABLE held_attempts (
        project TEXT NOT NULL,
        job_id TEXT NOT NULL,
        invocation_id TEXT NOT NULL,
        event INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        holder TEXT NOT NULL,
        since REAL NOT NULL,
        PRIMARY KEY (project, job_id, invocation_id, event)
    );
    CREATE INDEX held_attempts_by_holder ON held_attempts (holder);
    """,
    # 9: the audit log of operator actions (engine/audit.py), written in the transaction
    # of the action. Ids sort newest first, so the primary key pages a project's entries
    # and audit_by_job a job's; audit_by_time serves the clean-up. A new table only: an
    # older database simply has no entries for what was done before.
    """
    CREATE TABLE audit (
        project TEXT NOT NULL,
        id TEXT NOT NULL,
        job_id TEXT NOT NULL,
        time REAL NOT NULL,
        actor TEXT NOT NULL,
        action TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '{}',
        PRIMARY KEY (project, id)
    );
    CREATE INDEX audit_by_job ON audit (project, job_id, id);
    CREATE INDEX audit_by_time ON audit (time);
    """,
    # 10: every lease and wake reads a queue's tasks through (queue, eta) since throttles
    # came (4); the index on eta alone only cost each task's insert and delete. This
    # version also writes every finish to its job's record (engine/deferred_finish.py):
    # an older one, which would leave finishes to their rows again, refuses the newer
    # schema, so a database's deferred finishes are only ever those it had before.
    """
    DROP INDEX IF EXISTS tasks_by_eta;
    """,
]

# Tables added without a new schema version, created if missing at every start: the
# release before them refuses a database whose version is newer than its own, but
# reads one with a table it does not know. The inbox (engine/inbox.py): a job's
# pending triggers, one row each, folded into its record by its next fold. The
# release before never reads it; its rows wait there for this one.
ADDED_TABLES = """
    CREATE TABLE IF NOT EXISTS inbox (
        project TEXT NOT NULL,
        job_id TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (project, job_id, key)
    )
"""


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the database to the newest schema; returns the version it ends at."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(row[0]) if row else 0
        if version > len(MIGRATIONS):
            raise RuntimeError(
                f"database schema version {version} is newer than this Sundial ({len(MIGRATIONS)})"
            )
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            for statement in script.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)", (str(number),)
            )
        conn.execute(ADDED_TABLES)
        conn.execute("COMMIT")
        return len(MIGRATIONS)
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def create_private(path: Path) -> None:
    """The database holds the task secret, which forges tasks and completion tokens:
    its directory (when we make it) and its file are created readable by their owner
    only, whatever the umask. SQLite gives its -wal and -shm files the database's mode."""
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o700)
        path.parent.chmod(0o700)  # mkdir's mode is masked by the umask
    if not path.exists():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        path.chmod(0o600)
