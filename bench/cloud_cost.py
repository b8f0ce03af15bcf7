"""What one invocation of a cron job costs on the cloud adapters: Datastore entity
reads and writes and Cloud Tasks enqueues, counted by the store.

    python bench/cloud_cost.py [--jobs N] [--minutes M]

Runs the real engine on the real DatastoreJobStore against the Datastore
emulator (started here), with a fake clock and an in-memory ETA-ordered queue
standing in for Cloud Tasks (what is counted is what the store hands it).
Goal: at most 2 entity writes and 1 task enqueue per invocation of a cron job. The
figures then go through bench/cost_model.py, which prints what they cost a month
(docs/COST.md explains the model).
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cost_model import Usage, print_model  # noqa: E402
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
    engine = build_engine(store, {"http": target, "noop": target}, clock, secret=b"bench")
    snapshots = tuple(
        JobSnapshot(f"cron-{i}", JobPolicy(schedule_text=schedule, revision="r"),
                    JobDefinition(id=f"cron-{i}", schedule=schedule, target={"noop": {}}), False)
        for i in range(jobs)
    )
    engine.configs.import_project(ProjectSnapshot("bench", "v1", jobs=snapshots))
    store.reset_counters()
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
    # The queries are the watchdog's, one a minute whatever the number of jobs: a fixed
    # 43,200 a month (cents), left out of what one invocation costs.
    return Usage(reads=counters["reads"] / invocations, writes=writes, enqueues=enqueues)


if __name__ == "__main__":
    main()
