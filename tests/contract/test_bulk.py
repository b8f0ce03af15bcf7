"""Bulk pause and resume (engine/bulk.py) on every backend: each selected job changed in a
transaction of its own with its own audit entry, and a repeat changes nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engine import bulk
from tests.contract.test_api_operations import ApiScenario
from tests.engine.harness import START


@pytest.fixture
def api(backend):
    scenario = ApiScenario(backend)
    for job_id, team in (("a", "data"), ("b", "data"), ("c", "web")):
        scenario.put(job_id, {"schedule": "every 1m", "labels": {"team": team}, "target": {"noop": {}}})
    return scenario


def _data(job) -> bool:
    return job.definition.labels.get("team") == "data"


def test_a_bulk_pause_stops_the_selected_jobs_and_is_audited_per_job(api):
    results = bulk.pause_jobs(api.engine, "proj", _data, "INC-9", actor="user:ops@example.com")
    assert [(r.job_id, r.outcome) for r in results] == [("a", "paused"), ("b", "paused")]
    api.run_until(START + timedelta(minutes=3, seconds=30))
    assert {r.job_id for r in api.target.requests} == {"c"}
    entries, _ = api.backend.store.list_audit("proj", None, 100, None)
    paused = sorted((e.job_id, e.actor, e.detail.get("reason")) for e in entries if e.action == "pause")
    assert paused == [("a", "user:ops@example.com", "INC-9"), ("b", "user:ops@example.com", "INC-9")]
    again = bulk.pause_jobs(api.engine, "proj", _data, "INC-9 again")
    assert {r.outcome for r in again} == {"unchanged"}
    assert api.engine.queries.job("proj", "a").record.pause_reason == "INC-9"


def test_a_bulk_resume_resumes_only_the_paused_ones(api):
    bulk.pause_jobs(api.engine, "proj", _data)
    results = bulk.resume_jobs(api.engine, "proj", lambda job: True, "INC-9 over")
    assert [(r.job_id, r.outcome) for r in results] == [("a", "resumed"), ("b", "resumed"), ("c", "unchanged")]
    assert not any(api.engine.queries.job("proj", job).record.paused for job in "abc")
