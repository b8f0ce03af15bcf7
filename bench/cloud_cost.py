"""What one invocation of a cron job costs on the cloud adapters: Datastore entity
reads and writes and Cloud Tasks enqueues, counted by the store.

    python bench/cloud_cost.py [--jobs N] [--minutes M]

Runs the real engine on the real DatastoreJobStore against the Datastore
emulator (started here), with a fake clock and an in-memory ETA-ordered queue
standing in for Cloud Tasks (what is counted is what the store hands it).
Goal: at most 2 entity writes and 1 task enqueue per invocation of a cron job. The
figures then go through bench/cost_model.py, which prints what they cost a month
(docs/COST.md explains the model).

It also counts the index entries the committed entities change (a value of an indexed
property that is new or differs from the one stored before, and an entry of a composite
index of index.yaml), and among them those of the indexes of times the housekeeping
selects by: Firestore takes about 500 writes a second into one range of such an index
(docs/SCALE.md). And the housekeeping's fixed cost: the queries of one watchdog run and
one clean-up pass, each billed as at least one read, every minute of the month.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import yaml
from google.cloud import ndb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cost_model import Prices, Usage, print_model  # noqa: E402
from bench.emulator import datastore_emulator  # noqa: E402
from engine.adapters.cloud.datastore_store import DatastoreJobStore  # noqa: E402
from engine.config_import import JobSnapshot, ProjectSnapshot  # noqa: E402
from engine.ports import DeliveryResult  # noqa: E402
from engine.service import build_engine  # noqa: E402
from statemachine.definition import JobDefinition
from statemachine.policy import JobPolicy  # noqa: E402
from tests.contract.queues import EtaQueue  # noqa: E402
from tests.engine.harness import FakeClock  # noqa: E402


class CountingTarget:
    def __init__(self):
        self.count = 0

    def deliver(self, request):
        self.count += 1
        return DeliveryResult("succeeded", detail="ok")


ROOT = Path(__file__).resolve().parents[1]
# Properties whose indexed value is a time (or, in the sharded layout, "shard/time").
TIME_INDEXED = {"watchdog_at", "created_time", "watchdog_key", "retention_key", "scheduled_time", "time"}


class IndexCounter:
    """Counts the index entries that the entities handed to ndb.put_multi change."""

    def __init__(self):
        self.stored: dict[tuple, object] = {}
        self.entries: Counter[str] = Counter()
        self.composites = yaml.safe_load((ROOT / "index.yaml").read_text())["indexes"]
        self._put_multi = ndb.put_multi

    def __enter__(self):
        def put_multi(entities, **options):
            for entity in entities:
                self.count(entity)
            return self._put_multi(entities, **options)

        ndb.put_multi = put_multi
        return self

    def __exit__(self, *_):
        ndb.put_multi = self._put_multi

    def count(self, entity) -> None:
        kind, values = entity._get_kind(), {}
        for prop in type(entity)._properties.values():
            value = prop._get_value(entity)
            if prop._indexed and value is not None:
                values[prop._name] = value
        for name, value in values.items():
            if self.stored.get((entity.key, name)) != value:
                self.entries[f"{kind}.{name}"] += 1
        for index in self.composites:
            names = [p["name"] for p in index["properties"]]
            if index["kind"] == kind and all(n in values for n in names):
                state = tuple(values[n] for n in names)
                if self.stored.get((entity.key, tuple(names))) != state:
                    self.entries[f"{kind}({', '.join(names)})"] += 1
                self.stored[(entity.key, tuple(names))] = state
        for name in [n for (key, n) in self.stored if key == entity.key and isinstance(n, str)]:
            self.stored.pop((entity.key, name), None)
        self.stored.update({(entity.key, name): value for name, value in values.items()})


SCHEDULES = (("every minute", "0 * * * * ?", timedelta(minutes=1)),
             ("every hour", "0 0 * * * ?", timedelta(hours=1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--periods", type=int, default=10, help="occurrences of each job per schedule")
    args = parser.parse_args()
    usages = {}
    with datastore_emulator() as emulator:
        for title, schedule, period in SCHEDULES:
            emulator.reset()  # the watchdog would otherwise see the jobs of the run before
            usages[title] = run(emulator, args.jobs, schedule, period * args.periods)
    print_model(usages["every minute"], usages["every hour"])


def run(emulator, jobs: int, schedule: str, span: timedelta) -> Usage:
    """Jobs on `schedule` for `span` of simulated time, the watchdog running every
    minute as App Engine's cron runs it; prints and returns the use per invocation."""
    clock, queue, target = FakeClock(), EtaQueue(), CountingTarget()
    store = DatastoreJobStore(emulator.client(), queue)
    with IndexCounter() as indexes:
        usage = _run(store, queue, target, clock, indexes, jobs, schedule, span)
    return usage


