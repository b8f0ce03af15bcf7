"""GET /readyz tells the truth about storage, and /healthz stays liveness: a real `serve`
whose database another connection locks for some seconds (SQLite's own lock: the
simplest real "writes fail" this machine can make; chmod does not stop root)."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
from pathlib import Path

import requests

from tests.e2e.support import Server, wait_until


def _ready(server: Server) -> tuple[int, dict]:
    answer = requests.get(f"{server.url}/readyz", timeout=5)
    return answer.status_code, answer.json()


def _hold_exclusive_lock(db: Path, seconds: float, taken: threading.Event) -> None:
    conn = sqlite3.connect(db, isolation_level=None, timeout=30)
    try:
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('test_lock', 'held')")
        taken.set()
        time.sleep(seconds)
        conn.execute("COMMIT")
    finally:
        conn.close()


def test_readyz_turns_503_while_writes_fail_and_back_to_200_and_healthz_answers_throughout(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    db = tmp_path / "sundial.db"
    server = Server(configs, db, tmp_path / "serve.log").start()
    try:
        assert wait_until(lambda: _ready(server)[0] == 200, 15), _ready(server)
        status, body = _ready(server)
        assert body["ready"] is True and body["checks"]["storage"]["ok"] and body["checks"]["dispatcher"]["ok"]

        taken = threading.Event()
        holder = threading.Thread(target=_hold_exclusive_lock, args=(db, 12.0, taken), daemon=True)
        holder.start()
        assert taken.wait(10)
        locked_at, health_seconds, went_unready_after = time.monotonic(), [], None
        while holder.is_alive():
            started = time.monotonic()
            assert requests.get(f"{server.url}/healthz", timeout=5).status_code == 200
            health_seconds.append(time.monotonic() - started)
            status, body = _ready(server)
            if status == 503 and went_unready_after is None:
                went_unready_after = time.monotonic() - locked_at
                assert body["ready"] is False
                assert "storage is failing" in body["checks"]["storage"]["error"]
            time.sleep(0.2)
        assert went_unready_after is not None and went_unready_after < 6.0, went_unready_after
        assert max(health_seconds) < 1.0, max(health_seconds)

        assert wait_until(lambda: _ready(server)[0] == 200, 10), _ready(server)
        metrics = requests.get(f"{server.url}/metrics", timeout=5).text
        assert 'sundial_storage_errors_total{operation="probe"}' in metrics
        assert '"storage write failed"' in (tmp_path / "serve.log").read_text()
    finally:
        server.stop()


def test_readyz_turns_503_while_another_process_holds_the_write_lock_and_healthz_answers(tmp_path):
    """The chaos review's frozen process: the flock beside the database held, SQLite's own
    lock free. This process's writes fail after a bounded wait; /readyz must say so."""
    configs = tmp_path / "configs"
    configs.mkdir()
    db = tmp_path / "sundial.db"
    server = Server(configs, db, tmp_path / "serve.log").start()
    try:
        assert wait_until(lambda: _ready(server)[0] == 200, 15), _ready(server)
        lock = os.open(f"{db}-writelock", os.O_RDWR)
        fcntl.flock(lock, fcntl.LOCK_EX)
        held_at, health_seconds, unready = time.monotonic(), [], None
        try:
            while time.monotonic() - held_at < 18 and unready is None:
                started = time.monotonic()
                assert requests.get(f"{server.url}/healthz", timeout=5).status_code == 200
                health_seconds.append(time.monotonic() - started)
                status, body = _ready(server)
                if status == 503 and not body["checks"]["storage"]["ok"]:  # (the dispatcher's may come first)
                    unready = body
                time.sleep(0.2)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            os.close(lock)
        assert unready is not None, "never unready"
        # Its writes give up within the write lock's bound (write_lock.LOCK_WAIT) and say why.
        assert "write lock" in unready["checks"]["storage"]["error"], unready
        assert max(health_seconds) < 1.0, max(health_seconds)
        assert wait_until(lambda: _ready(server)[0] == 200, 10), _ready(server)
    finally:
        server.stop()
