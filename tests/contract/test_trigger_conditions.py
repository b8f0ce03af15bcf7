"""Conditional triggers on every store: a job whose invocation fails starts the job named
`on: failed` and the one named `on: finished`, not the one named by a plain id."""

from __future__ import annotations

from datetime import timedelta

from config.loader import parse_project_text
from engine.config_import import JobSnapshot, ProjectSnapshot
from engine.ports import DeliveryResult
from tests.contract.test_engine_scenarios import Scenario
from tests.engine.harness import START

PROJECT_FILE = """
jobs:
  - id: job
    schedule: every 1m
    triggers: [on-success, {job: on-failure, on: failed}, {job: always, on: finished}]
    target: {noop: {}}
  - {id: on-success, schedule: triggered, target: {noop: {}}}
  - {id: on-failure, schedule: triggered, target: {noop: {}}}
  - {id: always, schedule: triggered, target: {noop: {}}}
"""


def test_a_failure_starts_the_jobs_named_on_failed_and_finished(backend):
    scenario = Scenario(backend)
    config = parse_project_text("proj", PROJECT_FILE, "proj.yaml")
    jobs = tuple(JobSnapshot(j.id, j.policy, j.definition, j.disabled) for j in config.jobs)
    scenario.engine.configs.import_project(ProjectSnapshot("proj", config.content_hash, jobs=jobs))
    scenario.target.respond = lambda request: (
        DeliveryResult("failed", reason="http 500") if request.job_id == "job" else DeliveryResult("succeeded"))
    scenario.run_until(START + timedelta(minutes=1, seconds=30))
    assert [row.status for row in scenario.invocations("job")] == ["FAILED"]
    source = scenario.invocations("job")[0]
    for follower in ("on-failure", "always"):
        rows = scenario.invocations(follower)
        assert [(row.status, row.trigger, row.scheduled_time) for row in rows] == [
            ("SUCCEEDED", "job:job", source.scheduled_time)], follower
    assert scenario.invocations("on-success") == []
