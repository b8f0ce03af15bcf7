"""How the SQLite store runs a transaction body and commits it: three strategies,
one chosen when the store is built (by app/bootstrap.py, from the settings).

- LockedCommits: the body runs inside `BEGIN IMMEDIATE`, under the write lock; it
  never runs twice. Best for one process, whose threads would otherwise contend
  for the GIL instead of the lock.
- OptimisticCommits: the body runs on plain reads, without the lock; its writes are
  checked and made in one short locked transaction (optimistic.py).
- GroupCommits: optimistic, and the checked writes of many threads share one
  transaction (group_commit.py). Best when several processes share the database
  (serve --processes N): each holds the write lock only to commit.

The figures behind the choice are in docs/PERFORMANCE.md ("Commit strategies").
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Callable, Protocol, TypeVar

from engine.adapters.local.group_commit import GroupCommitter
from engine.adapters.local.optimistic import BufferedTransaction, NeedsLock, Stale
from engine.adapters.local.sqlite_rows import SqliteFile
from engine.ports import StoreError, Transaction

T = TypeVar("T")
OPTIMISTIC_TRIES = 3  # lost races before a transaction body runs under the write lock


class CommitStrategy(Protocol):
    def run(self, body: Callable[[Transaction], T]) -> T:
        """Run `body(tx)` and commit what it wrote; return what it returns.

        :raises StoreError: storage failed; nothing of the body was committed.
        """


class LockedCommits:
    """Every body inside `BEGIN IMMEDIATE`: writers wait for each other, none runs twice."""

    def __init__(self, file: SqliteFile):
        self._file = file

    def run(self, body: Callable[[Transaction], T]) -> T:
        with self._file.transaction() as tx:
            return body(tx)


class OptimisticCommits:
    """The body runs without the write lock, then its reads are checked and its writes
    made under it; after OPTIMISTIC_TRIES lost races, or for a body that uses
    `tx.conn`, it runs the locked way."""

    def __init__(self, file: SqliteFile, tries: int = OPTIMISTIC_TRIES):
        self._file, self._tries = file, tries
        self._locked = LockedCommits(file)
        # Optimistic bodies run one at a time in a process. They are pure Python, so
        # the GIL serializes them anyway, but 32 threads contending for the GIL hand
        # it over far more often (and at a higher cost) than they would this lock.
        # Other processes' bodies still run alongside.
        self._body_lock = threading.Lock()

    def run(self, body: Callable[[Transaction], T]) -> T:
        for _ in range(self._tries):
            buffered = BufferedTransaction(self._file.connection(), self._file.records)
            try:
                with self._body_lock:
                    result = body(buffered)
            except NeedsLock:
                break
            except sqlite3.Error as error:
                raise StoreError(f"sqlite: {error}") from error
            buffered.check_budget()
            if self.commit(buffered):
                return result
        return self._locked.run(body)

    def commit(self, buffered: BufferedTransaction) -> bool:
        """Check and write `buffered` in a transaction of its own; False if a row it
        read had changed (nothing written). :raises StoreError: the commit failed."""
        try:
            with self._file.transaction() as tx:
                buffered.check_and_write(tx)
        except Stale:
            return False
        return True


class GroupCommits(OptimisticCommits):
    """Optimistic, with the checked writes of many threads in one transaction."""

    def __init__(self, file: SqliteFile, tries: int = OPTIMISTIC_TRIES):
        super().__init__(file, tries)
        self._group = GroupCommitter(file)

    def commit(self, buffered: BufferedTransaction) -> bool:
        return self._group.commit(buffered)
