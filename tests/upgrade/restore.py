"""Open what a release left in storage with this tree's code, and drive it forward.

A fixture directory (tests/upgrade/fixtures/<release commit>/, made by
make_release_fixtures.py) holds the release's SQLite database, the entities and tasks
its Datastore store left, and the facts of the snapshot (its time, what the release
sent and stored). `open_sqlite` and `open_datastore` put them back in a real store of
today's code, with the release's pending tasks in the queue; `Resumed.play` then runs
the engine from the snapshot's time for six minutes of fake time, as a restarted
server would (the watchdog every 30 s, the unchanged config file imported again), and
keeps what happened for the tests to read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable, Iterator

from google.cloud.datastore.helpers import entity_from_protobuf
from google.cloud.datastore_v1.types import entity as entity_pb2
from google.protobuf.json_format import ParseDict

from app.importer import snapshot_of
from engine import operations
from engine.adapters.cloud.datastore_store import DatastoreJobStore
from engine.ports import StoredJob, Task
from statemachine.durations import parse_instant
from statemachine.errors import SundialError
from statemachine.vocabulary import task_kind
from tests.contract.queues import EtaQueue
from tests.engine.harness import Harness
from web.views import invocation_view, job_view

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RELEASES = sorted(path.name for path in FIXTURES.iterdir() if (path / "sqlite.json").is_file())
DATASTORE_PROJECT = "sundial-upgrade"  # not the release's: nothing but the export carries over
WATCHDOG_PERIOD = timedelta(seconds=30)


def facts_of(release: str, backend: str) -> dict:
    return json.loads((FIXTURES / release / f"{backend}.json").read_text())


@dataclass
class Opened:
    """A release's storage opened by today's code, before anything ran."""

    facts: dict
    harness: Harness
    stored_records: Callable[[], dict[str, str]]  # job id -> its record as stored (JSON text)
    records_at_open: dict[str, str]
    stored_keys: Callable[[], set[tuple]]  # the key of every job and invocation stored
    keys_at_open: set[tuple]
    schema_versions: tuple[int, int] | None = None  # SQLite: (in the release's file, after opening)


# --- SQLite ------------------------------------------------------------------------------------

def open_sqlite(release: str, directory: Path) -> Opened:
    """The release's database file, copied and opened in place (its migrations run)."""
    path = directory / "sundial.db"
    shutil.copyfile(FIXTURES / release / "sqlite.db", path)
    before = schema_version(path)
    records_at_open, keys_at_open = sqlite_records(path), sqlite_keys(path)
    harness = Harness(directory, sqlite=True)  # SqliteJobStore(directory / "sundial.db"): migrates
    return Opened(facts_of(release, "sqlite"), harness, lambda: sqlite_records(path), records_at_open,
                  lambda: sqlite_keys(path), keys_at_open, (before, schema_version(path)))


