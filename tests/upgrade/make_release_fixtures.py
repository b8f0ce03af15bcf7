"""Make the upgrade fixtures: what a release of Sundial leaves in storage, for tests/upgrade.

Run it with a release checkout's code on the path, from this tree (it writes here):

    git worktree add /tmp/sundial-release <release commit>    # or any checkout of it
    PYTHONPATH=/tmp/sundial-release .venv/bin/python tests/upgrade/make_release_fixtures.py

It imports only the release's code (the product, and its tests/support/emulators.py to
start the Datastore emulator) and refuses to run on this tree's own. It drives the
release's real engine (build_engine, a fake clock, each task run when it falls due, the
watchdog every 30 s) through one scenario twice, on the release's SqliteJobStore and
on its DatastoreJobStore over the Datastore emulator, and writes
tests/upgrade/fixtures/<release commit>/:

    sqlite.db        the SQLite database as the release left it at the snapshot
    sqlite.json      the snapshot's time and what the release did and stored (facts)
    datastore.json   the same facts, every entity as a Datastore protobuf (JSON, without
                     its project), and the tasks the release had enqueued (the stand-in
                     for Cloud Tasks; the one being run at the snapshot is `in_flight`)

The scenario (project `proj`, times UTC on 2026-01-05; config in CONFIG below):
- 10:00 the project is imported; every job fires every minute, `notify` once;
- 10:02:10 `paused` is paused through the API;
- 10:02:30-10:06:30 the process is down: nothing runs, ticks arrive late after it;
- `buffered` (overlap buffer_all): its 10:01 target answered 202 and owes its completion,
  so the following occurrences wait in its buffer;
- `catchup` (catchup all): after the downtime its 10:03 catch-up answered 202, and the
  other caught-up occurrences wait behind it;
- `fanout` (4 events over 60 s, 3 attempts): its 10:07 occurrence is mid-way at the
  snapshot: event 0 succeeded, event 1 failed its first attempt and waits its retry,
  events 2 and 3 wait their start tasks;
- `notify` failed at 10:07:18; its on_failure notification failed twice and is pending;
- `inflight`: the snapshot is taken at 10:07:20, while its attempt is being delivered:
  committed as starting, never answered (a process killed mid-request).
The script checks each of these against what the release stored, and fails if one does
not hold (a release that behaves otherwise needs the scenario looked at again).
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
TREE = HERE.parents[1]  # this tree: where the fixtures go, never what runs


def _release_root() -> Path:
    try:
        import statemachine
    except ImportError:
        sys.exit("make_release_fixtures: put a release checkout on PYTHONPATH (see the top of this file)")
    root = Path(statemachine.__file__).resolve().parents[1]
    if root == TREE:
        sys.exit("make_release_fixtures: run it with a release checkout first on PYTHONPATH, not this tree")
    return root


RELEASE = _release_root()

from app.importer import snapshot_of  # noqa: E402  (the release's, found through PYTHONPATH)
from engine import operations  # noqa: E402
from engine.adapters.cloud.datastore_store import DatastoreJobStore  # noqa: E402
from engine.adapters.local.dispatcher import InlineDispatcher  # noqa: E402
from engine.adapters.local.schema import MIGRATIONS  # noqa: E402
from engine.adapters.local.sqlite_queue import SqliteTaskQueue  # noqa: E402
from engine.adapters.local.sqlite_store import SqliteJobStore  # noqa: E402
from engine.ports import DeliveryResult, RetryTask  # noqa: E402
from engine.service import build_engine  # noqa: E402
from statemachine.record import RECORD_VERSION  # noqa: E402

UTC = timezone.utc
PROJECT = "proj"
SECRET = b"s"  # keys the completion tokens (as tests/engine/harness.py)
START = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
PAUSE_AT = START + timedelta(minutes=2, seconds=10)
DOWN_AT = START + timedelta(minutes=2, seconds=30)
UP_AT = START + timedelta(minutes=6, seconds=30)
SNAPSHOT = START + timedelta(minutes=7, seconds=20)
WATCHDOG_PERIOD = timedelta(seconds=30)
CONFIG = """\
allowed_hosts: [alerts.example]
jobs:
  - id: ordinary
    schedule: "* * * * *"
    target: {noop: {}}
  - id: fanout
    schedule: "* * * * *"
    fanout: {count: 4, spread: 60s}
    retry: {max_attempts: 3, min_backoff: 10s}
    target: {noop: {}}
  - id: buffered
    schedule: "* * * * *"
    overlap: buffer_all
    target: {noop: {}}
  - id: catchup
    schedule: "* * * * *"
    catchup: {policy: all, window: 1h}
    target: {noop: {}}
  - id: paused
    schedule: every 1m
    target: {noop: {}}
  - id: notify
    schedule: "18 7 10 * * ?"
    target: {noop: {}}
    on_failure: {http: {url: "http://alerts.example/hook"}}
  - id: inflight
    schedule: "20 * * * * ?"
    target: {noop: {}}
