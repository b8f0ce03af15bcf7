"""The REST API's use cases (engine/operations.py) and history retention on every
backend: a fake clock, tasks run as they fall due, a recording target."""

from __future__ import annotations

from datetime import timedelta

import pytest

from config.loader import parse_job_entry
from engine import operations as ops
from engine.errors import NotFound
from engine.ports import DeliveryResult, ProjectRow
from engine.queries import visible
from tests.contract.test_engine_scenarios import Scenario
from tests.engine.harness import START


class ApiScenario(Scenario):
    def __init__(self, backend):
        super().__init__(backend)
        self.engine.changes.write(lambda tx: tx.put_project(ProjectRow("proj", settings={"config_jobs": []})))

    def put(self, job_id: str, entry: dict) -> ops.Put:
        job = parse_job_entry(entry, {}, job_id)
        return ops.put_job(self.engine, "proj", job_id, job.policy, job.definition, job.disabled, 100)

    def delivered(self, job_id: str) -> list:
        return [r for r in self.target.requests if r.job_id == job_id]


def stamp(seconds: int) -> str:
    return (START + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


@pytest.fixture
def api(backend):
    return ApiScenario(backend)


def test_an_at_job_put_twice_fires_each_time_once(api):
    entry = {"at": [stamp(10), stamp(20), stamp(30)], "target": {"noop": {}}}
    assert api.put("j", entry).created
    api.run_until(START + timedelta(seconds=15))
    assert not api.put("j", entry).created
    api.run_until(START + timedelta(minutes=2))
    assert [r.scheduled_time for r in api.delivered("j")] == [START + timedelta(seconds=s) for s in (10, 20, 30)]
    assert [r.status for r in api.invocations("j")] == ["SUCCEEDED"] * 3


def test_a_deleted_job_delivers_nothing_more_and_its_row_goes(api):
    api.put("j", {"at": [stamp(10), stamp(20)], "target": {"noop": {}}})
    api.run_until(START + timedelta(seconds=15))
    ops.delete_job(api.engine, "proj", "j")
    api.run_until(START + timedelta(minutes=2))
    assert [r.scheduled_time for r in api.delivered("j")] == [START + timedelta(seconds=10)]
    assert api.backend.store.get_job("proj", "j") is None
    assert len(api.invocations("j")) == 1  # history stays until retention


def test_a_deletion_stopped_after_its_first_step_hides_the_job_until_a_put_revives_it(api, monkeypatch):
    first = api.put("j", {"schedule": "every 1m", "target": {"noop": {}}}).job
    steps = []
    real_apply = api.engine.changes.apply

    def crash_after_the_first_step(*args, **kwargs):
        if steps:
            raise RuntimeError("the process died")
        steps.append("JobDisabled")
        return real_apply(*args, **kwargs)

    monkeypatch.setattr(api.engine.changes, "apply", crash_after_the_first_step)
    with pytest.raises(RuntimeError):
        ops.delete_job(api.engine, "proj", "j")
    monkeypatch.setattr(api.engine.changes, "apply", real_apply)

    tombstone = api.backend.store.get_job("proj", "j")
    assert tombstone.deleted and tombstone.record.disabled
    assert tombstone.definition == first.definition  # the user's definition is not where the mark is
    assert not visible(tombstone) and api.engine.queries.jobs("proj") == []
    with pytest.raises(NotFound):
        api.engine.queries.job("proj", "j")

    again = api.put("j", {"schedule": "every 1m", "target": {"noop": {}}})
    assert again.created and not again.job.deleted and not again.job.record.disabled
    assert [job.record.job_id for job in api.engine.queries.jobs("proj")] == ["j"]


def test_a_repeated_trigger_request_makes_one_invocation(api):
    api.put("j", {"schedule": "triggered", "target": {"noop": {}}})
    first = ops.trigger(api.engine, "proj", "j", "request-1")
    api.run_until(START + timedelta(seconds=5))
    again = ops.trigger(api.engine, "proj", "j", "request-1")
    assert again.id == first.id and again.status == "SUCCEEDED"
    assert len(api.delivered("j")) == 1


def test_an_async_invocation_completes_through_operations(api):
    api.put("j", {"schedule": "triggered", "target": {"http": {"url": "http://127.0.0.1:9/", "async": True}}})
    api.target.answers.append(DeliveryResult("accepted"))
    invocation = ops.trigger(api.engine, "proj", "j").id
    api.run_until(START + timedelta(seconds=1))
    token = api.engine.deliveries.completion_token(invocation)
    with pytest.raises(ops.Refused):
        ops.complete(api.engine, "proj", "j", invocation, "wrong", True)
    assert api.backend.store.get_invocation("proj", "j", invocation).status == "RUNNING"
    assert ops.complete(api.engine, "proj", "j", invocation, token, False, "no").status == "FAILED"


def test_retention_removes_old_finished_history_in_batches_and_leaves_jobs_alone(api):
    api.put("j", {"schedule": "every 1m", "target": {"noop": {}}})
    api.run_until(START + timedelta(minutes=5, seconds=30))
    assert len(api.invocations("j")) == 5
    job_before = api.backend.store.get_job("proj", "j")
    api.clock.current = START + timedelta(days=45, minutes=3, seconds=30)  # three are older than 45 days
    # Three invocations, and the audit entry of the PUT, as old.
    assert api.engine.maintenance.cleanup(timedelta(days=45), batch=2) == 4
    left = api.invocations("j")
    assert [r.scheduled_time for r in left] == [START + timedelta(minutes=m) for m in (4, 5)]
    assert api.backend.store.get_job("proj", "j") == job_before
    assert api.engine.maintenance.cleanup(timedelta(days=45), batch=2) == 0
