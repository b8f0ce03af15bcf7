"""What one invocation of a cron job costs on the cloud adapters: Datastore entity
reads and writes and Cloud Tasks enqueues, counted by the store.

    python bench/cloud_cost.py [--jobs N] [--minutes M]

Runs the real engine on the real DatastoreJobStore against the Datastore
emulator (started here), with a fake clock and an in-memory ETA-ordered queue
standing in for Cloud Tasks (what is counted is what the store hands it).
Goal (issue 4): at most 3 entity writes and 2 task enqueues per invocation.
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.adapters.cloud.datastore_store import DatastoreJobStore  # noqa: E402
from engine.config_import import JobSnapshot, ProjectSnapshot  # noqa: E402
from engine.ports import DeliveryResult  # noqa: E402
from engine.service import build_engine  # noqa: E402
from statemachine.definition import JobDefinition
from statemachine.policy import JobPolicy  # noqa: E402
from tests.contract.queues import EtaQueue  # noqa: E402
from tests.engine.harness import FakeClock  # noqa: E402
from tests.support.emulators import DatastoreEmulator  # noqa: E402


class CountingTarget:
    def __init__(self):
        self.count = 0

    def deliver(self, request):
        self.count += 1
        return DeliveryResult("succeeded", detail="ok")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--minutes", type=int, default=10)
    args = parser.parse_args()
    emulator = DatastoreEmulator()
    reason = emulator.unavailable()
    if reason:
        raise SystemExit(f"cannot run: {reason}")
    emulator.start()
    try:
        run(emulator, args.jobs, args.minutes)
    finally:
        emulator.stop()


def run(emulator, jobs: int, minutes: int) -> None:
    clock, queue, target = FakeClock(), EtaQueue(), CountingTarget()
    store = DatastoreJobStore(emulator.client(), queue)
    engine = build_engine(store, {"http": target, "noop": target}, clock, secret=b"bench")
    snapshots = tuple(
        JobSnapshot(f"cron-{i}", JobPolicy(schedule_text="0 * * * * ?", revision="r"),
                    JobDefinition(id=f"cron-{i}", schedule="0 * * * * ?", target={"noop": {}}), False)
        for i in range(jobs)
    )
    engine.configs.import_project(ProjectSnapshot("bench", "v1", jobs=snapshots))
    store.reset_counters()
    until = clock.current + timedelta(minutes=minutes)
    while True:
        queue.run_due(clock.current, engine.tasks.handle)
        wake = queue.next_wake()
        if wake is None or wake > until:
            break
        clock.current = max(clock.current, wake)
    counters = store.reset_counters()
    invocations = target.count
    print(f"cloud cost: {jobs} jobs '0 * * * * ?', {minutes} simulated minutes, {invocations} invocations")
    for name in ("reads", "queries", "writes", "enqueues", "transactions"):
        print(f"  {name + ' per invocation':28} {counters[name] / invocations:6.2f}"
              f"   ({counters[name]:,} in all)")
    writes, enqueues = counters["writes"] / invocations, counters["enqueues"] / invocations
    verdict = "met" if writes <= 3 and enqueues <= 2 else "MISSED"
    print(f"  goal <= 3 writes and <= 2 enqueues per invocation: {verdict}")


if __name__ == "__main__":
    main()
