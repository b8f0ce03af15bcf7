"""`overlap: replace` on every store: an async invocation still running when the next
occurrence comes is ABORTED/replaced, and the new one is delivered at once."""

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
    overlap: replace
    timeout: 10m
    target: {http: {url: "http://127.0.0.1:9/run", async: true}}
"""


def test_the_next_occurrence_replaces_a_running_one(backend):
    scenario = Scenario(backend)
    config = parse_project_text("proj", PROJECT_FILE, "proj.yaml")
    jobs = tuple(JobSnapshot(j.id, j.policy, j.definition, j.disabled) for j in config.jobs)
    scenario.engine.configs.import_project(ProjectSnapshot("proj", config.content_hash, jobs=jobs))
    scenario.target.respond = lambda request: DeliveryResult("accepted")  # a 202: running until reported
    scenario.run_until(START + timedelta(minutes=3, seconds=30))
    rows = scenario.invocations()
    assert [(row.scheduled_time - START, row.status, row.reason) for row in rows] == [
        (timedelta(minutes=1), "ABORTED", "replaced"),
        (timedelta(minutes=2), "ABORTED", "replaced"),
        (timedelta(minutes=3), "RUNNING", ""),
    ]
    assert scenario.target.invocations() == [row.id for row in rows]  # each delivered at its time
