"""How big the transactions of a long catch-up are on the Datastore store: entities
written, entities read and lookup calls per transaction, and time, on the Datastore
emulator (started here).

    python bench/commit_budget.py [--minutes M]

An every-second job's chain is broken for M minutes (20: 1,200 fire times); then its
tick comes, and every tick it arms for now runs until nothing is due. The same for a
resume after M minutes of pause. Legacy Datastore takes at most 500 entities in one
commit. Runs on older versions of the store too (without its lookup counter).
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.emulator import datastore_emulator  # noqa: E402
from engine import operations  # noqa: E402
from engine.adapters.cloud.datastore_store import DatastoreJobStore  # noqa: E402
from engine.config_import import JobSnapshot, ProjectSnapshot  # noqa: E402
from engine.ports import DeliveryResult  # noqa: E402
from engine.service import build_engine  # noqa: E402
from statemachine.definition import JobDefinition  # noqa: E402
from statemachine.policy import JobPolicy  # noqa: E402
from tests.contract.queues import EtaQueue  # noqa: E402
from tests.engine.harness import FakeClock  # noqa: E402
from tests.support.commits import MeteredStore  # noqa: E402


class Succeeding:
    def deliver(self, request):
        return DeliveryResult("succeeded", detail="ok")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=20)
    args = parser.parse_args()
    with datastore_emulator() as emulator:
        for scenario in (broken_chain, long_pause):
            emulator.reset()
            scenario(emulator, timedelta(minutes=args.minutes))


def setup(emulator):
    clock, queue = FakeClock(), EtaQueue()
    clock.current = clock.current.replace(microsecond=500_000)
    store = MeteredStore(DatastoreJobStore(emulator.client(), queue))
    engine = build_engine(store, {"noop": Succeeding()}, clock, secret=b"bench")
    schedule = "* * * * * ?"
    job = JobSnapshot("job", JobPolicy(schedule_text=schedule, revision="r"),
                      JobDefinition(id="job", schedule=schedule, target={"noop": {}}), False)
    engine.configs.import_project(ProjectSnapshot("bench", "v1", jobs=(job,)))
    return clock, queue, store, engine


def drain(clock, queue, engine) -> None:
    while queue.run_due(clock.current, engine.tasks.handle):
        pass


def broken_chain(emulator, broken: timedelta) -> None:
    clock, queue, store, engine = setup(emulator)
    lost = [task for task in queue.sent if task.kind == "tick"][-1]
    queue.__init__()  # the chain breaks: every pending task is lost
    clock.current += broken
    store.commits.clear()
    started = time.perf_counter()
    engine.tasks.handle(lost)
    drain(clock, queue, engine)
    report(f"every-second job, one tick after {broken} of broken chain", store, time.perf_counter() - started)


def long_pause(emulator, paused: timedelta) -> None:
    clock, queue, store, engine = setup(emulator)
    operations.pause(engine, "bench", "job")
    drain(clock, queue, engine)
    clock.current += paused
    store.commits.clear()
    started = time.perf_counter()
    operations.resume(engine, "bench", "job")
    drain(clock, queue, engine)
    report(f"every-second job, resumed after {paused} of pause", store, time.perf_counter() - started)


def report(title: str, store: MeteredStore, seconds: float) -> None:
    commits = store.commits
    largest = store.largest()
    lookups = "n/a" if largest.lookups is None else f"{store.most_lookups()}"
    print(title)
    written = sum(commit.entities for commit in commits)
    print(f"  transactions {len(commits)}, {seconds:.2f} s in all; entities written {written:,}")
    print(f"  largest transaction: {largest.entities:,} entities written, {largest.reads:,} read,"
          f" {largest.seconds:.2f} s; most lookup calls in one transaction: {lookups}")
    verdict = "within" if largest.entities <= 500 else "OVER"
    print(f"  legacy Datastore's 500 entities per commit: {verdict}")


if __name__ == "__main__":
    main()
