"""Which processes serve this database, and which of them holds each attempt in flight.

Every process on the database (a `serve`, each child of `serve --processes N`, a
second `serve` on the same --db) registers in the `processes` table and heartbeats
there (app/bootstrap.py). Each attempt in flight has a row in `held_attempts` naming
its process, written in the transaction that records it as starting and deleted in
the one that records its result (engine/changes.py, through `SqliteAttemptHolds`).

A process is gone when
- its heartbeat is older than `timeout` (a few heartbeat periods): it died, or hangs;
  its heartbeat is the later of its row's and its file's (heartbeat_files.py), and the
  file needs no write lock, so a process that waits on a lock another process holds is
  not taken for gone; or
- at once, when it ran on this machine and its pid is no longer alive with the start
  time it registered (a kill -9, a crash, an OOM kill). SQLite is a local database: the
  processes sharing a file share a kernel (a network filesystem does not give SQLite
  working locks), so asking the kernel about a pid is sound. "This machine" is the
  kernel's boot id with the pid namespace, so neither a reboot nor a container with
  pids of its own is taken for it; the start time tells a reused pid from ours; or
- it is not registered at all (it stopped cleanly and deregistered, leaving a hold
  whose result it could not record).
The attempts such a process held are `orphaned`; engine/interruptions.py settles them.

A process that itself stalled past its heartbeat timeout (its own lease, counted on
its monotonic clock, ran out between two heartbeats) may find its row still there:
nobody could write to take it for gone, e.g. because it was frozen holding the write
lock. It still gives up what it held before (others may have judged it gone from its
file meanwhile), and counts those holds among the orphans, so that they are settled
and sent again at once rather than left to the watchdog.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable, Protocol, cast

from engine.adapters.local.heartbeat_files import HeartbeatFiles
from engine.adapters.local.release_marks import ReleaseMarks, read_marks, released_until
from engine.adapters.local.sqlite_queue import Share
from engine.adapters.local.sqlite_rows import Row, SqliteTransaction
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.adapters.local.tuning import DEFAULT_LOCAL_TUNING, LocalTuning
from engine.holds import AttemptKey, HeldAttempt
from engine.leases import Monotonic, held_until
from engine.logs import log_event
from engine.ports import Clock, Transaction

log = logging.getLogger("sundial.serve")


@dataclass(frozen=True)
class ProcessIdentity:
    """One run of one process, made when it starts."""

    machine: str  # where `pid` means this process (see `this_machine`)
    pid: int
    started: str  # its start time as the kernel counts it (clock ticks since boot); "" where unknown
    token: str  # random, so that no two runs share an identity

    @property
    def id(self) -> str:
        return f"{self.pid}.{self.started or '-'}.{self.token}"


def this_machine() -> str:
    """The kernel's boot id and this process's pid namespace (Linux); the host name elsewhere."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return socket.gethostname()


def this_process() -> ProcessIdentity:
    pid = os.getpid()
    stat = _stat(pid)
    return ProcessIdentity(this_machine(), pid, stat[1] if stat else "", secrets.token_hex(6))


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) of a process from /proc; None when there is no such process.

    :raises OSError: this system has no /proc to ask.
    """
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if not Path("/proc/self/stat").exists():
            raise
        return None
    fields = text.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return fields[0], fields[19]  # state (field 3 of proc(5)), starttime (field 22)


def is_alive(identity: ProcessIdentity, machine: str) -> bool | None:
    """Whether the process runs: True or False when this machine can tell, None when
    it cannot (another machine; no start time to compare)."""
    if identity.machine != machine:
        return None
    try:
        stat = _stat(identity.pid)
    except OSError:  # no /proc: only "no such pid" is certain
        try:
            os.kill(identity.pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            pass
        return None
    if stat is None or stat[0] in ("Z", "X"):  # gone, or a zombie nobody has reaped yet
        return False
    return stat[1] == identity.started if identity.started else None


class HoldingTransaction(Protocol):
    """What the holds need of the store's transactions (sqlite_rows.SqliteTransaction)."""

    def get_hold(self, key: Row) -> Row | None: ...

    def put_hold(self, values: Row) -> None: ...

    def delete_hold(self, key: Row) -> None: ...


