"""The OpenAPI document and the server agree on what a request may hold: what the
schema calls valid the server takes, and what the server refuses the schema calls
invalid. Each case is one schemathesis found with its data-acceptance checks
(`st run --checks all`) on an earlier document."""

from __future__ import annotations

import jsonschema_rs
import pytest

from tests.web.conftest import noop_job


def _openapi_3_0(schema):
    """OpenAPI 3.0's `nullable` in JSON Schema's words, throughout."""
    if isinstance(schema, list):
        return [_openapi_3_0(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted = {key: _openapi_3_0(value) for key, value in schema.items() if key != "nullable"}
    return {"anyOf": [converted, {"type": "null"}]} if schema.get("nullable") else converted


def _valid(document: dict, schema: dict, value) -> bool:
    rooted = {**_openapi_3_0(schema), "components": _openapi_3_0(document["components"])}
    return jsonschema_rs.Draft4Validator(rooted).is_valid(value)


def _parameter(document: dict, path: str, name: str) -> dict:
    return next(p for p in document["paths"][path]["get"]["parameters"] if p["name"] == name)


@pytest.fixture
def document(api) -> dict:
    return api.get("/api/v1/openapi.json").get_json()


def test_a_job_entry_with_neither_schedule_nor_at_is_invalid_in_both(api, document):
    entry = noop_job()
    assert api.put("j", entry).status_code == 400
    assert not _valid(document, {"$ref": "#/components/schemas/JobEntry"}, entry)
    for good in (noop_job(schedule="triggered"), noop_job(at=["2030-01-04T09:00:00Z"])):
        assert _valid(document, {"$ref": "#/components/schemas/JobEntry"}, good)


def test_a_trigger_body_of_nulls_is_valid_in_both(api, document):
    api.put("j", noop_job(schedule="triggered"))
    body = {"request_id": None, "scheduled_time": None}
    assert api.post("j", ":trigger", body).status_code == 200
    assert _valid(document, {"$ref": "#/components/schemas/TriggerRequest"}, body)


def test_an_empty_label_filter_is_invalid_in_both(api, document):
    assert api.get("/api/v1/projects/demo/jobs?label=").status_code == 400
    label = _parameter(document, "/projects/{project}/jobs", "label")["schema"]
    assert not _valid(document, label, [""])
    assert _valid(document, label, ["team", "team:data", "tier:"])


def test_an_empty_job_filter_of_the_audit_is_invalid_in_both(api, document):
    assert api.get("/api/v1/projects/demo/audit?job=").status_code == 400
    assert not _valid(document, _parameter(document, "/projects/{project}/audit", "job")["schema"], "")


def test_target_forms_validation_refuses_are_invalid_in_the_schema_too(api, document):
    target = {"$ref": "#/components/schemas/Target"}
    for bad in ({"cloud_tasks": {"queue": "", "url": "0"}}, {"pubsub": {"topic": "t"}},
                {"http": {"url": "ftp://example.com/x"}}):
        assert api.put("j", noop_job(schedule="triggered", target=bad)).status_code == 400, bad
        assert not _valid(document, target, bad), bad
    good = {"cloud_tasks": {"queue": "projects/p/locations/l/queues/q", "url": "HTTPS://w.example.com/${jobId}"}}
    assert api.put("j", noop_job(schedule="triggered", target=good)).status_code == 201
    assert _valid(document, target, good)
