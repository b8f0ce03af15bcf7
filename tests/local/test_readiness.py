"""What /readyz says, from the facts engine/adapters/local/readiness.py keeps (a fake
monotonic clock: the thing under test is the verdict, not the waiting)."""

from __future__ import annotations

import sqlite3

from engine.adapters.local.readiness import Readiness, StorageHealth, write_probe
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.metrics import Metrics


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_ready_only_while_the_latest_write_is_recent_and_succeeded_and_the_loop_goes_round():
    ticks, metrics = Ticks(), Metrics()
    health = StorageHealth(metrics, ticks)
    since_round: list[float | None] = [None]
    readiness = Readiness(health, lambda: since_round[0])
    assert readiness.report()[0] is False  # nothing written, no round yet
    health.succeeded()
    since_round[0] = 0.5
    assert readiness.report() == (True, {"storage": {"ok": True, "seconds_ago": 0.0},
                                         "dispatcher": {"ok": True, "seconds_ago": 0.5}})
    health.failed("commit", sqlite3.OperationalError("database or disk is full"))
    ready, checks = readiness.report()
    assert not ready and checks["storage"]["error"] == "storage is failing: database or disk is full"
    assert metrics.counter("sundial_storage_errors_total", operation="commit") == 1
    health.succeeded()
    ticks.now += 11  # no write for longer than a write's outcome stands for
    assert readiness.report()[1]["storage"]["error"] == "no write succeeded recently"
    health.succeeded()
    since_round[0] = 30.0
    ready, checks = readiness.report()
    assert not ready and checks["storage"]["ok"] and "has not gone round for 30s" in checks["dispatcher"]["error"]


def test_the_store_reports_each_commit_and_the_probe_its_own_write(tmp_path):
    health = StorageHealth(Metrics())
    store = SqliteJobStore(tmp_path / "s.db", health=health)
    assert health.state()["error"] == "no write attempted yet"
    store.shared_secret(lambda: "secret")  # a transaction of the store's
    assert health.state()["ok"]
    blocker = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    write_probe(store.path, health, store.write_lock, timeout=0.1)
    assert health.state()["error"] == "storage is failing: database is locked"
    assert health.metrics.counter("sundial_storage_errors_total", operation="probe") == 1
    blocker.execute("COMMIT")
    write_probe(store.path, health, store.write_lock, timeout=0.1)
    assert health.state()["ok"]


def test_a_write_that_waits_too_long_is_not_health_though_it_has_not_failed():
    ticks = Ticks()
    health = StorageHealth(Metrics(), ticks)
    health.succeeded()
    with health.writing():  # e.g. waiting for a write lock a frozen process holds
        ticks.now += 9
        health.succeeded()  # another thread's write (the probe's) went through meanwhile
        assert health.state()["ok"]
        ticks.now += 2
        assert health.state()["error"].startswith("a write has waited 11s for the database")
    assert health.state()["ok"]  # it ended


def test_the_probe_fails_while_another_process_holds_the_write_lock(tmp_path):
    # The probe wrote past the store's write lock (the flock beside the database), so a
    # process holding it made the store's commits fail while the probe's succeeded, and
    # /readyz went back and forth between 503 and 200.
    import fcntl
    import os

    from engine.adapters.local.write_lock import WriteLock, lock_path

    health = StorageHealth(Metrics())
    store = SqliteJobStore(tmp_path / "s.db", health=health)
    holder = os.open(lock_path(store.path), os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        write_probe(store.path, health, WriteLock(store.path, wait=0.1), timeout=0.1)
        assert "write lock" in health.state()["error"]
    finally:
        fcntl.flock(holder, fcntl.LOCK_UN)
        os.close(holder)
    write_probe(store.path, health, WriteLock(store.path, wait=0.1), timeout=0.1)
    assert health.state()["ok"]
