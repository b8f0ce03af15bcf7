"""The release mark of staged requests (engine/adapters/local/release_marks.py): stored
before a staged request leaves, and read with a gone process's holds, so that its
staged attempts never let out are sent again rather than failed as interrupted."""

from __future__ import annotations

import hashlib
import time
from datetime import datetime, timedelta
from pathlib import Path

from app.importer import snapshot_of
from engine.adapters.local.dispatcher import Dispatcher, Wakeup
from engine.adapters.local.liveness import ProcessIdentity, ProcessRegistry, SqliteAttemptHolds, this_process
from engine.adapters.local.release_marks import PREFIX
from engine.adapters.local.sqlite_queue import SqliteTaskQueue
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.adapters.local.staged_sends import StagingParts
from engine.adapters.local.tuning import DEFAULT_LOCAL_TUNING
from engine.holds import AttemptKey
from engine.service import build_engine
from statemachine.durations import UTC
from statemachine.policy import Tuning
from tests.engine.harness import FakeClock, RecordingTarget

TIMEOUT = timedelta(seconds=20)


def test_a_gone_process_s_holds_carry_how_far_it_released(tmp_path):
    store, clock = SqliteJobStore(tmp_path / "s.db"), FakeClock()
    me = this_process()
    other = ProcessIdentity(me.machine, me.pid, me.started, "other")
    mine, theirs = ProcessRegistry(store, me, clock, TIMEOUT), ProcessRegistry(store, other, clock, TIMEOUT)
    mine.heartbeat()
    theirs.heartbeat()
    holds = SqliteAttemptHolds(store, theirs)
    since = clock.now()
    with store.transaction() as tx:
        holds.hold(tx, AttemptKey("p", "staged", "inv-1", 0, 1))
    # Before the mark, what it holds may only have been sent at its commit.
    clock.advance(seconds=21)
    (held,) = SqliteAttemptHolds(store, mine).orphaned(10)
    assert held.holder == other.id and held.released_until == since
    at = clock.now()
    holds.release_up_to(at)
    holds.release_up_to(at + DEFAULT_LOCAL_TUNING.release_mark_span)  # covered: not written again
    assert holds.marks.written == 1
    (held,) = SqliteAttemptHolds(store, mine).orphaned(10)
    assert held.released_until == at + DEFAULT_LOCAL_TUNING.release_mark_span


def test_a_staged_request_leaves_only_once_its_time_is_covered_by_the_stored_mark(tmp_path):
    wakeup = Wakeup()
    store = SqliteJobStore(tmp_path / "s.db", on_enqueue=wakeup.task_enqueued)
    registry = ProcessRegistry(store, this_process(), _SystemClock(), TIMEOUT)
    target = RecordingTarget()
    engine = build_engine(store, {"noop": target}, _SystemClock(), Tuning(stage_ahead=timedelta(seconds=1)),
                          secret=b"s", holds=SqliteAttemptHolds(store, registry))
    registry.heartbeat()
    seen = []  # (the request's time, the mark stored when it left)

    def check(request):
        row = store.connection().execute("SELECT value FROM meta WHERE key = ?",
                                         (PREFIX + registry.me.id,)).fetchone()
        seen.append((request.scheduled_time.timestamp(), float(row[0]) if row else None))
    target.check = check
    text = "jobs:\n" + "".join(f"  - id: j{i}\n    schedule: \"* * * * * ?\"\n    target: {{noop: {{}}}}\n"
                               for i in range(3))
    data = text.encode()
    engine.configs.import_project(snapshot_of("p", Path("p.yaml"), data, hashlib.sha256(data).hexdigest(), "local"))
    dispatcher = Dispatcher(SqliteTaskQueue(store), engine.tasks, _SystemClock(), wakeup, workers=4,
                            staging=StagingParts(_SystemClock(), holds=engine.changes.holds))
    dispatcher.start()
    try:
        deadline = time.monotonic() + 10
        while len(seen) < 9 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        dispatcher.stop()
    assert len(seen) >= 9 and engine.tasks.changes.holds.marks.written >= 1
    # The first second's occurrences may fall due before the import could stage them
    # (it ran less than stage_ahead before them): those go unstaged, with no mark to wait for.
    staged = [(at, mark) for at, mark in seen if at > min(at for at, _ in seen)]
    assert len(staged) >= 6 and all(mark is not None and mark >= at for at, mark in staged), seen


class _SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)