class ProcessRegistry:
    """This process's row in `processes`, and the judge of everyone else's."""

    def __init__(self, store: SqliteJobStore, me: ProcessIdentity, clock: Clock, timeout: timedelta,
                 role: str = "server", alive: Callable[[ProcessIdentity, str], bool | None] = is_alive,
                 monotonic: Monotonic = time.monotonic):
        """`timeout`: a heartbeat older than this means its process is gone. `alive`
        asks the kernel about a process (tests give it other answers). `monotonic`: the
        clock its own liveness lease is counted on (engine/leases.py)."""
        self.store, self.me, self.clock, self.timeout, self.role = store, me, clock, timeout, role
        self._alive = alive
        self._registered = False
        self._monotonic = monotonic
        self._held_until: float | None = None  # see AttemptHolds.held_until
        self._revoked_before = float("-inf")  # what it held before it was taken for gone is lost
        self._revoked_since: float | None = None  # its holds older than this (store time) are orphans
        self._share: Share | None = None  # see share()
        self._files = HeartbeatFiles.beside(store.path)

    def heartbeat(self) -> None:
        """Register, or say this process is still here; and forget the processes that
        are gone and hold nothing any more.

        :raises StoreError: storage failed.
        """
        # Read before the heartbeat's time: the others count the timeout from that time.
        taken = self._monotonic()
        me, now = self.me, self.clock.now().timestamp()
        kept_up = self._held_until is not None and taken < self._held_until  # no stall since the last one
        if self._beat_file(now) and self._registered and kept_up:
            # The others judge it by the file too: its lease holds on even if the row
            # below cannot be written (the write lock held by a stalled process).
            self._held_until = held_until(taken, self.timeout)
        registered = self._registered_ids()
        gone = self.gone_among(registered)
        with self.store.transaction() as tx:
            updated = tx.conn.execute("UPDATE processes SET heartbeat = ? WHERE id = ?", (now, me.id)).rowcount
            if not updated:
                tx.conn.execute("INSERT INTO processes (id, machine, pid, started, role, heartbeat)"
                                " VALUES (?, ?, ?, ?, ?, ?)", (me.id, me.machine, me.pid, me.started, self.role, now))
            tx.conn.executemany("DELETE FROM processes WHERE id = ? AND NOT EXISTS"
                                " (SELECT 1 FROM held_attempts WHERE holder = ?)", [(i, i) for i in gone])
        if not updated and self._registered:
            # It stalled past the timeout: another process settled what it held.
            self._revoked_before = taken
            log_event(log, "this process was taken for gone; registered again", level=logging.WARNING,
                      process=me.id)
        elif self._registered and not kept_up:
            self._lapsed(taken)
        self._forget(gone)
        self._registered = True
        self._held_until = held_until(taken, self.timeout)
        members = sorted((registered | {me.id}) - gone)
        self._share = Share(members.index(me.id), len(members))

    def _beat_file(self, now: float) -> bool:
        if self._files is None:
            return False
        try:
            self._files.write(self.me.id, now)
        except OSError as error:  # the row still says it is here
            log_event(log, "heartbeat file not written", level=logging.WARNING, error=str(error))
            return False
        return True

    def _lapsed(self, taken: float) -> None:
        """It stalled past its own lease and nobody took it for gone: what it held before
        is given up all the same, and settled as orphans (`revoked_since`)."""
        self._revoked_before = taken
        self._revoked_since = self.clock.now().timestamp()
        log_event(log, "this process stalled past its heartbeat timeout; what it held is settled again",
                  level=logging.WARNING, process=self.me.id)

    def _forget(self, gone: set[str]) -> None:
        """Remove the heartbeat files of the processes whose rows are gone."""
        if self._files is None or not gone:
            return
        for process_id in gone - self._registered_ids():
            self._files.remove(process_id)

    def revoked_since(self) -> float | None:
        """The store time before which this process's own holds are orphans (it stalled
        past its lease, `_lapsed`); None when none are."""
        return self._revoked_since

    def share(self) -> Share | None:
        """This process's share of the chain queue among the processes serving the
        database, as of its last heartbeat (None before the first): every registered
        process runs a dispatcher. Two processes may briefly disagree while one joins
        or leaves; a task no one counts as theirs is then taken over (Share.takeover)."""
        return self._share

    def held_until(self, since: float) -> float | None:
        """See AttemptHolds.held_until."""
        return float("-inf") if since < self._revoked_before else self._held_until

    def deregister(self) -> None:
        """This process stops: what it still holds is settled by the next process to look."""
        with self.store.transaction() as tx:
            tx.conn.execute("DELETE FROM processes WHERE id = ?", (self.me.id,))
        if self._files is not None:
            self._files.remove(self.me.id)

    def gone_among(self, ids: set[str]) -> set[str]:
        """Those of `ids` whose process is gone (never this process itself)."""
        rows = {row[0]: row for row in self.store.connection().execute(
            "SELECT id, machine, pid, started, heartbeat FROM processes")}
        stale_before = (self.clock.now() - self.timeout).timestamp()
        return {i for i in ids if i != self.me.id and self._is_gone(rows.get(i), stale_before)}

    def _is_gone(self, row: Row | None, stale_before: float) -> bool:
        if row is None:
            return True  # deregistered (or never registered): it is not running here
        process_id, machine, pid, started, heartbeat = row
        beat_file = self._files.read(process_id) if self._files is not None else None
        if max(heartbeat, beat_file or heartbeat) < stale_before:
            return True
        token = process_id.rsplit(".", 1)[-1]
        return self._alive(ProcessIdentity(machine, pid, started, token), self.me.machine) is False

    def _registered_ids(self) -> set[str]:
        return {row[0] for row in self.store.connection().execute("SELECT id FROM processes")}


