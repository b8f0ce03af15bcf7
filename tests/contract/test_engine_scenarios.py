"""The engine harness's scenarios on every backend: a fake clock, tasks run as
they fall due, a recording target instead of the network."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from engine.config_import import JobSnapshot, ProjectSnapshot
from engine.ports import Task
from engine.service import build_engine
from statemachine.definition import JobDefinition
from statemachine.policy import JobPolicy, Tuning
from statemachine.vocabulary import TaskKind
from tests.engine.harness import START, FakeClock, RecordingTarget


class Scenario:
    def __init__(self, backend):
        self.backend, self.clock, self.target = backend, FakeClock(), RecordingTarget()
        targets = {"http": self.target, "noop": self.target}
        self.engine = build_engine(backend.store, targets, self.clock, Tuning(), secret=b"s")
        self.handle = self.engine.tasks.handle

    def define(self, job_id: str = "job", schedule: str = "every 1m") -> None:
        policy = JobPolicy(schedule_text=schedule, revision="v1")
        definition = JobDefinition(id=job_id, schedule=schedule, target={"noop": {}})
        job = JobSnapshot(job_id, policy, definition, False)
        self.engine.configs.import_project(ProjectSnapshot("proj", "v1", jobs=(job,)))

    def run_until(self, when: datetime) -> None:
        """Advance the clock through every task ETA up to `when`, running what is due."""
        while True:
            self.backend.run_due(self.clock.now(), self.handle)
            wake = self.backend.next_wake()
            if wake is None or wake > when:
                self.clock.current = max(self.clock.current, when)
                self.backend.run_due(self.clock.now(), self.handle)
                return
            self.clock.current = max(self.clock.current, wake)

    def invocations(self, job_id: str = "job"):
        rows, _ = self.backend.store.list_invocations("proj", job_id, 10_000, None)
        return list(reversed(rows))  # oldest first


@pytest.fixture
def scenario(backend):
    return Scenario(backend)


def test_an_every_minute_job_delivers_once_per_occurrence(scenario):
    scenario.define()
    scenario.run_until(START + timedelta(minutes=5, seconds=30))
    rows = scenario.invocations()
    assert [r.scheduled_time for r in rows] == [START + timedelta(minutes=m) for m in range(1, 6)]
    assert all(r.status == "SUCCEEDED" for r in rows)
    assert scenario.target.invocations() == [r.id for r in rows]
    assert [entry["message"] for entry in rows[0].log] == [
        "created", "attempt 1 starting", "attempt 1: succeeded", "finished: SUCCEEDED",
    ]
    record = scenario.engine.queries.job("proj", "job").record  # as readers see it: the finish applied
    assert record.active == () and record.tick_at == START + timedelta(minutes=6)


def test_every_task_delivered_twice_still_delivers_each_occurrence_once(scenario):
    def twice(task):
        scenario.engine.tasks.handle(task)
        scenario.engine.tasks.handle(task)

    scenario.handle = twice
    scenario.define()
    scenario.run_until(START + timedelta(minutes=4, seconds=30))
    assert len(scenario.invocations()) == 4
    assert len(scenario.target.requests) == 4
    assert len(set(scenario.target.invocations())) == 4


def test_the_watchdog_repairs_a_lost_tick(scenario):
    scenario.define()
    scenario.run_until(START + timedelta(minutes=1, seconds=30))
    if scenario.backend.name == "sqlite":
        scenario.backend.store.connection().execute("DELETE FROM tasks")
    elif scenario.backend.name == "memory":
        scenario.backend.queue.clear()
    else:
        scenario.backend.queue.__init__()  # the queue lost everything
    assert scenario.backend.next_wake() is None
    scenario.clock.current = START + timedelta(minutes=5)
    assert scenario.engine.maintenance.run_watchdog() == 1
    scenario.run_until(START + timedelta(minutes=6, seconds=30))
    times = [r.scheduled_time for r in scenario.invocations()]
    assert times[0] == START + timedelta(minutes=1) and times[-1] == START + timedelta(minutes=6)
    assert len(times) == len(set(times))


def test_a_task_handed_back_runs_again_at_its_time_under_a_name_of_its_own(backend):
    scenario = Scenario(backend)
    scenario.define()  # every minute: the first tick is due at START + 1 min
    ticks = []
    backend.run_due(START, lambda task: ticks.append(task))  # nothing is due yet
    assert ticks == []
    tick_names = [n for n in backend.queued_names() if n.startswith("tick/")]
    [name] = tick_names
    original = Task(name, TaskKind.TICK, {"project": "proj", "job": "job",
                                          "nonce": scenario.engine.queries.job("proj", "job").record.tick_nonce},
                    START + timedelta(minutes=1))
    again = scenario.engine.tasks.hand_back(original, timedelta(seconds=30))
    assert again.name != name and again.eta == START + timedelta(seconds=30)
    assert again.name in backend.queued_names()
