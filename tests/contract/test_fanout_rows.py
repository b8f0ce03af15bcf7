"""A fan-out's events in rows of their own, on every backend: each event is delivered
once, its steps leave the job's row alone, the job's stored record does not grow
with the count, and retention takes the rows away with their invocation."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

from engine.config_import import JobSnapshot, ProjectSnapshot
from engine.ports import DeliveryResult
from statemachine import events as ev
from statemachine.definition import FanoutSpec, JobDefinition
from statemachine.policy import FanoutPolicy, JobPolicy
from statemachine.record_form import record_to_dict
from tests.contract.test_engine_scenarios import Scenario
from tests.engine.harness import START


class CountingTransaction:
    """The store's transaction, counting the job rows it writes."""

    def __init__(self, tx, counts):
        self._tx, self._counts = tx, counts

    def put_job(self, job):
        self._counts["jobs"] += 1
        return self._tx.put_job(job)

    def __getattr__(self, name):
        return getattr(self._tx, name)


def _count_job_writes(store) -> dict:
    counts = {"jobs": 0}
    run = store.run_in_transaction
    store.run_in_transaction = lambda body: run(lambda tx: body(CountingTransaction(tx, counts)))
    return counts


def _define_fanout(scenario: Scenario, count: int, spread: str = "0s") -> None:
    fanout = FanoutSpec(count, spread)
    policy = JobPolicy(schedule_text="every 1h", revision="v1",
                       fanout=FanoutPolicy(count, timedelta(seconds=int(spread[:-1]))))
    definition = JobDefinition(id="job", schedule="every 1h", target={"noop": {}}, fanout=fanout)
    job = JobSnapshot("job", policy, definition, False)
    scenario.engine.configs.import_project(ProjectSnapshot("proj", "v1", jobs=(job,)))


def _record_bytes(store) -> int:
    return len(json.dumps(record_to_dict(store.get_job("proj", "job").record)))


def test_each_event_is_delivered_once_and_no_event_step_writes_the_job_row(backend):
    scenario = Scenario(backend)
    _define_fanout(scenario, 60)
    counts = _count_job_writes(backend.store)
    scenario.run_until(START + timedelta(hours=1, seconds=30))
    [row] = scenario.invocations()
    assert (row.status, row.event_count) == ("SUCCEEDED", 60)
    assert sorted(r.event_index for r in scenario.target.requests) == list(range(60))
    # The tick that creates the invocation (and arms the next), the one that ends
    # it; 120 event steps (a start and a result each) wrote none.
    assert counts["jobs"] <= 3


def test_the_stored_job_record_does_not_grow_with_the_count(backend):
    sizes = {}
    for count in (2, 5_000):
        scenario = Scenario(backend)
        _define_fanout(scenario, count, spread="3600s")
        scenario.run_until(START + timedelta(hours=1, seconds=1))  # the first events are out
        sizes[count] = _record_bytes(backend.store)
    assert sizes[5_000] - sizes[2] <= 8, sizes  # the count's digits, twice
    assert sizes[5_000] < 2_000


def test_retention_removes_a_finished_fanouts_rows(backend):
    scenario = Scenario(backend)
    _define_fanout(scenario, 3)
    scenario.run_until(START + timedelta(hours=1, seconds=30))
    [row] = scenario.invocations()

    def parts():
        return backend.store.run_in_transaction(lambda tx: tx.list_progress("proj", "job", row.id))

    assert set(parts()) == {"event/0", "event/1", "event/2"}
    scenario.engine.maintenance.cleanup(timedelta(0))
    assert parts() == {}
    assert scenario.invocations() == []


def test_events_starting_at_once_in_many_threads_are_each_delivered_once(backend):
    scenario = Scenario(backend)
    _define_fanout(scenario, 20)
    starts = []

    def tick_only(task):
        if task.kind == "start":
            starts.append(task)  # held back, to run all at once below
        else:
            scenario.handle(task)

    scenario.clock.current = START + timedelta(hours=1)
    backend.run_due(scenario.clock.now(), tick_only)
    assert len(starts) == 20
    errors = []

    def run(task):
        try:
            scenario.handle(task)
        except Exception as error:  # a failure must reach the assertion, not vanish with its thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(task,)) for task in starts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    scenario.run_until(START + timedelta(hours=1, seconds=5))  # the check the outcomes asked for
    [row] = scenario.invocations()
    assert row.status == "SUCCEEDED"
    assert sorted(r.event_index for r in scenario.target.requests) == list(range(20))


def test_an_async_fanout_completes_through_its_completion_report(backend):
    scenario = Scenario(backend)
    _define_fanout(scenario, 3)
    scenario.target.respond = lambda request: DeliveryResult("accepted", detail="202")
    scenario.run_until(START + timedelta(hours=1, seconds=5))
    [row] = scenario.invocations()
    assert row.status == "RUNNING"
    scenario.engine.changes.apply("proj", "job", ev.InvocationFinished(row.id, True, "", attempt=None))
    scenario.run_until(START + timedelta(hours=1, seconds=10))  # the check the completion asked for
    [row] = scenario.invocations()
    assert row.status == "SUCCEEDED"
    assert len(scenario.target.requests) == 3

