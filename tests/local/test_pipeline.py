"""The dispatcher's batched path for tick and start tasks (engine/adapters/local/pipeline.py),
on a real SQLite store and queue and the real threaded dispatcher, its record retries
shortened (LocalTuning.record_backoff). The clock runs at the real pace, set just short of
the occurrences' time once they are imported; where tasks back off (0.5 s, 1 s, 2 s ...),
a test moves it on faster than that (tests/support/clocks.py).

What it must keep of the one-task-at-a-time path: every occurrence delivered once,
its attempt committed as starting before the call, its result recorded, its tasks
deleted; and one task's trouble (its storage, its send) stays its own."""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from app.importer import snapshot_of
from engine.adapters.local.dispatcher import Dispatcher, Wakeup
from engine.adapters.local.sqlite_queue import SqliteTaskQueue
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.adapters.local.tuning import LocalTuning
from engine.ports import StoreError
from engine.retry import Backoff
from engine.service import build_engine
from statemachine.actions import Deliver
from statemachine.events import TickArrived
from statemachine.policy import Tuning
from tests.engine.harness import BEFORE, ROLLBACK, FlakyStore, RecordingTarget
from tests.faults.support import WriteBeforeCall
from tests.support.clocks import SetClock

PROJECT = "pipe"
SHORT_OF = timedelta(milliseconds=50)  # how far short of the occurrences' time the clock is set
# Long enough that a test moving the clock on never outruns a lease (renewed every 10 s of real time).
LEASE = timedelta(minutes=10)
LOOK_EVERY = timedelta(milliseconds=50)  # the dispatcher's longest sleep: it notices a clock moved on
HURRY = timedelta(milliseconds=200)  # the clock runs 5x while tasks back off
# A result that could not be committed is tried again on a timer of real time: 50 ms, 100 ms ... 0.5 s here.
SMALL = LocalTuning(record_backoff=Backoff(first=timedelta(milliseconds=50), most=timedelta(milliseconds=500)))


class Rig:
    def __init__(self, tmp_path, workers: int = 8, tuning: Tuning | None = None, local: LocalTuning = SMALL):
        self.local = local
        self.wakeup = Wakeup()
        self.clock = SetClock()
        self.store = FlakyStore(SqliteJobStore(tmp_path / "sundial.db", on_enqueue=self.wakeup.task_enqueued))
        self.target = RecordingTarget()
        self.engine = build_engine(self.store, {"noop": self.target}, self.clock, tuning or Tuning(), secret=b"s")
        self.queue = SqliteTaskQueue(self.store.inner)
        self.workers = workers
        self.restart()

    def restart(self) -> None:
        """A new dispatcher, as the next `serve` would start (a stopped one stays stopped)."""
        self.dispatcher = Dispatcher(self.queue, self.engine.tasks, self.clock, self.wakeup, self.workers,
                                     lease=LEASE, max_sleep=LOOK_EVERY, tuning=self.local)

    def import_one_offs(self, count: int, lead: float = 1.0) -> list[str]:
        """`count` jobs, each one occurrence at the first whole second `lead` s from now;
        the clock is then set just short of it."""
        at = self.clock.next_whole_second(after=timedelta(seconds=lead))
        stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        ids = [f"j{i:04d}" for i in range(count)]
        text = "jobs:\n" + "".join(f"  - id: {job}\n    at: [\"{stamp}\"]\n    target: {{noop: {{}}}}\n"
                                   for job in ids)
        data = text.encode()
        snapshot = snapshot_of(PROJECT, Path(f"{PROJECT}.yaml"), data, hashlib.sha256(data).hexdigest(), "local")
        self.engine.configs.import_project(snapshot)
        # An occurrence whose time passed during the import gets no tick: the test would
        # wait for deliveries that never come (a busy machine took over a second for 200).
        assert self.clock.now() < at - SHORT_OF, f"importing {count} jobs took longer than the lead of {lead} s"
        self.clock.set(at - SHORT_OF)
        return ids

    def run_until_delivered(self, count: int, seconds: float = 30, hurry: timedelta = timedelta(0)) -> None:
        """Run the dispatcher until `count` are delivered and recorded; the clock moves
        on `hurry` more every 50 ms (task backoffs pass that much faster)."""
        self.dispatcher.start()
        try:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                if len(self.target.requests) >= count and not self.queue.pending() and self._all_finished():
                    return
                time.sleep(0.05)
                self.clock.forward(hurry)
        finally:
            self.dispatcher.stop()

    def _all_finished(self) -> bool:
        return all(row.status == "SUCCEEDED" for row in self.invocations())

    def invocations(self):
        rows = self.store.inner.connection().execute(
            "SELECT project, job_id FROM jobs WHERE project = ?", (PROJECT,)).fetchall()
        found = []
        for project, job_id in rows:
            found += self.store.inner.list_invocations(project, job_id, 100, None)[0]
        return found


