"""The embedded database is checked before it is served, and copied while it is: real
files made by the store, damaged the ways the chaos review damaged them."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from engine.adapters.local.integrity import DamagedDatabase, backup_database, check_database
from engine.adapters.local.sqlite_store import SqliteJobStore

ROOT = Path(__file__).resolve().parents[2]


def _filled_store(path: Path, rows: int = 3000) -> SqliteJobStore:
    """A store whose file holds some hundreds of pages (meta rows of 400 bytes each)."""
    store = SqliteJobStore(path)
    with store.transaction() as tx:
        tx.conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                            [(f"filler-{n}", f"{n:0400d}") for n in range(rows)])
    return store


def _checkpointed(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def test_a_sound_database_and_a_new_path_pass(tmp_path):
    _filled_store(tmp_path / "sound.db")
    check_database(tmp_path / "sound.db")
    check_database(tmp_path / "not-yet.db")


def test_garbage_in_the_middle_of_the_file_is_refused_naming_the_file_and_the_way_out(tmp_path):
    db = tmp_path / "sundial.db"
    _filled_store(db)
    _checkpointed(db)
    size = db.stat().st_size
    assert size > 512 * 1024
    with open(db, "r+b") as file:
        file.seek(size // 2)
        file.write(b"\xff" * 16 * 1024)  # 4 pages no b-tree page can be
    with pytest.raises(DamagedDatabase) as refused:
        check_database(db)
    message = str(refused.value)
    assert str(db) in message and "quick_check" in message
    assert "restore the newest backup" in message and ".recover" in message and "\n" not in message


def test_an_empty_main_file_beside_a_wal_is_refused(tmp_path):
    db = tmp_path / "sundial.db"
    store = _filled_store(db)  # its connection still open: the rows are in the -wal
    assert Path(f"{db}-wal").stat().st_size > 0
    os.truncate(db, 0)
    with pytest.raises(DamagedDatabase, match=r"is empty \(0 bytes\) beside a \d+-byte sundial.db-wal"):
        check_database(db)
    os.remove(db)
    with pytest.raises(DamagedDatabase, match="is missing beside"):
        check_database(db)
    del store


def test_the_check_gives_up_quietly_at_its_time_budget(tmp_path):
    db = tmp_path / "big.db"
    _filled_store(db, rows=20000)
    check_database(db, budget=0.0)  # no verdict in time: served, not refused


def test_serve_on_a_damaged_database_exits_1_with_one_line(tmp_path):
    db = tmp_path / "sundial.db"
    _filled_store(db)
    _checkpointed(db)
    with open(db, "r+b") as file:
        file.seek(db.stat().st_size // 2)
        file.write(b"\xff" * 16 * 1024)  # 4 pages no b-tree page can be
    (tmp_path / "configs").mkdir()
    done = subprocess.run([sys.executable, "main.py", "serve", "--port", "0", "--db", str(db),
                           "--configs", str(tmp_path / "configs")], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith(f"sundial: refusing to start: database {db} is damaged"), done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_backup_of_a_live_database_is_whole_private_and_opens(tmp_path):
    db = tmp_path / "live.db"
    store = _filled_store(db)
    writing = threading.Event()

    def keep_writing() -> None:
        n = 0
        while not writing.is_set():
            with store.transaction() as tx:
                tx.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, 'x')", (f"live-{n % 50}",))
            n += 1

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        backup_database(db, tmp_path / "copy.db", pages_per_step=16)
    finally:
        writing.set()
        writer.join()
    copy = tmp_path / "copy.db"
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert not Path(f"{copy}-wal").exists()
    conn = sqlite3.connect(f"{copy.as_uri()}?mode=ro", uri=True)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert conn.execute("SELECT count(*) FROM meta WHERE key LIKE 'filler-%'").fetchone() == (3000,)
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() is not None
    conn.close()
