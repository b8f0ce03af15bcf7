"""The embedded task queue: rows of the `tasks` table, leased by dispatchers.

A lease is a time until which a task belongs to the dispatcher that took it;
a dispatcher that dies simply stops renewing, and the task becomes due again
when the lease runs out. Leasing is one `BEGIN IMMEDIATE` transaction, so two
processes on one database never take the same task.

Throttles: a throttled job's start tasks sit in the queue named for the throttle
(`PROJECT/THROTTLE`, see engine.recording.throttle_queue), and a lease never hands out
more than the throttle's `max_in_flight` unexpired leases of that queue at once, across
every process on the database. The limit is read, at each lease, from where the config
import stored the project's throttles (the project row's settings), so a change to it
takes effect with the import. A lease that ran out does not count: a crashed process
frees its slots when its leases expire. A queue whose throttle is no longer defined
runs unthrottled, rather than never. The dispatcher delivers a start task before it
reports it done, so "leases held" bounds "requests in flight".
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from engine.adapters.local.sqlite_rows import from_seconds, instant
from engine.adapters.local.sqlite_store import SqliteJobStore, ThreadConnection
from engine.ports import LeasedTask, Task
from statemachine.vocabulary import task_kind


@dataclass(frozen=True)
class Share:
    """The part of the chain queue one of `count` processes on the database takes first:
    the tasks of the jobs whose stable hash (`share_of`) is `index`. A task of another
    share is taken too once it is `takeover` overdue, so a process that died or lags
    loses nothing; the lease still decides who runs it. Shares only keep two processes
    from waking for the same task; nothing depends on them for correctness."""

    index: int
    count: int
    takeover: timedelta = timedelta(milliseconds=200)


def share_of(name: str, count: int) -> int:
    """The share of a task: by its job (the 2nd and 3rd parts of its name,
    engine/recording.task_name), so one job's tasks all go to one process."""
    key = name.split("/", 3)[1:3]
    return zlib.crc32("/".join(key).encode()) % count


def in_share(share: Share | None, project: str, job_id: str) -> bool:
    """Whether the job's tasks are of `share` (None, or one process: all are)."""
    return share is None or share.count <= 1 or share_of(f"/{project}/{job_id}", share.count) == share.index


class SqliteTaskQueue:
    """The TaskQueue port (engine/ports.py) on the store's `tasks` table."""

    def __init__(self, store: SqliteJobStore):
        self.store = store
        self._local = ThreadConnection()  # .conn: the thread's connection that has sundial_share

    def _with_share(self, conn: sqlite3.Connection) -> sqlite3.Connection:
        """The connection, with the SQL function `sundial_share(name, count)` (share_of)."""
        if self._local.conn is not conn:
            conn.create_function("sundial_share", 2, share_of, deterministic=True)
            self._local.conn = conn
        return conn

    def lease_due(
        self, now: datetime, limit: int, lease: timedelta, done: list[int] | None = None,
        ahead: timedelta = timedelta(0), share: Share | None = None,
    ) -> list[LeasedTask]:
        """Lease up to `limit` due tasks; `done` tasks are deleted in the same commit.
        `ahead`: also tasks of the chain queue due that much later (the caller holds
        them until their time); `share`: of those, only this process's, and others'
        once overdue (see Share)."""
        if limit <= 0 and not done:
            return []
        with self.store.transaction() as tx:
            if done:
                tx.conn.executemany("DELETE FROM tasks WHERE id = ?", [(i,) for i in done])
            if limit <= 0:
                return []
            ids = _pick_due(self._with_share(tx.conn), now.timestamp(), limit, ahead.total_seconds(), share)
            if not ids:
                return []
            rows = tx.conn.execute(
                "UPDATE tasks SET lease_until = ?, attempts = attempts + 1"
                f" WHERE id IN ({','.join('?' * len(ids))})"
                " RETURNING id, name, kind, payload, eta, attempts, queue",
                ((now + lease).timestamp(), *ids),
            ).fetchall()
        rows.sort(key=lambda row: row[4])
        return [
            LeasedTask(task_id, Task(name, task_kind(kind), json.loads(payload), instant(eta), queue), attempts)
            for task_id, name, kind, payload, eta, attempts, queue in rows
        ]

    def complete(self, task_ids: list[int]) -> None:
        if not task_ids:
            return
        with self.store.transaction() as tx:
            tx.conn.executemany("DELETE FROM tasks WHERE id = ?", [(i,) for i in task_ids])

    def retry(self, task_id: int, eta: datetime, attempts: int | None = None) -> None:
        # `attempts` is the lease's fencing token: each lease counts one more, so a
        # lease taken since by another dispatcher is never released by this one.
        with self.store.transaction() as tx:
            tx.conn.execute("UPDATE tasks SET eta = ?, lease_until = 0"
                            " WHERE id = ? AND attempts = coalesce(?, attempts)", (eta.timestamp(), task_id, attempts))

    def renew(self, tasks: list[LeasedTask], until: datetime) -> list[int]:
        """Keep leases of tasks still being worked on (only leases no one took since);
        returns the ids of those renewed."""
        if not tasks:
            return []
        with self.store.transaction() as tx:
            return [item.id for item in tasks if tx.conn.execute(
                "UPDATE tasks SET lease_until = ? WHERE id = ? AND attempts = ?",
                (until.timestamp(), item.id, item.attempts)).rowcount]

    def next_wake(self, now: datetime, share: Share | None = None) -> datetime | None:
        """When the earliest task becomes takeable: the earliest ETA of an unleased
        task, or the earliest lease to run out (both read from an index). With a
        `share`, an unleased task of the chain queue outside it counts from when it
        may be taken over."""
        conn, at = self._with_share(self.store.connection()), now.timestamp()
        takeover = share.takeover.total_seconds() if share is not None and share.count > 1 else 0.0
        candidates = [
            row[0] + (0.0 if queue else takeover) for queue in _open_queues(conn, at, 1)
            for row in conn.execute(_DUE_IN_QUEUE.replace("eta <= ? AND ", ""), (queue, at, 1))
        ]
        if takeover and share is not None:
            mine = conn.execute(_MINE_IN_QUEUE.replace("eta <= ? AND ", "").replace("(eta <= ? OR ", "("),
                                ("", at, share.count, share.index, 1)).fetchone()
            if mine is not None:
                candidates.append(mine[0])
        # Only leases still running: one that ran out is a free task, found above if
        # its queue has room (and if it has none, a finishing task wakes the dispatcher).
        leased = conn.execute(
            "SELECT min(lease_until) FROM tasks WHERE lease_until > 0 AND lease_until > ?", (at,)
        ).fetchone()
        if leased[0] is not None:
            candidates.append(leased[0])
        return from_seconds(min(candidates)) if candidates else None

    def version(self) -> int:
        """SQLite's change counter on the calling thread's connection: it moves whenever
        another connection (of this process or another) commits to the database."""
        return int(self.store.connection().execute("PRAGMA data_version").fetchone()[0])

    def pending(self) -> int:
        (count,) = self.store.connection().execute("SELECT count(*) FROM tasks").fetchone()
        return int(count)