def _assert_each_delivered_once(rig: Rig, ids: list[str]) -> None:
    calls = Counter(request.job_id for request in rig.target.requests)
    assert sorted(calls) == ids
    assert set(calls.values()) == {1}
    rows = rig.invocations()
    assert len(rows) == len(ids)
    assert {row.status for row in rows} == {"SUCCEEDED"}
    assert rig.queue.pending() == 0


def test_a_burst_goes_through_in_batches_each_delivered_once_after_its_commit(tmp_path):
    rig = Rig(tmp_path)
    check = WriteBeforeCall(rig.store.inner)
    rig.target.check = check
    ids = rig.import_one_offs(300)
    transactions = []
    inner_run = rig.store.inner.run_in_transaction
    rig.store.inner.run_in_transaction = lambda body: transactions.append(1) or inner_run(body)
    rig.run_until_delivered(len(ids))
    _assert_each_delivered_once(rig, ids)
    assert check.checked == 300 and check.violations == []
    # One at a time it takes two transactions per delivery; batched, far fewer.
    assert len(transactions) < 300


def test_storage_failing_now_and_then_loses_and_doubles_nothing(tmp_path):
    rig = Rig(tmp_path)
    check = WriteBeforeCall(rig.store.inner)
    rig.target.check = check
    chance = random.Random(7)
    failed = Counter()

    def fault(step: str):
        mode = chance.choice((None,) * 8 + (BEFORE, ROLLBACK))
        if mode is not None:
            failed[mode] += 1
        return mode

    ids = rig.import_one_offs(100)
    rig.store.fault = fault
    rig.run_until_delivered(len(ids), seconds=60, hurry=HURRY)
    assert failed[BEFORE] > 0 and failed[ROLLBACK] > 0
    _assert_each_delivered_once(rig, ids)
    assert check.violations == []


def test_a_send_that_raises_fails_only_its_own_task(tmp_path):
    rig = Rig(tmp_path, workers=4)
    ids = rig.import_one_offs(40)
    raised = threading.Event()

    def check(request):
        if request.job_id == "j0007" and not raised.is_set():
            raised.set()
            raise RuntimeError("a bug in a sender")

    rig.target.check = check
    rig.dispatcher.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len({r.job_id for r in rig.target.requests}) < 39:
            time.sleep(0.05)
    finally:
        rig.dispatcher.stop()
    assert raised.is_set()
    delivered = Counter(request.job_id for request in rig.target.requests)
    assert set(delivered) == set(ids) - {"j0007"}  # the other 39 went out, once each
    assert set(delivered.values()) == {1}
    # j0007's attempt was stored as starting before the call that raised; its task
    # was handed back (as on the one-at-a-time path) and the watchdog owns the rest.
    stored = rig.store.inner.get_job(PROJECT, "j0007")
    assert stored.record.active and stored.record.active[0].started_mask == 1


def test_a_store_that_is_down_delivers_nothing_until_it_is_back(tmp_path):
    rig = Rig(tmp_path)
    ids = rig.import_one_offs(50)
    rig.store.fault = lambda step: BEFORE
    rig.dispatcher.start()
    try:
        for _ in range(10):  # 2.5 s of the clock's: the tasks fail and back off again while it is down
            time.sleep(0.05)
            rig.clock.forward(HURRY)
        assert rig.target.requests == []  # nothing sent without its attempt stored
        assert rig.store.injected[("", BEFORE)] >= 1
        rig.store.fault = None
        deadline = time.monotonic() + 30  # each task backs off 0.5 s, 1 s, 2 s ...
        while time.monotonic() < deadline and (len(rig.target.requests) < 50 or not rig._all_finished()):
            time.sleep(0.05)
            rig.clock.forward(HURRY)
    finally:
        rig.dispatcher.stop()
    _assert_each_delivered_once(rig, ids)


def test_results_kept_through_a_long_storage_outage_are_recorded_within_a_second_of_its_end(tmp_path):
    # A disk full for longer than the result's commits were tried (record_tries, here 3 in
    # 0.35 s) gave the results up: each attempt then stayed held (RUNNING) until its lease ran
    # out and the watchdog issued it again (85 s after space came back, in a chaos trial).
    # Storage trouble is tried again while the attempt's lease holds, at most 0.5 s apart here.
    rig = Rig(tmp_path, local=replace(SMALL, record_tries=3))
    ids = rig.import_one_offs(20)
    full = threading.Event()
    full.set()
    rig.store.fault = lambda step: BEFORE if full.is_set() and _recording() else None
    rig.dispatcher.start()
    try:
        _wait_for(lambda: len(rig.target.requests) == 20, 20)
        time.sleep(1.5)  # the disk stays full well past the 3 tries
        assert len(_held(rig, ids)) == 20  # their results not recorded
        full.clear()
        freed = time.monotonic()
        _wait_for(lambda: not _held(rig, ids), 10)
        recovered = time.monotonic() - freed
    finally:
        rig.dispatcher.stop()
    assert recovered < 1.5, f"{len(_held(rig, ids))} results unrecorded {recovered:.2f} s after storage came back"
    _assert_each_delivered_once(rig, ids)


def _held(rig: Rig, ids: list[str]) -> list[str]:
    """The jobs whose invocation is still active (its result not recorded)."""
    return [job for job in ids if rig.store.inner.get_job(PROJECT, job).record.active]


