"""The API's Job as the read side gives it, on every backend: `last_success_time` is when
the job's last SUCCEEDED invocation finished, null before one has, and a failure after
it leaves it alone. On Datastore a plain finish is written to the invocation's row only
(engine/deferred_finish.py), so the job's stored record may not have it yet: the read
side applies it first, as it does for the job's state."""

from __future__ import annotations

from datetime import timedelta

from engine.ports import DeliveryResult
from statemachine.durations import rfc3339_millis
from tests.contract.test_engine_scenarios import Scenario
from tests.engine.harness import START
from web.views import job_view


def shown(scenario: Scenario) -> dict:
    job = scenario.engine.queries.job("proj", "job")
    return job_view(job, scenario.engine.queries.last_invocation(job), scenario.clock.now())


def test_last_success_time_is_when_the_last_succeeded_invocation_finished(backend):
    scenario = Scenario(backend)
    scenario.define(schedule="every 1m")
    assert shown(scenario)["last_success_time"] is None  # none yet
    scenario.run_until(START + timedelta(minutes=2, seconds=30))
    first, second = scenario.invocations()
    assert (first.status, second.status) == ("SUCCEEDED", "SUCCEEDED")
    assert shown(scenario)["last_success_time"] == rfc3339_millis(second.finished_time)

    scenario.target.answers.append(DeliveryResult("failed", reason="http 500"))
    scenario.run_until(START + timedelta(minutes=3, seconds=30))
    assert scenario.invocations()[-1].status == "FAILED"
    view = shown(scenario)
    assert view["last_invocation"]["status"] == "FAILED"
    assert view["last_success_time"] == rfc3339_millis(second.finished_time)  # still the last success
