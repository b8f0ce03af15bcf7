"""One spec per target kind (statemachine/target_kinds.py): every kind has its spec, its
validator and its sender, and the validator, the project file's JSON Schema and the
API's OpenAPI document agree with the spec, and with each other, field by field."""

from __future__ import annotations

import json

import jsonschema_rs
import pytest

from config import schema
from config.loader import parse_project_text
from config.targets import VALIDATORS
from engine.targets import SENDERS, build_targets
from statemachine.safety import OwnService
from statemachine.target_kinds import TARGET_KIND_SPECS, FieldShape, KindSpec, TargetField, kind_spec
from statemachine.vocabulary import TargetKind
from web.openapi import openapi_document

# The fewest fields each kind takes: its required ones, with valid values.
SMALLEST = {
    TargetKind.HTTP: {"url": "https://example.com/run"},
    TargetKind.PUBSUB: {"topic": "projects/p/topics/t"},
    TargetKind.CLOUD_TASKS: {"queue": "projects/p/locations/l/queues/q", "url": "https://example.com/run"},
    TargetKind.NOOP: {},
}
KINDS = list(TargetKind)


def _openapi_3_0(part):
    """OpenAPI 3.0's `nullable` in JSON Schema's words, throughout."""
    if isinstance(part, list):
        return [_openapi_3_0(item) for item in part]
    if not isinstance(part, dict):
        return part
    converted = {key: _openapi_3_0(value) for key, value in part.items() if key != "nullable"}
    return {"anyOf": [converted, {"type": "null"}]} if part.get("nullable") else converted


@pytest.fixture(scope="module")
def openapi_target() -> dict:
    return openapi_document()["components"]["schemas"]["Target"]


@pytest.fixture(scope="module")
def judges(openapi_target):
    """Whether the validator, the JSON Schema and the OpenAPI document accept a target."""
    project = jsonschema_rs.Draft202012Validator(schema.project_schema())
    api = jsonschema_rs.Draft4Validator(_openapi_3_0(openapi_target))

    def judge(target: dict) -> tuple[bool, bool, bool]:
        text = json.dumps({"jobs": [{"id": "j", "schedule": "@daily", "target": target}]})
        valid = not parse_project_text("p", text, "p.yaml", own=OwnService()).job_errors
        return valid, project.is_valid(json.loads(text)), api.is_valid(target)
    return judge


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_has_its_spec_validator_and_sender(kind):
    assert TARGET_KIND_SPECS[kind].kind == kind
    assert kind in VALIDATORS
    assert kind in SENDERS
    assert kind in SMALLEST  # and a smallest target here, for the agreement tests below
    assert kind in build_targets()


@pytest.mark.parametrize("kind", KINDS)
def test_both_schemas_describe_exactly_the_specs_fields_with_the_same_required_ones(kind, openapi_target):
    spec = TARGET_KIND_SPECS[kind]
    project = schema.target_schema()["properties"][kind]
    api = openapi_target["properties"][kind]
    for described in (project, api):
        closed = described["anyOf"][0] if "anyOf" in described else described
        assert list(closed.get("properties", {})) == list(spec.names)
        assert closed.get("required", []) == list(spec.required)
        assert closed.get("additionalProperties", False) is False
        for field in spec.fields:
            assert closed["properties"][field.name]["type"] == field.shape.json_type, field.name


@pytest.mark.parametrize("kind", KINDS)
def test_the_smallest_target_of_each_kind_is_valid_in_all_three(kind, judges):
    assert judges({kind.value: SMALLEST[kind]}) == (True, True, True)


@pytest.mark.parametrize(("kind", "name"), [(kind, name) for kind in KINDS
                                            for name in TARGET_KIND_SPECS[kind].required])
def test_a_target_without_a_required_field_is_refused_by_all_three(kind, name, judges):
    fields = {key: value for key, value in SMALLEST[kind].items() if key != name}
    assert judges({kind.value: fields}) == (False, False, False)


@pytest.mark.parametrize(("kind", "name"), [(kind, field.name) for kind in KINDS
                                            for field in TARGET_KIND_SPECS[kind].fields])
def test_a_field_of_the_wrong_type_is_refused_by_all_three(kind, name, judges):
    assert judges({kind.value: {**SMALLEST[kind], name: [1]}}) == (False, False, False)


@pytest.mark.parametrize("kind", KINDS)
def test_a_field_the_spec_does_not_have_is_refused_by_all_three(kind, judges):
    assert judges({kind.value: {**SMALLEST[kind], "colour": "red"}}) == (False, False, False)


def test_a_field_the_schema_does_not_describe_stops_the_generator(monkeypatch):
    spec = TARGET_KIND_SPECS[TargetKind.PUBSUB]
    grown = KindSpec(spec.kind, spec.fields + (TargetField("ordering_key", FieldShape.TEXT),))
    monkeypatch.setattr(schema, "TARGET_KIND_SPECS", {**TARGET_KIND_SPECS, TargetKind.PUBSUB: grown})
    with pytest.raises(RuntimeError, match="undescribed \\['ordering_key'\\]"):
        schema.target_schema()


def test_a_kind_this_release_does_not_know_is_read_by_every_known_kinds_fields():
    unknown = kind_spec("smtp")
    assert unknown.field("url") is not None and unknown.field("url").shape is FieldShape.URL
    assert unknown.field("headers") is not None and unknown.field("headers").secret
    assert unknown.payload_field in ("body", "data")
