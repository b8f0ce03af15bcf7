"""No step of a job writes more than one legacy Datastore commit takes (500 entities),
however long the backlog it handles, on the Datastore emulator (which, like
production's Firestore mode, would take more): an every-second job after 20 minutes
of broken chain, a resume after 20 minutes of pause, a timing change over such a
backlog, a buffered backlog dropped by a pause or a disable. Each time is recorded
exactly once, and the lookups before the SKIPPED rows are batched.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from engine import operations
from engine.adapters.cloud.datastore_store import DatastoreJobStore
from engine.config_import import JobSnapshot, ProjectSnapshot
from engine.ports import DeliveryResult
from engine.service import build_engine
from statemachine.budget import COMMIT_ENTITY_LIMIT, ROWS_PER_STEP
from statemachine.definition import JobDefinition
from statemachine.policy import Catchup, JobPolicy, Overlap
from statemachine.schedule import fire_times, parse_schedule
from tests.contract.queues import EtaQueue
from tests.engine.harness import FakeClock
from tests.faults.support import SCALE
from tests.support.commits import MeteredStore

EVERY_SECOND = "* * * * * ?"
# 540 fire times: more than one commit takes. The long run (SUNDIAL_FAULTS_SCALE >= 2)
# has the 20 minutes (1,200 times) of the measured case (bench/commit_budget.py).
BROKEN = timedelta(minutes=20 if SCALE >= 2 else 9)


class Succeeding:
    def deliver(self, request):
        return DeliveryResult("succeeded", detail="ok")


class World:
    def __init__(self, emulator):
        self.clock, self.queue = FakeClock(), EtaQueue()
        self.clock.current = self.clock.current.replace(microsecond=500_000)
        self.store = MeteredStore(DatastoreJobStore(emulator.client(), self.queue))
        self.engine = build_engine(self.store, {"noop": Succeeding()}, self.clock, secret=b"test")

    def configure(self, revision: str = "r1", schedule: str = EVERY_SECOND, disabled: bool = False, **policy):
        snapshot = JobSnapshot("job", JobPolicy(schedule_text=schedule, revision=revision, **policy),
                               JobDefinition(id="job", schedule=schedule, target={"noop": {}}), disabled)
        self.engine.configs.import_project(ProjectSnapshot("proj", revision, jobs=(snapshot,)))

    def lose_the_chain(self) -> None:
        """Every pending task is lost: the next tick comes only when `tick_again` says."""
        self.lost = [task for task in self.queue.sent if task.kind == "tick"][-1]
        self.queue.__init__()

    def tick_again(self) -> None:
        self.engine.tasks.handle(self.lost)
        self.drain()

    def drain(self) -> None:
        """Run what is due now, and the ticks it arms for now, until nothing is due."""
        while self.queue.run_due(self.clock.current, self.engine.tasks.handle):
            pass

    def history(self) -> dict:
        rows, token = [], None
        while True:
            page, token = self.store.list_invocations("proj", "job", 1000, token)
            rows += page
            if token is None:
                return {row.scheduled_time: row for row in rows}

    def check_budget(self) -> None:
        largest = self.store.largest()
        assert largest.entities <= COMMIT_ENTITY_LIMIT, largest
        # The job, the existence check of the SKIPPED rows, an invocation at most: never one per row.
        assert self.store.most_lookups() <= 4


@pytest.fixture
def world(datastore):
    return World(datastore)


def times(after, through) -> list:
    return list(fire_times(parse_schedule(EVERY_SECOND, "UTC"), after, through))


def test_a_tick_after_a_long_broken_chain_records_each_missed_time_once_within_budget(world):
    world.configure()
    start = world.clock.current
    world.lose_the_chain()
    world.clock.current += BROKEN
    world.store.commits.clear()
    world.tick_again()
    world.check_budget()
    history = world.history()
    due = times(start, world.clock.current)
    assert len(due) == BROKEN.total_seconds() and set(due) <= set(history)
    assert len(history) == len(due)
    statuses = [history[moment].status for moment in due]
    # catchup: latest, superseded by the newest time, which is on time: that one runs.
    assert statuses[:-1] == ["SKIPPED"] * (len(due) - 1) and statuses[-1] == "SUCCEEDED"
    assert {history[moment].reason for moment in due[:-1]} == {"missed"}
    assert max(commit.entities for commit in world.store.commits) <= ROWS_PER_STEP + 1  # the rows and the job


def test_a_resume_after_a_long_pause_records_each_paused_time_once_within_budget(world):
    world.configure()
    operations.pause(world.engine, "proj", "job")
    start = world.clock.current
    world.drain()
    world.clock.current += BROKEN
    world.store.commits.clear()
    operations.resume(world.engine, "proj", "job")
    world.drain()
    world.check_budget()
    history = world.history()
    paused = [moment for moment in times(start, world.clock.current) if moment > start]
    assert {history[moment].reason for moment in paused} == {"paused"}
    assert len([row for row in history.values() if row.reason == "paused"]) == len(paused) == len(history)


def test_a_timing_change_over_a_long_backlog_records_it_within_budget(world):
    world.configure()
    start = world.clock.current
    world.lose_the_chain()
    world.clock.current += BROKEN
    world.store.commits.clear()
    world.configure(revision="r2", schedule="*/2 * * * * ?")
    world.drain()
    world.check_budget()
    history = world.history()
    due = times(start, world.clock.current)
    assert set(due) <= set(history)
    assert len(history) == len(due)
    assert [history[moment].status for moment in due[:-1]] == ["SKIPPED"] * (len(due) - 1)


@pytest.mark.parametrize("stop", ["pause", "disable"])
def test_a_caught_up_backlog_dropped_by_a_stop_is_recorded_within_budget(world, stop):
    world.configure(overlap=Overlap.BUFFER_ALL, catchup=Catchup.ALL)
    start = world.clock.current
    world.lose_the_chain()
    world.clock.current += BROKEN
    world.engine.tasks.handle(world.lost)  # the first runs; the others wait, as one run
    assert world.store.get_job("proj", "job").record.runs
    world.store.commits.clear()
    if stop == "pause":
        operations.pause(world.engine, "proj", "job")
    else:
        world.configure(revision="r2", disabled=True, overlap=Overlap.BUFFER_ALL, catchup=Catchup.ALL)
    world.drain()
    world.check_budget()
    history = world.history()
    due = times(start, world.clock.current)
    assert set(due) <= set(history) and len(history) == len(due)
    skipped = [history[moment] for moment in due if history[moment].status == "SKIPPED"]
    assert len(skipped) >= len(due) - 2
    assert {row.reason for row in skipped} == {"paused" if stop == "pause" else "disabled"}
    assert not world.store.get_job("proj", "job").record.dropping
