"""Group commit: the optimistic transactions of many threads in one SQLite transaction.

With 32 dispatcher threads per process, handing the write lock from one short
transaction to the next cost more than the transactions: every hand-off wakes one
thread, which must then win the GIL. Here threads queue their checked writes
(optimistic.py); one of them, the leader, takes the write lock once and checks and
writes the whole queue in one transaction, each entry inside its own savepoint so
that one entry's failure is that entry's alone. Then it wakes every thread of the
batch at once, and the first thread still queued leads the next batch.

Nothing a caller sees changes: `commit` returns only after the COMMIT that holds
the caller's writes, so a delivery still follows the commit of its attempt.
"""

from __future__ import annotations

import sqlite3
import threading

from engine.adapters.local.optimistic import BufferedTransaction, Stale
from engine.adapters.local.sqlite_rows import SqliteFile, SqliteTransaction
from engine.ports import StoreError


class _Entry:
    def __init__(self, buffered: BufferedTransaction):
        self.buffered = buffered
        self.done = threading.Event()
        self.lead = False  # woken to commit the next batch rather than with a result
        self.committed = False
        self.error: BaseException | None = None


class GroupCommitter:
    def __init__(self, store: SqliteFile):
        self.store = store
        self._lock = threading.Lock()
        self._queue: list[_Entry] = []
        self._leader_active = False

    def commit(self, buffered: BufferedTransaction) -> bool:
        """Check and write `buffered`; False if a row it read had changed (nothing
        written: run the body again). :raises StoreError: the commit failed."""
        entry = _Entry(buffered)
        with self._lock:
            self._queue.append(entry)
            if not self._leader_active:
                self._leader_active = True
                entry.lead = True
        if not entry.lead:
            entry.done.wait()  # a result, or the lead of the next batch
        if entry.lead:
            self._lead()
        return _result(entry)

    def _lead(self) -> None:
        with self._lock:
            batch, self._queue = self._queue, []
        try:
            self._commit_batch(batch)
        finally:
            for entry in batch:
                entry.lead = False
                entry.done.set()
            with self._lock:
                if self._queue:  # arrived while we committed: the first of them leads next
                    successor = self._queue[0]
                    successor.lead = True
                    successor.done.set()
                else:
                    self._leader_active = False

    def _commit_batch(self, batch: list[_Entry]) -> None:
        try:
            with self.store.transaction() as tx:
                for entry in batch:
                    _apply_one(tx, entry)
        except BaseException as error:  # the COMMIT (or BEGIN) failed: nothing landed
            for entry in batch:
                entry.committed = False
                if entry.error is None:  # one exception each: threads raise them at once
                    entry.error = StoreError(str(error) if isinstance(error, StoreError) else f"sqlite: {error}")
                    entry.error.__cause__ = error


def _apply_one(tx: SqliteTransaction, entry: _Entry) -> None:
    conn = tx.conn
    conn.execute("SAVEPOINT entry")
    try:
        entry.buffered.check_and_write(tx)
    except Stale:
        conn.execute("ROLLBACK TO entry")  # nothing was written yet; keep it tidy anyway
    except Exception as error:
        conn.execute("ROLLBACK TO entry")
        entry.error = error
    else:
        entry.committed = True
    conn.execute("RELEASE entry")


def _result(entry: _Entry) -> bool:
    if entry.error is not None:
        if isinstance(entry.error, sqlite3.Error):
            raise StoreError(f"sqlite: {entry.error}") from entry.error
        raise entry.error
    return entry.committed
