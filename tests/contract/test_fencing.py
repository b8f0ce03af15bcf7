"""The fencing token on every store (issue 21): a result sent under an attempt's
earlier issue, arriving after the watchdog issued the attempt again, is refused in
the transaction that would record it, on SQLite and on Datastore alike; the newer
issue's result is recorded."""

from __future__ import annotations

from datetime import timedelta

from engine.ports import DeliveryResult
from engine.tasks import Sent
from tests.contract.test_engine_scenarios import Scenario
from tests.engine.harness import START


def test_a_result_of_an_attempts_earlier_issue_is_refused_after_the_watchdog_issued_it_again(backend):
    scenario = Scenario(backend)
    scenario.define()
    scenario.run_until(START + timedelta(seconds=59))
    engine, stepped = scenario.engine, []

    def commit_only(task):  # a process that commits the attempt as starting, then stalls
        stepped.extend(s for s in engine.tasks.step_many([task]) if s.deliveries)

    scenario.clock.current = START + timedelta(minutes=1)
    backend.run_due(scenario.clock.now(), commit_only)
    [(job, first)] = stepped.pop().deliveries
    scenario.clock.advance(minutes=2, seconds=1)  # past its lease: 60 s attempt timeout + 60 s start grace
    engine.maintenance.run_watchdog()
    backend.run_due(scenario.clock.now(), commit_only)
    [(job, second)] = stepped.pop().deliveries
    assert (second.invocation_id, second.attempt, second.epoch) == (first.invocation_id, 1, first.epoch + 1)

    engine.tasks.record_many([Sent(job, first, DeliveryResult("failed", "http 500"))])  # the stalled one wakes
    [row] = [r for r in scenario.invocations() if r.id == first.invocation_id]
    assert row.status == "RUNNING" and not any("failed" in entry["message"] for entry in row.log)
    assert engine.metrics.counter("sundial_stale_results_total") == 1
    engine.tasks.record_many([Sent(job, second, DeliveryResult("succeeded", detail="ok"))])
    [row] = [r for r in scenario.invocations() if r.id == first.invocation_id]
    assert row.status == "SUCCEEDED"
