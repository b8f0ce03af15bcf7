"""The dispatcher's stop (engine/adapters/local/pipeline.py, `stop`), on a real SQLite store
and queue, the process registry and its attempt holds, the threaded dispatcher, the
system clock and a real HTTP receiver on 127.0.0.1.

From the stop on nothing is written to a target: not a request staged ahead for its
time, not one waiting for a sender. Those attempts, committed and never sent, go back
to their start tasks under their invocation ids (their holds released) in the stop's
last commit, and the next dispatcher sends them as attempt 1. A request on the wire is
waited for until the stop's deadline and no longer; its hold stays, for the next start
to settle (engine/interruptions.py)."""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

from app.importer import snapshot_of
from engine.adapters.local.dispatcher import Dispatcher, Wakeup
from engine.adapters.local.liveness import ProcessRegistry, SqliteAttemptHolds, this_process
from engine.adapters.local.sqlite_queue import SqliteTaskQueue
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.adapters.local.staged_sends import StagingParts
from engine.clock import SystemClock
from engine.service import build_engine
from engine.targets.http import HttpTarget
from statemachine.durations import UTC
from statemachine.policy import Tuning
from tests.e2e.support import Receiver, wait_until

PROJECT = "stop"


class Rig:
    def __init__(self, tmp_path, tuning: Tuning, workers: int = 4, delays: dict | None = None):
        self.receiver = Receiver(delays=delays or {})
        self.wakeup = Wakeup()
        self.store = SqliteJobStore(tmp_path / "sundial.db", on_enqueue=self.wakeup.task_enqueued)
        self.registry = ProcessRegistry(self.store, this_process(), SystemClock(), timedelta(seconds=20))
        self.registry.heartbeat()
        http = HttpTarget("local")
        self.engine = build_engine(self.store, {"http": http}, SystemClock(), tuning, secret=b"s",
                                   holds=SqliteAttemptHolds(self.store, self.registry),
                                   staging={"http": http}, jobs=self.store)
        self.queue = SqliteTaskQueue(self.store)
        self.workers = workers
        self.dispatcher = self.new_dispatcher()

    def new_dispatcher(self) -> Dispatcher:
        staging = StagingParts(SystemClock(), self.engine.deliveries.batch_writer, self.engine.changes.holds,
                               self.store.records.written_text)
        return Dispatcher(self.queue, self.engine.tasks, SystemClock(), self.wakeup, self.workers, staging=staging)

    def import_one_offs(self, count: int, lead: float, path: str = "/hit") -> tuple[list[str], datetime]:
        """`count` jobs, each one occurrence at the whole second after `lead` s from now."""
        at = datetime.fromtimestamp(int(time.time() + lead) + 1, UTC)
        stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        ids = [f"j{i:03d}" for i in range(count)]
        target = f"{{http: {{url: '{self.receiver.url}{path}', timeout: 60s}}}}"
        text = "jobs:\n" + "".join(f"  - id: {job}\n    at: [\"{stamp}\"]\n    target: {target}\n" for job in ids)
        data = text.encode()
        snapshot = snapshot_of(PROJECT, Path(f"{PROJECT}.yaml"), data, hashlib.sha256(data).hexdigest(), "local")
        self.engine.configs.import_project(snapshot)
        return ids, at

    def entries(self, ids: list[str]) -> list:
        jobs = self.store.get_jobs([(PROJECT, job) for job in ids])
        return [entry for job in jobs.values() for entry in job.record.active]

    def holds(self) -> int:
        return self.store.connection().execute("SELECT count(*) FROM held_attempts").fetchone()[0]

    def start_tasks(self) -> int:
        return self.store.connection().execute("SELECT count(*) FROM tasks WHERE kind = 'start'").fetchone()[0]

    def statuses(self, ids: list[str]) -> Counter:
        rows = [row for job in ids for row in self.store.list_invocations(PROJECT, job, 10, None)[0]]
        return Counter((row.status, row.attempt) for row in rows)

    def arrivals(self) -> Counter:
        return Counter((a.headers["X-Sundial-Invocation"], a.headers["X-Sundial-Attempt"])
                       for a in self.receiver.arrivals)


def _stop_within(rig: Rig, seconds: float) -> float:
    began = time.monotonic()
    rig.dispatcher.stop(began + seconds)
    return time.monotonic() - began


def test_requests_held_for_their_time_are_never_written_after_the_stop_and_go_back_to_their_starts(tmp_path):
    rig = Rig(tmp_path, Tuning(stage_ahead=timedelta(seconds=3)))
    try:
        ids, at = rig.import_one_offs(20, lead=3.5)
        rig.dispatcher.start()
        assert wait_until(lambda: sum(e.started_mask for e in rig.entries(ids)) == len(ids),
                          timeout=at.timestamp() - time.time() - 0.5), "not staged half a second before T"
        invocations = sorted(entry.invocation_id for entry in rig.entries(ids))
        assert rig.holds() == len(ids)
        assert _stop_within(rig, 5.0) < 1.5  # nothing is on the wire: nothing to wait for
        assert all(e.started_mask == 0 and e.attempts == (1,) for e in rig.entries(ids))  # back to waiting
        assert (rig.holds(), rig.start_tasks()) == (0, len(ids))
        time.sleep(max(at.timestamp() + 0.5 - time.time(), 0.0))
        assert rig.receiver.arrivals == []  # their time came: nothing was written

        rig.dispatcher = rig.new_dispatcher()  # the next start
        rig.dispatcher.start()
        assert wait_until(lambda: rig.statuses(ids) == Counter({("SUCCEEDED", 1): len(ids)}), timeout=20)
        assert rig.arrivals() == Counter({(invocation, "1"): 1 for invocation in invocations})
    finally:
        rig.dispatcher.stop()
        rig.receiver.close()


def test_a_stop_waits_for_requests_on_the_wire_until_its_deadline_and_sends_none_that_wait_for_a_sender(tmp_path):
    # One worker, so one sender: the first request is on the wire for 30 s, the others
    # wait for the sender (up to a quarter of the start grace before an extra one starts).
    rig = Rig(tmp_path, Tuning(stage_ahead=timedelta(0)), workers=1, delays={"/hit": 30})
    try:
        ids, at = rig.import_one_offs(4, lead=0.5)  # (one worker leases 4 tasks at a time)
        rig.dispatcher.start()
        assert wait_until(lambda: rig.receiver.arrivals and rig.holds() == len(ids), timeout=10)
        took = _stop_within(rig, 1.5)
        assert 1.4 < took < 1.5 + 1.0  # the deadline, and the last commits after it
        time.sleep(0.5)
        [on_the_wire] = rig.receiver.arrivals
        assert rig.holds() == 1  # left for the next start to settle (engine/interruptions.py)
        waiting = [e for e in rig.entries(ids) if e.invocation_id != on_the_wire.headers["X-Sundial-Invocation"]]
        assert len(waiting) == len(ids) - 1 and all(e.started_mask == 0 and e.attempts == (1,) for e in waiting)
        assert rig.start_tasks() == len(ids) - 1
    finally:
        rig.dispatcher.stop(time.monotonic())
        rig.receiver.close()