def _read(path: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(path)  # a connection of its own: committed data only
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def schema_version(path: Path) -> int:
    return int(_read(path, "SELECT value FROM meta WHERE key = 'schema_version'")[0][0])


def sqlite_records(path: Path) -> dict[str, str]:
    return dict(_read(path, "SELECT job_id, record FROM jobs"))


def sqlite_keys(path: Path) -> set[tuple]:
    jobs = {("Job", f"{project}/{job_id}") for project, job_id in _read(path, "SELECT project, job_id FROM jobs")}
    return jobs | {("Job", f"{project}/{job_id}", "Invocation", id_)
                   for project, job_id, id_ in _read(path, "SELECT project, job_id, id FROM invocations")}


# --- Datastore ---------------------------------------------------------------------------------

class RestoredBackend:
    """The release's entities in a fresh project of the emulator, its tasks in the queue
    that stands in for Cloud Tasks (the Harness's backend interface)."""

    def __init__(self, emulator, facts: dict):
        self.emulator = emulator
        load_entities(emulator, facts["entities"])
        self.queue = EtaQueue()
        for exported in facts["tasks"]:
            task = Task(exported["name"], task_kind(exported["kind"]), exported["payload"],
                        parse_instant(exported["eta"]), exported["queue"])
            # As Cloud Tasks keeps it: due at its schedule time (the one in flight at the
            # snapshot is dispatched again), whatever the ETA in its body.
            self.queue.enqueue_now([task])
            if exported["due"] != exported["eta"]:
                raise AssertionError(f"a task due apart from its ETA needs restoring by due: {exported}")
        self.store = DatastoreJobStore(emulator.client(project=DATASTORE_PROJECT), self.queue)

    def run_due(self, now: datetime, handle) -> int:
        return self.queue.run_due(now, handle)

    def next_wake(self) -> datetime | None:
        return self.queue.next_wake()


def datastore_client(emulator, project: str = DATASTORE_PROJECT):
    """A google.cloud.datastore client of the emulator (it reads DATASTORE_EMULATOR_HOST)."""
    from google.cloud import datastore

    with _emulator_env(emulator):
        return datastore.Client(project=project)


@contextmanager
def _emulator_env(emulator) -> Iterator[None]:
    saved = os.environ.get("DATASTORE_EMULATOR_HOST")
    os.environ["DATASTORE_EMULATOR_HOST"] = emulator.host
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("DATASTORE_EMULATOR_HOST", None)
        else:
            os.environ["DATASTORE_EMULATOR_HOST"] = saved


def load_entities(emulator, exported: list[dict]) -> None:
    """Write each exported entity, properties and index settings as they were, in this project."""
    entities = []
    for data in exported:
        message = ParseDict(data, entity_pb2.Entity.pb()())
        message.key.partition_id.project_id = DATASTORE_PROJECT
        entities.append(entity_from_protobuf(message))
    datastore_client(emulator).put_multi(entities)


def datastore_records(emulator) -> dict[str, str]:
    client = datastore_client(emulator)
    return {entity["job_id"]: entity["record"] for entity in client.query(kind="Job").fetch()}


def datastore_keys(emulator) -> set[tuple]:
    query = datastore_client(emulator).query()
    query.keys_only()
    return {entity.key.flat_path for entity in query.fetch() if entity.key.kind in ("Job", "Invocation")}


def open_datastore(release: str, emulator) -> Opened:
    emulator.reset()
    facts = facts_of(release, "datastore")
    backend = RestoredBackend(emulator, facts)
    harness = Harness(None, backend=backend)
    return Opened(facts, harness, lambda: datastore_records(emulator), datastore_records(emulator),
                  lambda: datastore_keys(emulator), datastore_keys(emulator))


# --- driving it forward ------------------------------------------------------------------------

@dataclass
class Resumed:
    """What today's code did with a release's storage: `play` fills it in."""

    opened: Opened
    loaded: dict[str, StoredJob] = field(default_factory=dict)  # each job as first read
    views: dict[str, dict] = field(default_factory=dict)  # each job as the API first shows it
    reimported: int = -1  # jobs the unchanged config file changed at start
    completions: dict[str, str] = field(default_factory=dict)  # invocation -> status it answered with
    paused_job: StoredJob | None = None  # the paused job just before it is resumed
    paused_sent: int = -1  # what it was sent while paused
    resumed_at: datetime | None = None
    rows: dict[str, list] = field(default_factory=dict)  # each job's history at the end, oldest first
    progress: dict[str, dict] = field(default_factory=dict)  # each fan-out invocation's progress rows
    jobs: dict[str, StoredJob] = field(default_factory=dict)  # each job at the end

    @property
    def facts(self) -> dict:
        return self.opened.facts

    @property
    def snapshot_time(self) -> datetime:
        return parse_instant(self.facts["snapshot_time"])

    @property
    def sent(self) -> list:
        """Every request today's code sent, in order."""
        return self.opened.harness.target.requests

    def play(self) -> "Resumed":
        h, project = self.opened.harness, self.facts["project"]
        h.clock.current = self.snapshot_time
        h.every(WATCHDOG_PERIOD, h.engine.maintenance.run_watchdog)
        for job_id in self.facts["jobs"]:
            self.loaded[job_id] = h.engine.queries.job(project, job_id)
            last = h.engine.queries.invocations(project, job_id, 1, None)[0]
            self.views[job_id] = job_view(self.loaded[job_id], last[0] if last else None, h.clock.now())
        self.reimported = self._import_config(h)
        h.run_until(self.snapshot_time + timedelta(seconds=30))  # the fan-out's events, the notification
        self._complete_accepted(h)
        h.run_until(self.snapshot_time + timedelta(minutes=1, seconds=40))
        self.paused_job = h.store.get_job(project, "paused")
        self.paused_sent = sum(1 for r in self.sent if r.job_id == "paused")
        self.resumed_at = h.clock.now()
        operations.resume(h.engine, project, "paused")
        h.run_until(self.snapshot_time + timedelta(minutes=6, seconds=10))
        for job_id in self.facts["jobs"]:
            self.rows[job_id] = h.invocations(job_id, project)
            self.jobs[job_id] = h.engine.queries.job(project, job_id)
        for rows in self.rows.values():
            for row in rows:
                invocation_view(row, with_log=True)  # every row renders as the API shows it
        for row in self.rows["fanout"]:
            self.progress[row.id] = h.store.run_in_transaction(
                lambda tx, row=row: tx.list_progress(project, "fanout", row.id))
        return self

    def _import_config(self, h: Harness) -> int:
        """What `serve` does at start: import the project file, unchanged since the release."""
        data = self.facts["config"].encode()
        project = self.facts["project"]
        snapshot = snapshot_of(project, Path(f"{project}.yaml"), data, hashlib.sha256(data).hexdigest(), "local")
        return h.engine.configs.import_project(snapshot)

    def _complete_accepted(self, h: Harness) -> None:
        """The targets that answered the release 202 report their completion now, with
        the token the release gave them."""
        for sent in self.facts["sent"]:
            if sent["outcome"] != "accepted":
                continue
            try:
                row = operations.complete(h.engine, self.facts["project"], sent["job"], sent["invocation"],
                                          sent["completion_token"], succeeded=True)
            except SundialError as refused:  # for the test that reads it to say, not the whole run
                self.completions[sent["invocation"]] = f"refused: {refused}"
            else:
                self.completions[sent["invocation"]] = row.status
