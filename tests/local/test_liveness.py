"""The process registry and the attempt holds of the embedded backend
(engine/adapters/local/liveness.py): how a process is judged gone, where holds are
written on every commit path, and a database of the schema before them."""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from app.importer import snapshot_of
from config.settings import Heartbeat, from_environment
from engine.adapters.local import schema
from engine.adapters.local.dispatcher import Dispatcher, InlineDispatcher, Wakeup
from engine.adapters.local.liveness import ProcessIdentity, ProcessRegistry, SqliteAttemptHolds, is_alive, this_process
from engine.adapters.local.sqlite_queue import SqliteTaskQueue
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.service import build_engine
from statemachine.durations import UTC
from statemachine.policy import RetryPolicy, Tuning
from tests.engine.harness import START, FakeClock, Harness, RecordingTarget

TIMEOUT = timedelta(seconds=20)


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_process_is_alive_only_with_its_own_pid_and_start_time_on_this_machine():
    me = this_process()
    assert is_alive(me, me.machine) is True
    assert is_alive(ProcessIdentity(me.machine, me.pid, str(int(me.started) + 1), "x"), me.machine) is False
    assert is_alive(me, "another machine") is None
    child = subprocess.Popen(["sleep", "30"])
    running = ProcessIdentity(me.machine, child.pid, Path(f"/proc/{child.pid}/stat").read_text()
                              .rsplit(")", 1)[1].split()[19], "c")
    assert is_alive(running, me.machine) is True
    os.kill(child.pid, 9)
    deadline = time.monotonic() + 5
    while _state(child.pid) != "Z" and time.monotonic() < deadline:  # killed, not yet reaped
        time.sleep(0.01)
    assert is_alive(running, me.machine) is False
    child.wait()
    assert is_alive(running, me.machine) is False


def test_the_registry_forgets_a_gone_process_once_it_holds_nothing(tmp_path, caplog):
    store, clock = SqliteJobStore(tmp_path / "s.db"), FakeClock()
    me = this_process()
    other = ProcessIdentity(me.machine, me.pid, me.started, "other")  # running, as far as the kernel knows
    mine, theirs = ProcessRegistry(store, me, clock, TIMEOUT), ProcessRegistry(store, other, clock, TIMEOUT)
    mine.heartbeat()
    theirs.heartbeat()
    ids = lambda: sorted(r[0] for r in store.connection().execute("SELECT id FROM processes"))  # noqa: E731
    assert ids() == sorted([me.id, other.id])
    clock.advance(seconds=21)
    assert mine.gone_among({me.id, other.id, "never.registered"}) == {other.id, "never.registered"}
    mine.heartbeat()
    assert ids() == [me.id]
    with caplog.at_level(logging.WARNING):  # it was only stalled: it comes back
        theirs.heartbeat()
    assert "taken for gone" in caplog.text and ids() == sorted([me.id, other.id])
    theirs.deregister()
    assert ids() == [me.id]


