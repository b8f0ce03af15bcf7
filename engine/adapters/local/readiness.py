"""Whether this process can do its work now, for GET /readyz: the database takes writes
and the dispatch loop goes round.

A request to /readyz reads what is kept here and does no storage I/O itself, so it
answers at once even while another process holds the database's write lock. What is
kept comes from two sources: every commit of the store (`StorageHealth.succeeded` and
`failed`, called by sqlite_store.py), and a write probe that `serve` runs every few
seconds on a connection of its own, so that an idle scheduler notices a disk that
stopped taking writes too.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Callable, Iterator

from engine.logs import log_event
from engine.metrics import Metrics
from engine.ports import StoreError

log = logging.getLogger("sundial.storage")

PROBE_PERIOD = 2.0  # seconds between write probes
PROBE_TIMEOUT = 2.0  # seconds a probe waits for the database's lock before it counts as failed
STORAGE_FRESH_FOR = 10.0  # seconds a write outcome stands for the storage's state
WRITE_STUCK_AFTER = 10.0  # seconds one write may wait (or run) before the storage counts as stuck
DISPATCH_STALE_AFTER = 10.0  # seconds without a round of the dispatch loop before it counts as stuck


class StorageHealth:
    """The outcome of this process's latest write to its database, and the failures'
    log lines (ERROR) and counter (sundial_storage_errors_total{operation})."""

    def __init__(self, metrics: Metrics, monotonic: Callable[[], float] = time.monotonic):
        self.metrics, self._monotonic = metrics, monotonic
        self._lock = threading.Lock()
        self._last: tuple[float, str | None] | None = None  # (when, error text or None)
        # Thread ident -> when its write began: a write that waits on a write lock held
        # elsewhere (a frozen process) neither succeeds nor fails, but is not health.
        self._writing: dict[int, float] = {}

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Around one write, from before it waits for the write lock to its end."""
        thread = threading.get_ident()
        with self._lock:
            self._writing[thread] = self._monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._writing.pop(thread, None)

    def succeeded(self) -> None:
        with self._lock:
            self._last = (self._monotonic(), None)

    def failed(self, operation: str, error: BaseException) -> None:
        """A write of `operation` ("begin", "commit", "probe") failed: nothing of it was stored."""
        text = str(error)
        with self._lock:
            self._last = (self._monotonic(), text)
        self.metrics.inc("sundial_storage_errors_total", operation=operation)
        log_event(log, "storage write failed", logging.ERROR, operation=operation, error=text,
                  thread=threading.current_thread().name,
                  hint="nothing of this transaction was stored; its work is tried again later")

    def state(self) -> dict[str, Any]:
        """{"ok": ..., "seconds_ago": ..., "error": ...} of the latest write, on the readyz page."""
        with self._lock:
            last, oldest = self._last, min(self._writing.values(), default=None)
        now = self._monotonic()
        if oldest is not None and now - oldest > WRITE_STUCK_AFTER:
            return {"ok": False, "error": f"a write has waited {now - oldest:.0f}s for the database "
                                          "(its write lock held by a stalled process?)"}
        if last is None:
            return {"ok": False, "error": "no write attempted yet"}
        age = now - last[0]
        if last[1] is not None:
            return {"ok": False, "seconds_ago": round(age, 1), "error": f"storage is failing: {last[1]}"}
        if age > STORAGE_FRESH_FOR:
            return {"ok": False, "seconds_ago": round(age, 1), "error": "no write succeeded recently"}
        return {"ok": True, "seconds_ago": round(age, 1)}


def write_probe(db_path: str, health: StorageHealth, lock: AbstractContextManager[object],
                timeout: float = PROBE_TIMEOUT) -> None:
    """One small write on a connection of its own (a new one each time: a file made
    read-only since shows): a row of the meta table, rewritten, under the store's write
    lock (`lock`: write_lock.WriteLock), so that it fails when the store's writes would
    (a process holding that lock), rather than slip past them. Its outcome goes to `health`."""
    try:
        with lock:
            conn = sqlite3.connect(db_path, timeout=timeout, isolation_level=None)
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('readiness_probe', ?)",
                             (repr(time.time()),))
                conn.execute("COMMIT")
            finally:
                conn.close()
    except (sqlite3.Error, StoreError) as error:
        health.failed("probe", error)
        return
    health.succeeded()


class Readiness:
    """GET /readyz's answer: ready while the latest write succeeded recently and the
    dispatch loop went round recently."""

    def __init__(self, storage: StorageHealth, seconds_since_round: Callable[[], float | None]):
        """`seconds_since_round`: the dispatcher's (None before its first round)."""
        self.storage, self._seconds_since_round = storage, seconds_since_round

    def report(self) -> tuple[bool, dict[str, Any]]:
        checks = {"storage": self.storage.state(), "dispatcher": self._dispatcher_state()}
        return all(check["ok"] for check in checks.values()), checks

    def _dispatcher_state(self) -> dict[str, Any]:
        seconds = self._seconds_since_round()
        if seconds is None:
            return {"ok": False, "error": "the dispatch loop has not run yet"}
        if seconds > DISPATCH_STALE_AFTER:
            return {"ok": False, "seconds_ago": round(seconds, 1),
                    "error": f"the dispatch loop has not gone round for {seconds:.0f}s"}
        return {"ok": True, "seconds_ago": round(seconds, 1)}
