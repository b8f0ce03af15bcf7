"""The store's write lock across processes: a writer waits for another process's
transaction and gets the lock at once when it ends, not after a busy-handler sleep."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.adapters.local.write_lock import WriteLock, lock_path

ROOT = Path(__file__).resolve().parents[2]


def _holder(db: Path, seconds: float) -> subprocess.Popen:
    """Another process that opens the store, holds a write transaction for `seconds`,
    and prints 'held' once it has it and 'released' with the time it let go."""
    code = textwrap.dedent(f"""
        import sys, time
        from engine.adapters.local.sqlite_store import SqliteJobStore
        store = SqliteJobStore({str(db)!r})
        with store.transaction() as tx:
            tx.conn.execute("INSERT INTO meta (key, value) VALUES ('holder', 'x')")
            print("held", flush=True)
            time.sleep({seconds})
            released = time.time()
        print("released", released, flush=True)
        sys.stdin.read()
    """)
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                            stdin=subprocess.PIPE, text=True)


def test_a_writer_gets_the_lock_as_soon_as_another_process_lets_go(tmp_path):
    db = tmp_path / "s.db"
    store = SqliteJobStore(db)
    holder = _holder(db, 0.5)
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.time()
        with store.transaction() as tx:
            got = time.time()
            assert tx.conn.execute("SELECT value FROM meta WHERE key = 'holder'").fetchone() == ("x",)
        released = float(holder.stdout.readline().split()[1])
        assert got - started > 0.3  # it waited for the other process's transaction
        # Woken by the flock at once; SQLite's busy handler would sleep 100 ms at a
        # time by now. Generous, as a loaded machine may be slow to run the waiter.
        assert got - released < 0.5
    finally:
        holder.kill()
        holder.wait()


def test_another_process_holds_the_file_lock_during_its_transaction(tmp_path):
    db = tmp_path / "s.db"
    SqliteJobStore(db)
    holder = _holder(db, 60)
    fd = os.open(lock_path(str(db)), os.O_RDWR)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        holder.kill()
        holder.wait()
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # gone with the process that held it
    os.close(fd)


def test_a_killed_holder_does_not_keep_the_lock(tmp_path):
    db = tmp_path / "s.db"
    store = SqliteJobStore(db)
    holder = _holder(db, 60)
    try:
        assert holder.stdout.readline().strip() == "held"
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        started = time.time()
        with store.transaction() as tx:
            tx.conn.execute("INSERT INTO meta (key, value) VALUES ('after', 'y')")
        assert time.time() - started < 2
    finally:
        if holder.poll() is None:
            holder.kill()


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    db = tmp_path / "s.db"
    SqliteJobStore(db)
    code = textwrap.dedent("""
        import sys
        from engine.adapters.local.sqlite_store import SqliteJobStore
        store = SqliteJobStore(sys.argv[1])
        for i in range(300):
            with store.transaction() as tx:
                (n,) = tx.conn.execute("SELECT COALESCE(MAX(CAST(value AS INTEGER)), 0) FROM meta"
                                       " WHERE key LIKE 'n-%'").fetchone()
                tx.conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (f"n-{n + 1}", str(n + 1)))
    """)
    writers = [subprocess.Popen([sys.executable, "-c", code, str(db)], cwd=ROOT) for _ in range(2)]
    assert [w.wait(60) for w in writers] == [0, 0]
    count = SqliteJobStore(db).connection().execute("SELECT COUNT(*) FROM meta WHERE key LIKE 'n-%'").fetchone()
    assert count == (600,)  # every read-then-write saw the other's commits


def test_the_lock_file_sits_next_to_the_database(tmp_path):
    db = tmp_path / "s.db"
    lock = WriteLock(str(db))
    with lock:
        pass
    assert os.path.exists(lock_path(str(db)))
    lock.close()
    in_memory = WriteLock(":memory:")  # nothing to share: the thread lock alone
    with in_memory:
        pass


def test_the_database_and_its_directory_are_private_whatever_the_umask(tmp_path):
    import os
    import stat

    from engine.adapters.local.sqlite_store import SqliteJobStore

    old = os.umask(0o002)
    try:
        path = tmp_path / "state" / "s.db"
        store = SqliteJobStore(path)
        store.shared_secret(lambda: "secret")  # writes: the -wal and -shm files exist now
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in path.parent.iterdir()}
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert modes and all(mode == 0o600 for mode in modes.values()), modes
        assert {"s.db", "s.db-wal"} <= set(modes)
    finally:
        os.umask(old)