def test_a_database_of_the_schema_before_holds_is_upgraded_in_place_and_works(tmp_path, monkeypatch):
    # The database as today's release makes it: schema 6 (this branch writes the same
    # rows into the tables both have), with an attempt in flight when the process died.
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:6])
    old = Harness(tmp_path, sqlite=True)
    old.define(retry=RetryPolicy(2))
    old.run_until(START + timedelta(seconds=59))
    old.clock.current = START + timedelta(minutes=1)
    leased = old.queue.lease_due(old.clock.now(), 10, timedelta(seconds=30))
    [stepped] = old.engine.tasks.step_many([item.task for item in leased])
    [(_, lost)] = stepped.deliveries
    tables = {row[0] for row in old.store.inner.connection().execute("SELECT name FROM sqlite_master")}
    assert "held_attempts" not in tables and old.store.read_meta("schema_version") == "6"
    monkeypatch.undo()

    store = SqliteJobStore(tmp_path / "sundial.db")  # opened by this release
    conn = store.connection()
    version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert version == (str(len(schema.MIGRATIONS)),)
    assert conn.execute("SELECT count(*) FROM held_attempts").fetchone() == (0,)  # the old attempt has none
    clock = FakeClock(old.clock.now())
    registry = ProcessRegistry(store, this_process(), clock, TIMEOUT)
    target = RecordingTarget()
    engine = build_engine(store, {"noop": target}, clock, Tuning(), secret=b"s",
                          holds=SqliteAttemptHolds(store, registry))
    registry.heartbeat()
    assert engine.interruptions.settle() == 0  # nobody is known to hold it: the watchdog's, as before
    dispatcher = InlineDispatcher(SqliteTaskQueue(store), engine.tasks.handle, clock)
    target.check = lambda request: held.append(conn.execute("SELECT holder FROM held_attempts").fetchall())
    held: list = []
    for _ in range(5 * 60):
        clock.advance(seconds=1)
        dispatcher.run_due_now()
        if clock.now().second == 0:
            engine.maintenance.run_watchdog()
    rows, _ = store.list_invocations("proj", "job", 100, None)
    statuses = {row.id: row.status for row in rows}
    # The old attempt has no holder to be found gone: the watchdog re-issues it when its
    # lease runs out, as before (meanwhile the job's occurrences are SKIPPED/overlap).
    assert statuses.pop(lost.invocation_id) == "SUCCEEDED"
    assert set(statuses.values()) <= {"SUCCEEDED", "SKIPPED"} and rows[0].status == "SUCCEEDED"
    assert [r.invocation_id for r in target.requests][0] == lost.invocation_id
    assert all(h == [(registry.me.id,)] for h in held)  # every new attempt held while out
    assert conn.execute("SELECT count(*) FROM held_attempts").fetchone() == (0,)


def test_the_batched_pipeline_holds_each_attempt_while_it_is_out(tmp_path):
    # Many jobs' attempts committed as starting in one transaction, then sent.
    wakeup = Wakeup()
    store = SqliteJobStore(tmp_path / "s.db", on_enqueue=wakeup.task_enqueued)
    registry = ProcessRegistry(store, this_process(), _SystemClock(), TIMEOUT)
    target = RecordingTarget()
    engine = build_engine(store, {"noop": target}, _SystemClock(), Tuning(), secret=b"s",
                          holds=SqliteAttemptHolds(store, registry))
    registry.heartbeat()
    held = []
    target.check = lambda request: held.append(store.connection().execute(
        "SELECT holder FROM held_attempts WHERE invocation_id = ?", (request.invocation_id,)).fetchall())
    jobs = 40
    _import_one_offs(engine, jobs)
    dispatcher = Dispatcher(SqliteTaskQueue(store), engine.tasks, _SystemClock(), wakeup, workers=4)
    dispatcher.start()
    try:
        deadline = time.monotonic() + 20
        while (len(target.requests) < jobs or store.connection().execute(
                "SELECT count(*) FROM held_attempts").fetchone() != (0,)) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        dispatcher.stop()
    assert len(target.requests) == jobs
    assert held == [[(registry.me.id,)]] * jobs
    assert store.connection().execute("SELECT count(*) FROM held_attempts").fetchone() == (0,)


class _SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


def _import_one_offs(engine, count: int) -> None:
    at = datetime.fromtimestamp(int(time.time()) + 2, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = "jobs:\n" + "".join(f"  - id: j{i}\n    at: [\"{at}\"]\n    target: {{noop: {{}}}}\n" for i in range(count))
    data = text.encode()
    engine.configs.import_project(snapshot_of("p", Path("p.yaml"), data, hashlib.sha256(data).hexdigest(), "local"))


def test_the_heartbeat_is_tuned_from_the_environment_and_its_timeout_must_exceed_its_period():
    assert from_environment({}).heartbeat == Heartbeat(timedelta(seconds=5), timedelta(seconds=20))
    assert from_environment({"SUNDIAL_HEARTBEAT_PERIOD": "500ms"}).heartbeat == Heartbeat(
        timedelta(milliseconds=500), timedelta(seconds=2))
    tuned = from_environment({"SUNDIAL_HEARTBEAT_PERIOD": "1s", "SUNDIAL_HEARTBEAT_TIMEOUT": "3s"})
    assert tuned.heartbeat == Heartbeat(timedelta(seconds=1), timedelta(seconds=3))
    with pytest.raises(SystemExit):
        from_environment({"SUNDIAL_HEARTBEAT_PERIOD": "5s", "SUNDIAL_HEARTBEAT_TIMEOUT": "5s"})