"""


def text(instant: datetime | None) -> str | None:
    return None if instant is None else instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def at(minute: int, second: int = 0) -> datetime:
    return START + timedelta(minutes=minute, seconds=second)


class Clock:
    def __init__(self) -> None:
        self.current = START

    def now(self) -> datetime:
        return self.current


class Target:
    """The network: answers as the scenario needs, records what the release sent, and
    takes the snapshot while `inflight`'s 10:07:20 attempt is on its way."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.sent: list[dict] = []
        self.snapshot = None  # called with no arguments at the snapshot's instant
        self.taken = False
        self.failure: BaseException | None = None  # the snapshot's, kept from the engine's handlers

    def deliver(self, request) -> DeliveryResult:
        notification = "http" in request.target
        sent = {
            "job": request.job_id, "invocation": request.invocation_id,
            "scheduled_time": text(request.scheduled_time), "at": text(self.clock.now()),
            "kind": "notification" if notification else "event",
            "event": request.event_index, "attempt": request.attempt,
        }
        self.sent.append(sent)
        if request.job_id == "inflight" and request.scheduled_time == SNAPSHOT and not self.taken:
            sent["outcome"] = None  # never answered: the process "dies" here
            self.taken = True
            try:
                self.snapshot()
            except BaseException as error:
                self.failure = error
            return DeliveryResult("succeeded")
        result = self.answer(request, notification)
        sent["outcome"] = result.outcome
        if result.outcome == "accepted":
            sent["completion_token"] = request.completion_token
        return result

    @staticmethod
    def answer(request, notification: bool) -> DeliveryResult:
        job, scheduled = request.job_id, request.scheduled_time
        if job == "notify":
            return DeliveryResult("failed", "http 502" if notification else "http 500")
        if (job, scheduled) in (("buffered", at(1)), ("catchup", at(3))):
            return DeliveryResult("accepted", detail="202")
        if job == "fanout" and scheduled == at(7) and (request.event_index, request.attempt) == (1, 1):
            return DeliveryResult("failed", "http 503")
        return DeliveryResult("succeeded", detail="200")


class MemoryQueue:
    """Cloud Tasks, in memory and in ETA order: a name still pending is not queued twice."""

    def __init__(self) -> None:
        self.heap: list = []
        self.pending: set[str] = set()
        self.order = itertools.count()
        self.running = None  # (task, due) while its handler runs

    def enqueue_now(self, tasks) -> None:
        for task in tasks:
            self.push(task, task.eta)

    def push(self, task, due: datetime) -> None:
        if task.name not in self.pending:
            self.pending.add(task.name)
            heapq.heappush(self.heap, (due, next(self.order), task))

    def next_wake(self) -> datetime | None:
        return self.heap[0][0] if self.heap else None

    def run_due(self, now: datetime, handle) -> None:
        while self.heap and self.heap[0][0] <= now:
            due, _, task = heapq.heappop(self.heap)
            self.pending.discard(task.name)
            self.running = (task, due)
            try:
                handle(task)
            except RetryTask as retry:
                self.push(task, now + retry.delay)
            except Exception:  # as Cloud Tasks retries a failed handler
                self.push(task, now + timedelta(seconds=1))
            finally:
                self.running = None

    def export(self) -> list[dict]:
        waiting = [(due, task, False) for due, _, task in sorted(self.heap, key=lambda item: item[:2])]
        if self.running is not None:
            task, due = self.running
            waiting.insert(0, (due, task, True))
        return [{"name": task.name, "kind": str(task.kind), "payload": task.payload, "eta": text(task.eta),
                 "queue": task.queue, "due": text(due), "in_flight": in_flight}
                for due, task, in_flight in waiting]


