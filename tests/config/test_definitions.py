"""The typed job definition keeps every surface made from it exactly as it was when the
definition was a dict: the stored JSON, the revision, the API's Job, the UI's definition
YAML, policies and schedule, and the "request sent" panel. `definitions/golden.json` was
written from the examples and `definitions/extra.yaml` by the code before the change, and
changed since only where readers' masking widened (a header outside the harmless few,
engine/masking.py, shows masked)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from config.loader import load_project_file, parse_job_entry
from engine.masking import masked_definition
from engine.ports import InvocationRow, StoredJob
from statemachine.definition import JobDefinition
from statemachine.policy import Catchup, Overlap
from statemachine.record import new_record
from statemachine.vocabulary import TargetKind
from web import ui_format
from web.views import job_view

HERE = Path(__file__).resolve().parent
FILES = sorted((HERE.parents[1] / "examples" / "configs").glob("*.yaml")) + [HERE / "definitions" / "extra.yaml"]
GOLDEN = json.loads((HERE / "definitions" / "golden.json").read_text())
AT = datetime(2027, 1, 4, 7, 30, 15, 250000, tzinfo=timezone.utc)


def _jobs() -> dict:
    """{"FILE/JOB": (project, JobConfig)} of every job of the files."""
    return {f"{path.name}/{job.id}": (config.project, job)
            for path, config in ((path, load_project_file(path)) for path in FILES) for job in config.jobs}


JOBS = _jobs()


def _surfaces(project: str, job) -> dict:
    stored = StoredJob(new_record(project, job.id), job.definition, "config")
    shown = masked_definition(job.definition)
    row = InvocationRow(project, job.id, "inv-1", "SUCCEEDED", AT, "schedule", attempt=2, event_count=3)
    return {
        "stored": json.dumps(job.definition.to_dict(), separators=(",", ":")),
        "revision": job.policy.revision,
        "api_job": json.dumps(job_view(stored, None, AT)),
        "ui_yaml": ui_format.definition_yaml(shown),
        "ui_policies": [list(pair) for pair in ui_format.policies(shown)],
        "ui_schedule": [ui_format.schedule_text(shown), ui_format.plain_schedule(shown)],
        "request_sent": ui_format.request_sent(stored, row, "127.0.0.1:8080"),
    }


def test_every_golden_job_is_still_there():
    assert sorted(JOBS) == sorted(GOLDEN)


@pytest.mark.parametrize("name", sorted(JOBS))
def test_every_surface_of_a_definition_is_as_it_was(name):
    assert json.loads(json.dumps(_surfaces(*JOBS[name]))) == GOLDEN[name]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_the_stored_json_reads_back_to_the_same_bytes(name):
    stored = GOLDEN[name]["stored"]
    again = JobDefinition.from_dict(json.loads(stored)).to_dict()
    assert json.dumps(again, separators=(",", ":")) == stored


def test_a_definition_parses_back_to_itself_through_the_api():
    for _, job in JOBS.values():
        again = parse_job_entry(job.definition.to_dict(), None, job.id)
        assert (again.definition, again.policy.revision) == (job.definition, job.policy.revision)


def test_the_builtin_defaults_are_the_definitions_defaults():
    # config/model.py and statemachine/definition.py both read them from JobPolicy.
    entry = {"schedule": "@hourly", "target": {"noop": {}}}
    assert parse_job_entry(entry, None, "a").definition == JobDefinition(
        id="a", schedule="@hourly", target={"noop": {}})


def test_fields_are_typed():
    definition = JobDefinition.from_dict(json.loads(GOLDEN["extra.yaml/everything"]["stored"]))
    assert definition.overlap is Overlap.ALLOW and definition.catchup.policy is Catchup.NONE
    assert definition.target_kind is TargetKind.HTTP
    assert definition.triggers == ("hooked",) and definition.retry.min_backoff == "1s500ms"
    assert (definition.pause_after_failures, definition.throttle) == (4, "slow")
    once = JobDefinition.from_dict(json.loads(GOLDEN["extra.yaml/once"]["stored"]))
    assert (once.schedule, once.at) == (None, ("2027-01-03T09:00:00Z", "2027-01-04T08:00:00.250000Z"))
    assert once.target_kind is TargetKind.PUBSUB and once.on_failure is None


BASE = json.loads(GOLDEN["extra.yaml/hooked"]["stored"])


@pytest.mark.parametrize("change, message", [
    ({"retry": {**BASE["retry"], "jitter": 1}}, "unknown field(s) retry.jitter"),
    ({"max_concurrent": True}, "max_concurrent is True, not a int"),
    ({"triggers": ["a", 1]}, "triggers is 1, not a str"),
    ({"throttle": 3}, "throttle is 3, not a str"),
    ({"overlap": "sometimes"}, "'sometimes' is not a valid Overlap"),
    ({"target": {"smtp": {}}}, "target must be {kind: {...}} with one of"),
    ({"target": {"noop": {}, "http": {}}}, "target must be {kind: {...}} with one of"),
    ({"at": ["2027-01-03T09:00:00Z"]}, "needs exactly one of schedule and at"),
    ({"schedule": None}, "schedule is None, not a str"),
])
def test_what_was_never_written_is_refused(change, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        JobDefinition.from_dict({**BASE, **change})


def test_a_later_releases_top_level_field_is_kept_and_written_back():
    stored = {**BASE, "deleted": True, "sla": {"within": "5m"}}
    definition = JobDefinition.from_dict(stored)
    assert definition.to_dict() == stored
    assert json.loads(definition.canonical_json) == stored
    assert JobDefinition.from_dict(BASE).later == ""


def test_a_missing_field_is_refused():
    for key in ("timezone", "disabled", "catchup", "target", "throttle"):
        with pytest.raises(ValueError, match=f"{key} is missing"):
            JobDefinition.from_dict({name: value for name, value in BASE.items() if name != key})


def test_masking_changes_only_what_is_shown():
    definition = JobDefinition.from_dict(json.loads(GOLDEN["extra.yaml/everything"]["stored"]))
    shown = masked_definition(definition)
    assert shown.target["http"]["headers"]["Authorization"] == "<redacted>"
    assert shown.on_failure["http"]["headers"]["Cookie"] == "<redacted>"
    assert definition.target["http"]["headers"]["Authorization"] == "Bearer written-in-the-file"
    assert shown == replace(definition, target=shown.target, on_failure=shown.on_failure)