def _run(store, queue, target, clock, indexes, jobs: int, schedule: str, span: timedelta) -> Usage:
    engine = build_engine(store, {"http": target, "noop": target}, clock, secret=b"bench")
    snapshots = tuple(
        JobSnapshot(f"cron-{i}", JobPolicy(schedule_text=schedule, revision="r"),
                    JobDefinition(id=f"cron-{i}", schedule=schedule, target={"noop": {}}), False)
        for i in range(jobs)
    )
    engine.configs.import_project(ProjectSnapshot("bench", "v1", jobs=snapshots))
    store.reset_counters()
    indexes.entries.clear()
    until, watchdog_at = clock.current + span, clock.current + timedelta(minutes=1)
    while True:
        queue.run_due(clock.current, engine.tasks.handle)
        if clock.current >= watchdog_at:
            engine.maintenance.run_watchdog()
            watchdog_at += timedelta(minutes=1)
        wake = min(filter(None, (queue.next_wake(), watchdog_at)))
        if wake > until:
            break
        clock.current = max(clock.current, wake)
    counters = store.reset_counters()
    invocations = target.count
    print(f"cloud cost: {jobs} jobs {schedule!r}, {span} simulated, {invocations} invocations")
    for name in ("reads", "queries", "writes", "enqueues", "transactions"):
        print(f"  {name + ' per invocation':28} {counters[name] / invocations:6.2f}"
              f"   ({counters[name]:,} in all)")
    writes, enqueues = counters["writes"] / invocations, counters["enqueues"] / invocations
    verdict = "met" if writes <= 2 and enqueues <= 1 else "MISSED"
    print(f"  goal <= 2 writes and <= 1 enqueue per invocation: {verdict}")
    total = sum(indexes.entries.values())
    print(f"  {'index entries per invocation':28} {total / invocations:6.2f}   (single-property values and composites)")
    for name, count in sorted(indexes.entries.items()):
        hot = " (a time)" if name.split(".")[-1] in TIME_INDEXED or "created_time" in name else ""
        print(f"    {name:40} {count / invocations:6.2f}{hot}")
    _housekeeping_queries(store, engine, clock.current)
    # The queries are the watchdog's, one a minute whatever the number of jobs: a fixed
    # 43,200 a month (cents), left out of what one invocation costs.
    return Usage(reads=counters["reads"] / invocations, writes=writes, enqueues=enqueues)


def _housekeeping_queries(store, engine, now: datetime) -> None:
    """One watchdog run and one clean-up pass with nothing to do, as each minute has them."""
    store.reset_counters()
    engine.maintenance.run_watchdog()
    watchdog = store.reset_counters()["queries"]
    engine.maintenance.cleanup(timedelta(days=45))
    cleanup = store.reset_counters()["queries"]
    reads = (watchdog + cleanup) * 60 * 24 * 30
    print(f"  housekeeping queries a minute: watchdog {watchdog}, clean-up {cleanup}: {reads:,} reads a month, "
          f"${reads * Prices().read_per_100k / 100_000:,.2f} at list price, whatever the number of jobs")


if __name__ == "__main__":
    main()