class Run:
    """One backend's run of the scenario: the engine, its queue, the clock and the watchdog."""

    def __init__(self, store, run_queue, queue_wake) -> None:
        self.clock = Clock()
        self.target = Target(self.clock)
        self.store = store
        self.engine = build_engine(store, {"noop": self.target, "http": self.target}, self.clock, secret=SECRET)
        self.run_queue, self.queue_wake = run_queue, queue_wake  # (now, handle) -> None; (now) -> time
        self.next_watchdog = START + WATCHDOG_PERIOD

    def run_due(self) -> None:
        self.run_queue(self.clock.now(), self.engine.tasks.handle)
        if not self.target.taken and self.clock.now() >= self.next_watchdog:
            self.next_watchdog = self.clock.now() + WATCHDOG_PERIOD
            self.engine.maintenance.run_watchdog()

    def run_until(self, when: datetime) -> None:
        while not self.target.taken:
            self.run_due()
            wakes = [w for w in (self.queue_wake(self.clock.now()), self.next_watchdog) if w is not None]
            if min(wakes) > when:
                self.clock.current = max(self.clock.current, when)
                self.run_due()
                return
            self.clock.current = max(self.clock.current, min(wakes))

    def play(self) -> None:
        data = CONFIG.encode()
        snapshot = snapshot_of(PROJECT, Path(f"{PROJECT}.yaml"), data, hashlib.sha256(data).hexdigest(), "local")
        self.engine.configs.import_project(snapshot)
        self.run_until(PAUSE_AT)
        operations.pause(self.engine, PROJECT, "paused", "maintenance window")
        self.run_until(DOWN_AT)
        self.clock.current, self.next_watchdog = UP_AT, UP_AT  # back up: the watchdog runs at start
        self.run_until(SNAPSHOT + timedelta(seconds=1))
        if not self.target.taken:
            raise AssertionError("the release never delivered inflight's 10:07:20 attempt")
        if self.target.failure is not None:
            raise self.target.failure

    def facts(self) -> dict:
        """What the release stored, as its own code reads it, at the snapshot's instant."""
        jobs = {}
        for stored in self.store.list_jobs(PROJECT):
            record = stored.record
            rows, _ = self.store.list_invocations(PROJECT, record.job_id, 1000, None)
            jobs[record.job_id] = {
                "state": record.state.value,
                "paused": record.paused,
                "buffered": [{"id": o.invocation_id, "scheduled_time": text(o.scheduled_time),
                              "trigger": o.trigger} for o in record.buffered],
                "active": [_active_facts(entry) for entry in record.active],
                "invocations": [_invocation_facts(row) for row in reversed(rows)],
            }
        return {
            "snapshot_time": text(self.clock.now()),
            "release": {"commit": _git(RELEASE, "rev-parse", "HEAD"),
                        "describe": _git(RELEASE, "log", "-1", "--format=%h %s")},
            "record_version": RECORD_VERSION,
            "sqlite_schema_version": len(MIGRATIONS),
            "project": PROJECT,
            "config": CONFIG,
            "completion_secret": SECRET.decode(),
            "jobs": jobs,
            "sent": list(self.target.sent),
        }


def _active_facts(entry) -> dict:
    def bits(mask: int) -> list[int]:
        return [i for i in range(entry.event_count) if mask >> i & 1]

    return {"id": entry.invocation_id, "scheduled_time": text(entry.scheduled_time), "trigger": entry.trigger,
            "event_count": entry.event_count, "attempts": list(entry.attempts),
            "started": bits(entry.started_mask), "accepted": bits(entry.accepted_mask),
            "done": bits(entry.done_mask), "failed": bits(entry.failed_mask)}


def _invocation_facts(row) -> dict:
    return {"id": row.id, "status": row.status, "reason": row.reason, "scheduled_time": text(row.scheduled_time),
            "trigger": row.trigger, "attempt": row.attempt, "event_count": row.event_count,
            "notification": [row.notification.status.value, row.notification.attempt]}


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


# --- the checks: the scenario did what it says ------------------------------------------

def check(facts: dict) -> None:
    jobs = facts["jobs"]
    assert set(jobs) == {"ordinary", "fanout", "buffered", "catchup", "paused", "notify", "inflight"}, jobs
    [fan] = jobs["fanout"]["active"]
    assert (fan["scheduled_time"], fan["event_count"]) == (text(at(7)), 4), fan
    assert (fan["done"], fan["failed"], fan["attempts"]) == ([0], [], [1, 2, 1, 1]), fan
    assert [b["scheduled_time"] for b in jobs["buffered"]["buffered"]] == [text(at(m)) for m in (2, 6, 7)]
    assert [(a["scheduled_time"], a["accepted"]) for a in jobs["buffered"]["active"]] == [(text(at(1)), [0])]
    caught = jobs["catchup"]["buffered"]
    assert [(b["scheduled_time"], b["trigger"]) for b in caught] == [(text(at(4)), "catchup"),
                                                                     (text(at(5)), "catchup")], caught
    assert [(a["scheduled_time"], a["trigger"]) for a in jobs["catchup"]["active"]] == [(text(at(3)), "catchup")]
    assert jobs["paused"]["paused"] and jobs["paused"]["state"] == "PAUSED"
    [failed] = jobs["notify"]["invocations"]
    assert failed["status"] == "FAILED" and failed["notification"][0] == "pending", failed
    [flying] = jobs["inflight"]["active"]
    assert (flying["scheduled_time"], flying["started"], flying["done"]) == (text(SNAPSHOT), [0], []), flying
    assert len(jobs["ordinary"]["invocations"]) >= 5


