"""How fast the watchdog repairs broken chains and the clean-up removes history.

    python bench/housekeeping.py [--stores sqlite,datastore] [--jobs N] [--rows M] [--workers W]

Watchdog: N every-minute jobs whose tasks were all lost (their records are written
with a pending tick, and no task is ever enqueued: as after a purged queue), then the
clock moves past their tick grace and `Maintenance.run_watchdog` runs until none is
due. Printed: repairs per minute, wall clock. On Datastore the repairs' tasks go to
a sender that only counts them (the Cloud Tasks CreateTask call is not measured).

Clean-up: M finished invocations older than the history, then `Maintenance.cleanup`
runs until nothing is left. Printed: rows deleted per second.

The Datastore figures come from the emulator (started here, as the contract suite
starts it); it is one JVM on this machine, slower per call than the service, and it
serializes commits, so they are a floor, not a forecast.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from google.cloud import ndb  # noqa: E402

from bench.emulator import datastore_emulator  # noqa: E402
from engine.adapters.cloud.datastore_entities import invocation_entity, job_entity  # noqa: E402
from engine.adapters.cloud.datastore_store import DatastoreJobStore  # noqa: E402
from engine.adapters.local.sqlite_store import SqliteJobStore  # noqa: E402
from engine.config_import import JobSnapshot, ProjectSnapshot  # noqa: E402
from engine.ports import InvocationRow, StoredJob  # noqa: E402
from engine.service import build_engine  # noqa: E402
from statemachine import ids  # noqa: E402
from statemachine.definition import JobDefinition  # noqa: E402
from statemachine.policy import JobPolicy  # noqa: E402
from statemachine.record import evolve  # noqa: E402
from tests.engine.harness import START, FakeClock  # noqa: E402

BATCH = 250  # rows per setup transaction
HISTORY = timedelta(days=45)


class CountingSender:
    """Stands in for Cloud Tasks: counts what the store hands it."""

    def __init__(self):
        self.created = 0

    def enqueue_now(self, tasks):
        self.created += len(tasks)


def put_in_batches(store, rows) -> None:
    """Setup, not measured: on Datastore straight through ndb, in commits of 500 (one
    transaction may not span more than 25 entity groups, and these span thousands)."""
    if isinstance(store, DatastoreJobStore):
        with store.context():
            for start in range(0, len(rows), 500):
                ndb.put_multi([job_entity(row) if isinstance(row, StoredJob) else invocation_entity(row)
                               for row in rows[start:start + 500]])
        return
    for start in range(0, len(rows), BATCH):
        chunk = rows[start:start + BATCH]

        def body(tx, chunk=chunk):
            for row in chunk:
                (tx.put_job if isinstance(row, StoredJob) else tx.put_invocation)(row)

        store.run_in_transaction(body)


def broken_chains(store, engine, jobs: int) -> None:
    """One job imported for real, copied N times with its pending tick: no task exists."""
    definition = JobDefinition(id="job-0", schedule="every 1m", target={"noop": {}})
    snapshot = JobSnapshot("job-0", JobPolicy(schedule_text="every 1m", revision="v1"), definition, False)
    engine.configs.import_project(ProjectSnapshot("bench", "v1", jobs=(snapshot,)))
    model = store.get_job("bench", "job-0")
    copies = [StoredJob(evolve(model.record, job_id=f"job-{n}"), replace(model.definition, id=f"job-{n}"))
              for n in range(1, jobs)]
    put_in_batches(store, copies)


def bench_watchdog(name: str, store, jobs: int, workers: int) -> None:
    clock = FakeClock()
    engine = build_engine(store, {"noop": _NoTarget()}, clock, secret=b"bench", repair_workers=workers)
    broken_chains(store, engine, jobs)
    clock.current = START + timedelta(minutes=5)  # every tick + grace is past
    began, repaired, runs = time.perf_counter(), 0, 0
    while True:
        done = engine.maintenance.run_watchdog(budget=timedelta(hours=1))
        repaired, runs = repaired + done, runs + 1
        if not done:
            break
    elapsed = time.perf_counter() - began
    print(f"watchdog  {name:<10} workers={workers:<2} {repaired:>7,} repairs in {elapsed:6.1f} s"
          f"  = {repaired / elapsed * 60:>9,.0f} repairs/minute ({runs - 1} run(s) and an empty one)", flush=True)


def bench_cleanup(name: str, store, rows: int) -> None:
    clock = FakeClock(START + HISTORY + timedelta(seconds=rows, days=1))
    engine = build_engine(store, {"noop": _NoTarget()}, clock, secret=b"bench")
    history = []
    for n in range(rows):
        at = START + timedelta(seconds=n)
        job_id = f"job-{n % 100}"  # a hundred jobs' histories
        history.append(InvocationRow("bench", job_id, ids.invocation_id("bench", job_id, at, ids.OCCURRENCE),
                                     "SUCCEEDED", at, "schedule", created_time=at, started_time=at,
                                     finished_time=at, attempt=1, log=[{"message": "finished: SUCCEEDED"}]))
    put_in_batches(store, history)
    began = time.perf_counter()
    removed = engine.maintenance.cleanup(HISTORY, budget=timedelta(hours=1))
    elapsed = time.perf_counter() - began
    print(f"cleanup   {name:<10} {removed:>7,} rows in {elapsed:6.1f} s = {removed / elapsed:>9,.0f} rows/s",
          flush=True)


class _NoTarget:
    def deliver(self, request):
        raise AssertionError("the bench delivers nothing")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="sqlite,datastore")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--workers", default="1,8", help="watchdog repair workers on Datastore, comma-separated")
    args = parser.parse_args()
    stores = args.stores.split(",")
    if "sqlite" in stores:
        with tempfile.TemporaryDirectory() as folder:
            bench_watchdog("sqlite", SqliteJobStore(Path(folder) / "w.db"), args.jobs, 1)
            bench_cleanup("sqlite", SqliteJobStore(Path(folder) / "c.db"), args.rows)
    if "datastore" in stores:
        with datastore_emulator() as emulator:
            for workers in (int(w) for w in args.workers.split(",")):
                emulator.reset()
                bench_watchdog("datastore", DatastoreJobStore(emulator.client(), CountingSender()), args.jobs,
                               workers)
            emulator.reset()
            bench_cleanup("datastore", DatastoreJobStore(emulator.client(), CountingSender()), args.rows)


if __name__ == "__main__":
    main()