# Due, unleased tasks of one queue, in ETA order (the (queue, eta) index).
_DUE_IN_QUEUE = (
    "SELECT eta, id FROM tasks WHERE queue = ? AND eta <= ? AND lease_until <= ? ORDER BY eta LIMIT ?"
)
# The same, of one share (see Share): its own tasks, and others' due before the takeover time.
_MINE_IN_QUEUE = (
    "SELECT eta, id FROM tasks WHERE queue = ? AND eta <= ? AND lease_until <= ?"
    " AND (eta <= ? OR sundial_share(name, ?) = ?) ORDER BY eta LIMIT ?"
)
# The distinct throttle queues holding tasks, one index seek each (a skip scan).
_QUEUES = """
WITH RECURSIVE q(name) AS (
    SELECT (SELECT min(queue) FROM tasks WHERE queue > '')
    UNION ALL
    SELECT (SELECT min(queue) FROM tasks WHERE queue > q.name) FROM q WHERE q.name IS NOT NULL
) SELECT name FROM q WHERE name IS NOT NULL
"""
_LIMIT = (
    "SELECT t.value FROM projects p, json_each(p.settings, '$.throttles') t WHERE p.id = ? AND t.key = ?"
)


def _pick_due(conn: sqlite3.Connection, at: float, limit: int, ahead: float = 0.0,
              share: Share | None = None) -> list[int]:
    """Ids of up to `limit` due tasks, earliest first, leaving every throttle within bounds.
    The chain queue's may be due up to `ahead` seconds later, and are of `share` (if
    any). A throttle's are not leased ahead: each lease holds one of its few slots."""
    due = []
    for queue, room in _open_queues(conn, at, limit).items():
        if queue or share is None or share.count <= 1:
            due += conn.execute(_DUE_IN_QUEUE, (queue, at + (0 if queue else ahead), at, room)).fetchall()
        else:
            overdue = at - share.takeover.total_seconds()
            due += conn.execute(_MINE_IN_QUEUE,
                                (queue, at + ahead, at, overdue, share.count, share.index, room)).fetchall()
    due.sort()
    return [task_id for _, task_id in due[:limit]]




def _open_queues(conn: sqlite3.Connection, at: float, limit: int) -> dict[str, int]:
    """Queue -> how many more of its tasks may be leased now (only queues with room)."""
    rooms = {"": limit}
    queues = [row[0] for row in conn.execute(_QUEUES)]
    if not queues:
        return rooms
    held = dict(conn.execute(
        "SELECT queue, count(*) FROM tasks WHERE lease_until > 0 AND lease_until > ? AND queue != ''"
        " GROUP BY queue", (at,),
    ).fetchall())
    for queue in queues:
        cap = throttle_limit(conn, queue)
        room = limit if cap is None else min(cap - held.get(queue, 0), limit)
        if room > 0:
            rooms[queue] = room
    return rooms


def throttle_limit(conn: sqlite3.Connection, queue: str) -> int | None:
    """The max_in_flight of the throttle a queue is named for; None if it is not defined."""
    project, _, name = queue.partition("/")
    row = conn.execute(_LIMIT, (project, name)).fetchone()
    if row is None or not isinstance(row[0], int):
        return None
    return max(row[0], 1)