# --- SQLite --------------------------------------------------------------------------------

def make_sqlite(out: Path, work: Path) -> dict:
    path = work / "release.db"
    store = SqliteJobStore(path)
    queue = SqliteTaskQueue(store)
    run = Run(store, None, lambda now: queue.next_wake(now))
    dispatcher = InlineDispatcher(queue, run.engine.tasks.handle, run.clock)
    run.run_queue = lambda now, handle: dispatcher.run_due_now()
    facts: dict = {}

    def snapshot() -> None:
        _copy_database(path, out / "sqlite.db")
        facts.update(run.facts())

    run.target.snapshot = snapshot
    run.play()
    check(facts)
    return facts


def _copy_database(source: Path, target: Path) -> None:
    """What is committed in `source` now (as a killed process leaves it), into one small
    file that needs no -wal beside it."""
    target.unlink(missing_ok=True)
    reading, writing = sqlite3.connect(source), sqlite3.connect(target)
    try:
        reading.backup(writing)
        writing.execute("PRAGMA journal_mode=DELETE")
        writing.execute("PRAGMA page_size=1024")
        writing.execute("VACUUM")
    finally:
        reading.close()
        writing.close()


# --- Datastore -------------------------------------------------------------------------------

DATASTORE_PROJECT = "sundial-release"


def make_datastore(emulator) -> dict:
    client = emulator.client(project=DATASTORE_PROJECT)
    queue = MemoryQueue()
    store = DatastoreJobStore(client, queue)
    run = Run(store, queue.run_due, lambda now: queue.next_wake())
    facts: dict = {}

    def snapshot() -> None:
        facts.update(run.facts())
        facts["entities"] = export_entities(emulator)
        facts["tasks"] = queue.export()

    run.target.snapshot = snapshot
    run.play()
    check(facts)
    return facts


def export_entities(emulator) -> list[dict]:
    """Every entity of the project, as the Datastore API gives it: key path and typed
    properties with their index settings; the partition (project) left out."""
    from google.cloud import datastore
    from google.cloud.datastore.helpers import entity_to_protobuf
    from google.protobuf.json_format import MessageToDict

    saved = os.environ.get("DATASTORE_EMULATOR_HOST")
    os.environ["DATASTORE_EMULATOR_HOST"] = emulator.host
    try:
        client = datastore.Client(project=DATASTORE_PROJECT)
        entities = list(client.query().fetch())
    finally:
        if saved is None:
            os.environ.pop("DATASTORE_EMULATOR_HOST", None)
        else:
            os.environ["DATASTORE_EMULATOR_HOST"] = saved
    exported = []
    for entity in entities:
        data = MessageToDict(type(entity_to_protobuf(entity)).pb(entity_to_protobuf(entity)))
        data["key"].pop("partitionId", None)
        exported.append(data)
    return sorted(exported, key=lambda data: json.dumps(data["key"]["path"]))


# --- writing -----------------------------------------------------------------------------------

def write_json(path: Path, facts: dict) -> None:
    """Indented, except that each entity, task and delivery is one line (a readable diff)."""
    lines = ["{"]
    items = list(facts.items())
    for number, (key, value) in enumerate(items):
        comma = "," if number < len(items) - 1 else ""
        if key in ("entities", "tasks", "sent"):
            inner = ",\n".join(f"    {json.dumps(v, sort_keys=True)}" for v in value)
            lines.append(f"  {json.dumps(key)}: [\n{inner}\n  ]{comma}")
        else:
            body = json.dumps(value, indent=2, sort_keys=True).replace("\n", "\n  ")
            lines.append(f"  {json.dumps(key)}: {body}{comma}")
    path.write_text("\n".join(lines + ["}"]) + "\n")


def main() -> None:
    from tests.support import emulators  # the release's: its index.yaml, its way of starting it

    if RELEASE not in Path(emulators.__file__).resolve().parents:
        sys.exit(f"make_release_fixtures: {emulators.__file__} is not the release's")
    commit = _git(RELEASE, "rev-parse", "--short", "HEAD")
    out = HERE / "fixtures" / commit
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="sundial-release-fixtures-"))
    try:
        write_json(out / "sqlite.json", make_sqlite(out, work))
        emulator = emulators.DatastoreEmulator()
        reason = emulator.unavailable()
        if reason:
            sys.exit(f"make_release_fixtures: the Datastore emulator cannot run: {reason}")
        emulator.start()
        try:
            write_json(out / "datastore.json", make_datastore(emulator))
        finally:
            emulator.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for path in sorted(out.iterdir()):
        print(f"{path.relative_to(TREE)}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
