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


@pytest.fixture(params=["libyaml", "pure"])
def yaml_path(request, monkeypatch):
    """Runs a test once with libyaml's parser tried first (where installed) and once with
    the pure-Python loader alone: both must give the same answers."""
    import config.yamlsource

    if request.param == "pure":
        monkeypatch.setattr(config.yamlsource, "FAST_LOADER", None)
    elif config.yamlsource.FAST_LOADER is None:
        pytest.skip("libyaml is not installed")
    return request.param
