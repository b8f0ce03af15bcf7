"""How far a process got with its staged requests: the mark that tells a staged attempt
never sent from one that may have been (statemachine/staging.py, `unsent`).

A staged attempt is committed as starting ahead of its time T and sent at T. Should its
process die, whoever settles the attempt must know whether the request left: if it did
not, the occurrence is sent under the same invocation id (not failed as interrupted);
if it may have, it is an interrupted attempt, as one sent right after its commit is.
So before a staged request due at T leaves, its process stores "released up to M" with
M ≥ T, in the `meta` table, one row per process. A mark covers a span past the time it
was written for (tuning.py, `release_mark_span`), so a spread load writes it a few times a second, not once per request;
and the stager writes it a little before T (`Stager`), so that at T nothing is left
but the sends. An attempt due after the gone process's mark was never sent.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Iterable

from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.adapters.local.tuning import DEFAULT_LOCAL_TUNING, LocalTuning

PREFIX = "released/"  # meta key of a process's mark: PREFIX + its id


class ReleaseMarks:
    def __init__(self, store: SqliteJobStore, holder: str, tuning: LocalTuning = DEFAULT_LOCAL_TUNING):
        self.store, self.holder = store, holder
        self._span = tuning.release_mark_span  # how far past the time it was needed for a mark covers
        self._lock = threading.Lock()  # one writer at a time; the others find themselves covered
        self._marked: datetime | None = None
        self.written = 0  # marks written so far (tests and the bench read it)

    def covering(self, at: datetime) -> datetime | None:
        """The stored mark, if it is at `at` or later."""
        marked = self._marked
        return marked if marked is not None and at <= marked else None

    def release_up_to(self, at: datetime) -> datetime:
        """Return once this process's stored mark is at `at` or later; returns the mark.

        :raises StoreError: the mark could not be stored (the request must not go then).
        """
        if (marked := self.covering(at)) is not None:
            return marked
        with self._lock:
            if (marked := self.covering(at)) is not None:
                return marked
            until = at + self._span
            stamp = repr(until.timestamp())
            with self.store.transaction() as tx:
                tx.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                                (PREFIX + self.holder, stamp))
            self._marked = until
            self.written += 1
            return until


def read_marks(store: SqliteJobStore, holders: Iterable[str]) -> dict[str, float]:
    """The stored marks (seconds since the epoch) of `holders` that have one."""
    keys = [PREFIX + holder for holder in holders]
    if not keys:
        return {}
    rows = store.connection().execute(
        f"SELECT key, value FROM meta WHERE key IN ({','.join('?' * len(keys))})", keys).fetchall()
    return {key[len(PREFIX):]: float(value) for key, value in rows}


def released_until(since: float, mark: float | None) -> datetime:
    """The latest time of a request the holder may have let out for an attempt it began
    to hold at `since`: an attempt sent at its commit is due no later than that."""
    return datetime.fromtimestamp(max(since, mark if mark is not None else since), timezone.utc)