def _recording() -> bool:
    return threading.current_thread().name.startswith("sundial-record")


def _wait_for(condition, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not condition():
        time.sleep(0.02)


def test_stop_finishes_what_was_sent_and_hands_back_the_rest(tmp_path):
    rig = Rig(tmp_path, workers=2)
    ids = rig.import_one_offs(200, lead=2)
    slow = threading.Event()
    rig.target.check = lambda request: slow.wait(0.02)
    rig.dispatcher.start()
    deadline = time.monotonic() + 20
    while len(rig.target.requests) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    rig.dispatcher.stop()
    sent = len(rig.target.requests)
    assert 5 <= sent < 200
    rows = {row.job_id: row.status for row in rig.invocations()}
    # Every request that went out had its result recorded before stop returned.
    assert all(rows.get(request.job_id) == "SUCCEEDED" for request in rig.target.requests)
    leases = rig.store.inner.connection().execute("SELECT lease_until FROM tasks").fetchall()
    assert leases and all(until == 0 for (until,) in leases)  # takeable at once by the next start
    rig.target.check = None
    rig.restart()
    rig.run_until_delivered(len(ids))
    _assert_each_delivered_once(rig, ids)


def test_a_store_error_in_a_batch_is_retried_one_by_one(tmp_path):
    rig = Rig(tmp_path)
    ids = rig.import_one_offs(30)
    inner_apply_many = rig.engine.changes.apply_many
    sizes = []

    def apply_many(changes):
        if isinstance(changes[0].event, TickArrived):  # the step stage's, not the record stage's
            sizes.append(len(changes))
            if len(sizes) == 1 and len(changes) > 1:
                raise StoreError("injected: the first batch fails")
        return inner_apply_many(changes)

    rig.engine.changes.apply_many = apply_many
    rig.run_until_delivered(len(ids))
    _assert_each_delivered_once(rig, ids)
    assert sizes[0] > 1 and sizes[1:1 + sizes[0]] == [1] * sizes[0]


def test_a_committed_attempt_never_waits_long_for_a_sender_even_behind_hung_targets(tmp_path):
    # An attempt committed as starting that waited behind hung targets past its attempt
    # timeout plus the start grace would be issued again by the watchdog while it still
    # waits: so after a quarter of the start grace, another sender takes it.
    rig = Rig(tmp_path, workers=2, tuning=Tuning(start_grace=timedelta(seconds=1)))
    ids = rig.import_one_offs(24)
    lock, committed, waited = threading.Lock(), {}, []
    inner_apply_many = rig.engine.changes.apply_many

    def apply_many(changes):
        results = inner_apply_many(changes)
        now = time.monotonic()
        with lock:
            for applied in results:
                for action in getattr(applied, "transition", None) and applied.transition.actions or ():
                    if isinstance(action, Deliver):
                        committed[action.invocation_id] = now
        return results

    def hang_the_first_two(request):
        with lock:
            waited.append(time.monotonic() - committed[request.invocation_id])
            first_two = len(waited) <= 2
        if first_two:
            time.sleep(1.0)  # both fixed senders stuck, as behind hung targets

    rig.engine.changes.apply_many = apply_many
    rig.target.check = hang_the_first_two
    rig.run_until_delivered(len(ids))
    _assert_each_delivered_once(rig, ids)
    assert rig.dispatcher._pipeline._sends.extra_started >= 1
    assert max(waited) < 0.25 + 0.4  # the bound (1 s / 4) and the supervisor's period, with slack


def test_a_result_refused_for_a_reason_other_than_storage_is_given_up_not_retried_forever(tmp_path):
    rig = Rig(tmp_path)
    rig.import_one_offs(20)
    inner_apply_many = rig.engine.changes.apply_many
    tries = Counter()

    def apply_many(changes):
        if any(c.job_id == "j0003" and not isinstance(c.event, TickArrived) for c in changes):
            tries["j0003"] += 1
            raise ValueError("a bug while recording")
        return inner_apply_many(changes)

    rig.engine.changes.apply_many = apply_many
    rig.dispatcher.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (rig.queue.pending() or len(rig.target.requests) < 20):
            time.sleep(0.05)
        time.sleep(0.4)  # long enough for the retries a storage error would get (50, 100, 200 ms)
    finally:
        rig.dispatcher.stop()
    assert len(rig.target.requests) == 20
    assert 1 <= tries["j0003"] <= 2  # its batch, then itself alone: then handed back
    assert rig.queue.pending() == 0  # the handed-back tick found its work done
    statuses = {row.job_id: row.status for row in rig.invocations()}
    assert "j0003" not in statuses and set(statuses.values()) == {"SUCCEEDED"} and len(statuses) == 19


def test_a_dispatcher_never_started_runs_no_threads_and_stops_cleanly(tmp_path):
    # `build_local` makes a dispatcher for every runtime, started or not (tools, tests).
    before = threading.active_count()
    rig = Rig(tmp_path)
    assert threading.active_count() == before
    rig.dispatcher.stop()
