"""`main.py backup` copies the database of a running `serve`: the copy opens, is whole,
and is its owner's only."""

from __future__ import annotations

import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

from tests.e2e.support import ROOT, Server


def test_backup_of_a_served_database_opens_and_is_private(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    db, out = tmp_path / "sundial.db", tmp_path / "backups" / "copy.db"
    out.parent.mkdir()
    server = Server(configs, db, tmp_path / "serve.log").start()
    try:
        done = subprocess.run([sys.executable, "main.py", "backup", "--db", str(db), str(out)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"backed up {db} to {out}"
        assert server.process is not None and server.process.poll() is None  # served throughout
        live = sqlite3.connect(db)
        secret = live.execute("SELECT value FROM meta WHERE key = 'task_secret'").fetchone()
        live.close()
    finally:
        server.stop()
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert not Path(f"{out}-wal").exists()  # one file: nothing left in a -wal beside it
    copy = sqlite3.connect(f"{out.as_uri()}?mode=ro", uri=True)
    assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert copy.execute("SELECT value FROM meta WHERE key = 'task_secret'").fetchone() == secret
    assert copy.execute("SELECT count(*) FROM sqlite_master WHERE name = 'invocations'").fetchone() == (1,)
    copy.close()


def test_backup_of_a_missing_database_says_so_and_exits_1(tmp_path):
    done = subprocess.run([sys.executable, "main.py", "backup", "--db", str(tmp_path / "none.db"),
                           str(tmp_path / "copy.db")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "could not be copied" in done.stderr and "no database at" in done.stderr
    assert not (tmp_path / "copy.db").exists()
