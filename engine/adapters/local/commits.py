"""How the SQLite store runs a transaction body and commits it: inside `BEGIN
IMMEDIATE`, under the write lock, so a body never runs twice (`LockedCommits`).

Two other strategies were kept for `serve --processes N`: optimistic bodies checked
and written in a short locked transaction, and group commits of many threads' writes
in one. Measured again once occurrences were staged (committed ahead of their time),
they delivered a 10,000-job burst with two processes no faster than the locked
commits (docs/PERFORMANCE.md, "Commit strategies"), so they are gone.
"""

from __future__ import annotations

from typing import Callable, Protocol, TypeVar

from engine.adapters.local.sqlite_rows import SqliteFile
from engine.ports import Transaction

T = TypeVar("T")


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
