"""The published JSON Schema of the project file (docs/project.schema.json): it is what
`python -m config.schema` prints today, every example config and the reference's full
example validate against it, and it refuses what the validator refuses in structure."""

import json
import subprocess
import sys
from datetime import date
from pathlib import Path

import jsonschema_rs
import pytest
import yaml

from config import schema
from config.loader import parse_project_text
from tests.config.test_loader import CONTRACT_EXAMPLE

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "docs" / "project.schema.json"
EXAMPLES = sorted((ROOT / "examples" / "configs").glob("*.yaml"))


def _as_json(text: str):
    """The document as an editor's YAML server sees it: timestamps stay text."""
    return json.loads(json.dumps(yaml.safe_load(text),
                                 default=lambda value: value.isoformat() if isinstance(value, date) else value))


@pytest.fixture(scope="module")
def validator():
    return jsonschema_rs.Draft202012Validator(json.loads(PUBLISHED.read_text(encoding="utf-8")))


def test_the_published_schema_is_what_the_generator_prints_now():
    printed = subprocess.run([sys.executable, "-m", "config.schema"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60, check=True).stdout
    assert printed == PUBLISHED.read_text(encoding="utf-8"), \
        "docs/project.schema.json is stale: run python -m config.schema > docs/project.schema.json"


def test_the_schema_is_a_valid_draft_2020_12_schema():
    document = json.loads(PUBLISHED.read_text(encoding="utf-8"))
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert jsonschema_rs.meta.is_valid(document)


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_every_example_config_validates(validator, path):
    errors = [str(error) for error in validator.iter_errors(_as_json(path.read_text(encoding="utf-8")))]
    assert errors == []


def test_a_file_using_every_documented_field_validates(validator):
    parse_project_text("p", CONTRACT_EXAMPLE, "p.yaml")  # the validator accepts it too
    assert list(validator.iter_errors(_as_json(CONTRACT_EXAMPLE))) == []


@pytest.mark.parametrize("entry", [
    {"id": "x", "schedule": "@daily", "at": ["2027-01-01T00:00:00Z"], "target": {"noop": {}}},
    {"id": "x", "target": {"noop": {}}},
    {"id": "x", "schedule": "@daily", "target": {"noop": {}, "http": {"url": "https://a.example"}}},
    {"id": "x", "schedule": "@daily", "retry": {"max_attempts": 101}, "target": {"noop": {}}},
    {"id": "x", "schedule": "@daily", "timeout": "10 minutes", "target": {"noop": {}}},
    {"id": "x", "schedule": "@daily", "retry": {"backoff": "1s"}, "target": {"noop": {}}},
    {"id": "..", "schedule": "@daily", "target": {"noop": {}}},
    {"id": "x", "schedule": "@daily", "target": {"pubsub": {"topic": "T"}}},
], ids=["schedule-and-at", "no-timing", "two-targets", "too-many-attempts", "bad-duration",
        "unknown-field", "dots-only-id", "bad-topic"])
def test_the_schema_refuses_what_the_validator_refuses(validator, entry):
    text = json.dumps({"jobs": [entry]})
    assert parse_project_text("p", text, "p.yaml").job_errors  # the validator's verdict
    assert not validator.is_valid(_as_json(text))


def test_a_field_the_generator_does_not_describe_stops_it(monkeypatch):
    monkeypatch.setattr(schema, "JOB_FIELDS", schema.JOB_FIELDS + ("colour",))
    with pytest.raises(RuntimeError, match="undescribed \\['colour'\\]"):
        schema.project_schema()
