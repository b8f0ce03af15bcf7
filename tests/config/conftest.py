"""Every job definition the config tests build must survive its JSON form unchanged:
the stores keep that form, and the revision hashes it (statemachine/definition.py)."""

from __future__ import annotations

import json

import pytest

import config.jobs
from statemachine.definition import JobDefinition


def _compact(data: dict) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)  # key order kept


@pytest.fixture(autouse=True)
def definitions_round_trip(monkeypatch):
    real = config.jobs.JobConfig

    def checked(*args, **kwargs):
        job = real(*args, **kwargs)
        stored = job.definition.to_dict()
        again = JobDefinition.from_dict(json.loads(_compact(stored)))
        assert again == job.definition
        assert _compact(again.to_dict()) == _compact(stored)
        return job

    monkeypatch.setattr(config.jobs, "JobConfig", checked)
