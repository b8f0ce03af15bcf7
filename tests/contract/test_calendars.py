"""Exclusion calendars on every store: a job imported from a project file with `exclude`
keeps its calendars through the store, records the excluded occurrences SKIPPED/excluded
and delivers the others; readers are shown the next run after the exclusion."""

from __future__ import annotations

from datetime import timedelta

from config.loader import parse_project_text
from engine.config_import import JobSnapshot, ProjectSnapshot
from statemachine.shown import next_run
from tests.contract.test_engine_scenarios import Scenario
from tests.engine.harness import START

# START is 2026-01-05T10:00Z. The range holds 10:02 and 10:03 (Berlin is UTC+1 in January).
PROJECT_FILE = """
calendars:
  quiet:
    timezone: Europe/Berlin
    ranges: [{start: "2026-01-05T11:02:00", end: "2026-01-05T11:04:00"}]
jobs:
  - id: job
    schedule: every 1m
    exclude: [quiet]
    target: {noop: {}}
"""


def _import(scenario: Scenario) -> None:
    config = parse_project_text("proj", PROJECT_FILE, "proj.yaml")
    jobs = tuple(JobSnapshot(j.id, j.policy, j.definition, j.disabled) for j in config.jobs)
    scenario.engine.configs.import_project(ProjectSnapshot("proj", config.content_hash, jobs=jobs,
                                                          settings=config.settings()))


def test_excluded_occurrences_are_skipped_and_the_others_delivered(backend):
    scenario = Scenario(backend)
    _import(scenario)
    stored = scenario.engine.queries.job("proj", "job")
    assert stored.definition.exclude[0]["name"] == "quiet"
    assert stored.record.policy.exclude[0].timezone == "Europe/Berlin"
    scenario.run_until(START + timedelta(minutes=1, seconds=30))
    assert scenario.engine.queries.job("proj", "job").record.tick_at == START + timedelta(minutes=2)
    shown = scenario.engine.queries.job("proj", "job")
    assert next_run(shown.record, START + timedelta(minutes=1, seconds=30)) == START + timedelta(minutes=4)
    scenario.run_until(START + timedelta(minutes=4, seconds=30))
    rows = scenario.invocations()
    assert [(r.scheduled_time - START, r.status, r.reason) for r in rows] == [
        (timedelta(minutes=1), "SUCCEEDED", ""),
        (timedelta(minutes=2), "SKIPPED", "excluded"),
        (timedelta(minutes=3), "SKIPPED", "excluded"),
        (timedelta(minutes=4), "SUCCEEDED", ""),
    ]
    assert len(scenario.target.requests) == 2