class SqliteAttemptHolds:
    """The AttemptHolds port (engine/ports.py) on the `held_attempts` table."""

    def __init__(self, store: SqliteJobStore, registry: ProcessRegistry,
                 tuning: LocalTuning = DEFAULT_LOCAL_TUNING):
        self.store, self.registry = store, registry
        self.marks = ReleaseMarks(store, registry.me.id, tuning)

    def hold(self, tx: Transaction, key: AttemptKey) -> None:
        values = (*_key(key), key.attempt, self.registry.me.id, self.registry.clock.now().timestamp())
        _holding(tx).put_hold(values)

    def held_until(self, since: float) -> float | None:
        return self.registry.held_until(since)

    def release_up_to(self, at: datetime) -> datetime:
        return self.marks.release_up_to(at)

    def release(self, tx: Transaction, held: HeldAttempt) -> bool:
        holding = _holding(tx)
        holder = held.holder or self.registry.me.id
        if holding.get_hold(_key(held.key)) != (held.key.attempt, holder):
            return False  # ended already, or another process holds it now (a re-issue)
        holding.delete_hold(_key(held.key))
        return True

    def orphaned(self, limit: int) -> list[HeldAttempt]:
        conn = self.store.connection()
        # The holders first, then the registry: a process registers before its first
        # hold, so every holder read here is either in the registry read next, or gone.
        holders = {row[0] for row in conn.execute("SELECT DISTINCT holder FROM held_attempts")}
        gone = sorted(self.registry.gone_among(holders)) if holders else []
        # Its own holds from before a stall past its lease (ProcessRegistry._lapsed).
        me, revoked_since = self.registry.me.id, self.registry.revoked_since()
        if not gone and revoked_since is None:
            return []
        rows = conn.execute(
            "SELECT project, job_id, invocation_id, event, attempt, holder, since FROM held_attempts"
            f" WHERE holder IN ({','.join('?' * len(gone))}) OR (holder = ? AND since < ?) ORDER BY since LIMIT ?",
            (*gone, me, revoked_since if revoked_since is not None else float("-inf"), limit),
        ).fetchall()
        marks = read_marks(self.store, [*gone, me])  # how far each got with its staged requests
        return [HeldAttempt(AttemptKey(project, job_id, invocation, event, attempt), holder,
                            released_until(since, marks.get(holder)))
                for project, job_id, invocation, event, attempt, holder, since in rows]


def _key(key: AttemptKey) -> Row:
    return (key.project, key.job_id, key.invocation_id, key.event_index)


def _holding(tx: Transaction) -> HoldingTransaction:
    """The store's own transaction behind the port's (this adapter's store made it)."""
    if not isinstance(tx, SqliteTransaction):
        raise TypeError(f"{type(tx).__name__} is not a transaction of the SQLite store")
    return cast(HoldingTransaction, tx)
