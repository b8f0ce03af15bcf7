"""No writer waits for the database's write lock without a deadline: another process
frozen (SIGSTOP) while it holds the lock, or SQLite's own lock taken outside it, costs
a writer at most `LOCK_WAIT` and then a `WriteLockBusy` (engine/adapters/local/write_lock.py)."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable

from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.adapters.local.write_lock import LOCK_WAIT, WriteLock
from engine.errors import WriteLockBusy
from tests.local.test_write_lock import _holder

GRACE = 2.0  # seconds past the bound a loaded machine may take to say so


def _timed(write: Callable[[], None], limit: float) -> tuple[float, BaseException | None]:
    """Run `write` on a thread; (seconds it took, what it raised). A write that is still
    waiting after `limit` seconds fails the test instead of hanging it."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            write()
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - handed to the test
            outcome.append(error)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    assert outcome, f"the write was still waiting after {limit}s"
    return time.monotonic() - started, outcome[0]


def _write(store: SqliteJobStore, key: str) -> Callable[[], None]:
    def write() -> None:
        with store.transaction() as tx:
            tx.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, 'y')", (key,))
    return write


def test_a_process_frozen_holding_the_write_lock_costs_a_writer_a_bounded_pause(tmp_path):
    db = tmp_path / "s.db"
    store = SqliteJobStore(db)
    holder = _holder(db, 60)
    try:
        assert holder.stdout.readline().strip() == "held"
        os.kill(holder.pid, signal.SIGSTOP)
        waited, error = _timed(_write(store, "during"), LOCK_WAIT + 10)
        assert isinstance(error, WriteLockBusy), error
        assert LOCK_WAIT - 0.1 < waited < LOCK_WAIT + GRACE, waited
        assert "write lock" in str(error)
    finally:
        holder.kill()  # SIGKILL ends a stopped process too
        holder.wait()
    waited, error = _timed(_write(store, "after"), 10)
    assert error is None and waited < 1.0, (waited, error)


def test_a_writer_that_gave_up_leaves_the_lock_to_the_next_one_at_once(tmp_path):
    """The helper thread that went on waiting for a writer that gave up lets the lock go
    when it gets it: another process (here another open file) takes it straight away."""
    db = tmp_path / "s.db"
    mine, theirs = WriteLock(str(db), wait=0.3), WriteLock(str(db), wait=0.3)
    holder = WriteLock(str(db), wait=0.3)
    with holder:
        waited, error = _timed(mine.__enter__, 5)
        assert isinstance(error, WriteLockBusy) and waited < 2, (waited, error)
    time.sleep(0.1)  # the helper gets the lock, finds no one waiting, and lets it go
    waited, error = _timed(theirs.__enter__, 5)
    assert error is None and waited < 0.2, (waited, error)
    theirs.__exit__()
    waited, error = _timed(mine.__enter__, 5)  # and the one that gave up can write again
    assert error is None and waited < 0.2, (waited, error)
    mine.__exit__()
    for lock in (mine, theirs, holder):
        lock.close()


def test_sqlites_own_lock_held_outside_the_flock_is_waited_for_no_longer(tmp_path):
    db = tmp_path / "s.db"
    store = SqliteJobStore(db)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        waited, error = _timed(_write(store, "during"), LOCK_WAIT + 10)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert isinstance(error, WriteLockBusy), error
    assert waited < LOCK_WAIT + GRACE, waited


def test_many_threads_take_turns_on_the_lock_with_another_process_writing(tmp_path):
    """The hand-over through the helper loses no turn and lets no two writers in at once."""
    db = Path(tmp_path / "s.db")
    store, other = SqliteJobStore(db), SqliteJobStore(db)
    inside, overlaps = [0], []
    guard = threading.Lock()

    def writer(s: SqliteJobStore, name: str) -> None:
        for n in range(40):
            with s.transaction() as tx:
                with guard:
                    inside[0] += 1
                    overlaps.append(inside[0])
                tx.conn.execute("INSERT INTO meta (key, value) VALUES (?, 'x')", (f"{name}-{n}",))
                with guard:
                    inside[0] -= 1

    threads = [threading.Thread(target=writer, args=(s, f"{i}")) for i, s in enumerate([store, other] * 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert max(overlaps) == 1
    (count,) = store.connection().execute("SELECT COUNT(*) FROM meta WHERE value = 'x'").fetchone()
    assert count == 240
