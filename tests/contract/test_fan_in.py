"""Fan-in (`after`) on every store (SQLite, in memory, Datastore): the upstream jobs'
ends go through the trigger task and the fan-in job's inbox; the fan-in job runs once per
scheduled time when all succeeded, and records SKIPPED/upstream, naming who, when one
failed or when its window ended first."""

from __future__ import annotations

from datetime import timedelta

from config.loader import parse_project_text
from engine.config_import import JobSnapshot, ProjectSnapshot
from engine.ports import DeliveryResult
from tests.contract.test_engine_scenarios import Scenario
from tests.engine.harness import START

PROJECT_FILE = """
jobs:
  - {{id: extract-a, schedule: every 1m, target: {{noop: {{}}}}}}
  - {{id: extract-b, schedule: "{b_schedule}", target: {{noop: {{}}}}}}
  - id: report
    after: [extract-a, extract-b]
    after_window: 20s
    target: {{noop: {{}}}}
"""


def _scenario(backend, b_schedule: str = "every 1m", failing: str = "") -> Scenario:
    scenario = Scenario(backend)
    config = parse_project_text("proj", PROJECT_FILE.format(b_schedule=b_schedule), "proj.yaml")
    jobs = tuple(JobSnapshot(j.id, j.policy, j.definition, j.disabled) for j in config.jobs)
    scenario.engine.configs.import_project(ProjectSnapshot("proj", config.content_hash, jobs=jobs))
    scenario.target.respond = lambda request: (
        DeliveryResult("failed", reason="http 500") if request.job_id == failing else DeliveryResult("succeeded"))
    return scenario


def _log(row) -> list[str]:
    return [entry["message"] for entry in row.log]


def test_runs_once_per_scheduled_time_when_every_upstream_job_succeeded(backend):
    scenario = _scenario(backend)
    scenario.run_until(START + timedelta(minutes=2, seconds=30))
    rows = scenario.invocations("report")
    assert [(row.status, row.trigger, row.scheduled_time) for row in rows] == [
        ("SUCCEEDED", "after", START + timedelta(minutes=1)), ("SUCCEEDED", "after", START + timedelta(minutes=2))]
    # Nothing waits: a decided time stays only to make a late report for it change nothing.
    awaiting = scenario.engine.queries.job("proj", "report").record.awaiting
    assert [entry.decided for entry in awaiting] == [True]


def test_a_failed_upstream_invocation_skips_the_time_at_once(backend):
    scenario = _scenario(backend, failing="extract-b")
    scenario.run_until(START + timedelta(minutes=1, seconds=5))
    rows = scenario.invocations("report")
    assert [(row.status, row.reason, row.trigger, row.scheduled_time) for row in rows] == [
        ("SKIPPED", "upstream", "after", START + timedelta(minutes=1))]
    assert _log(rows[0]) == ["skipped: upstream (upstream job extract-b ended FAILED)"]


def test_the_window_passing_first_skips_the_time_naming_the_missing_job(backend):
    scenario = _scenario(backend, b_schedule="every 2m")
    scenario.run_until(START + timedelta(minutes=1, seconds=10))
    assert scenario.invocations("report") == []  # extract-a succeeded for 10:01; extract-b has no 10:01
    scenario.run_until(START + timedelta(minutes=1, seconds=25))
    rows = scenario.invocations("report")
    assert [(row.status, row.reason, row.scheduled_time) for row in rows] == [
        ("SKIPPED", "upstream", START + timedelta(minutes=1))]
    assert _log(rows[0]) == ["skipped: upstream (no success of extract-b within 20s)"]
    assert rows[0].finished_time < START + timedelta(minutes=1, seconds=22)
    scenario.run_until(START + timedelta(minutes=2, seconds=5))  # 10:02: both run
    assert [row.status for row in scenario.invocations("report")] == ["SKIPPED", "SUCCEEDED"]


def test_a_fan_in_job_added_later_is_reported_to_by_the_jobs_already_running(backend):
    scenario = Scenario(backend)
    upstream_only = parse_project_text("proj", "\n".join(PROJECT_FILE.format(b_schedule="every 1m").splitlines()[:4]),
                                       "proj.yaml")
    assert [job.id for job in upstream_only.jobs] == ["extract-a", "extract-b"]
    for config in (upstream_only, parse_project_text("proj", PROJECT_FILE.format(b_schedule="every 1m"), "proj.yaml")):
        jobs = tuple(JobSnapshot(j.id, j.policy, j.definition, j.disabled) for j in config.jobs)
        scenario.engine.configs.import_project(ProjectSnapshot("proj", config.content_hash, jobs=jobs))
        scenario.run_until(scenario.clock.now() + timedelta(minutes=1, seconds=30))
    rows = scenario.invocations("report")
    assert [(row.status, row.scheduled_time) for row in rows] == [("SUCCEEDED", START + timedelta(minutes=2))]
