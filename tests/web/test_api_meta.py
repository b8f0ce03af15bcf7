"""POST /validate, GET /openapi.json, and projects' lifecycle as the API sees it."""

from __future__ import annotations

import json
import re

from config import limits
from tests.web.conftest import error_of, noop_job

BROKEN = """\
jobs:
  - id: a
    schedule: every 1m
    target: {noop: {}}
  - id: b
    schedule: "not a schedule"
    target: {noop: {}}
  - id: c
    at: ["2030-01-04T09:00:00"]
    target: {noop: {}}
"""


def test_validate_lists_each_error_with_its_line(api):
    response = api.client.post("/api/v1/validate", data=BROKEN, content_type="application/yaml")
    assert response.status_code == 200
    errors = response.get_json()["errors"]
    assert [e["line"] for e in errors] == [6, 9]
    assert "unrecognised schedule" in errors[0]["message"] and "has no offset" in errors[1]["message"]


def test_validate_reads_json_and_says_nothing_about_a_valid_config(api):
    valid = {"jobs": [{"id": "a", "schedule": "every 1m", "target": {"noop": {}}}]}
    assert api.client.post("/api/v1/validate", json=valid).get_json() == {"errors": []}
    assert api.client.post("/api/v1/validate", data="").get_json() == {"errors": []}
    unknown = api.client.post("/api/v1/validate", json={"jobz": []}).get_json()["errors"]
    assert len(unknown) == 1 and "jobz" in unknown[0]["message"]


def test_validate_reports_a_file_that_does_not_parse(api):
    errors = api.client.post("/api/v1/validate", data="jobs: [\n  - id: a\n").get_json()["errors"]
    assert len(errors) == 1 and errors[0]["line"] >= 1


def test_validate_checks_a_project_id_when_given(api):
    assert api.client.post("/api/v1/validate?project=good-one", data="").get_json() == {"errors": []}
    assert error_of(api.client.post("/api/v1/validate?project=Bad_One", data="")) == (400, "INVALID_ARGUMENT")


def _routes(app) -> set[tuple[str, str]]:
    routes = set()
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/api/v1"):
            path = re.sub(r"<(?:\w+:)?(\w+)>", "{}", rule.rule[len("/api/v1"):])
            routes |= {(method.lower(), path) for method in rule.methods - {"HEAD", "OPTIONS"}}
    return routes


def test_the_openapi_document_describes_exactly_the_api(api):
    document = api.get("/api/v1/openapi.json").get_json()
    assert document["openapi"].startswith("3.")
    described = {(method, re.sub(r"\{\w+\}", "{}", path))
                 for path, item in document["paths"].items() for method in item}
    assert described == _routes(api.app)


def test_every_operation_documents_its_errors_and_every_reference_resolves(api):
    document = api.get("/api/v1/openapi.json").get_json()
    text = json.dumps(document)
    for name in set(re.findall(r"#/components/schemas/(\w+)", text)):
        assert name in document["components"]["schemas"], name
    for path, item in document["paths"].items():
        for method, operation in item.items():
            codes = set(operation["responses"])
            if "{project}" in path:
                assert "404" in codes, (method, path)
            if "requestBody" in operation or any(p["in"] == "query" for p in operation.get("parameters", ())):
                assert "400" in codes, (method, path)
            if "requestBody" in operation:
                assert "413" in codes, (method, path)


def test_the_limits_are_in_the_openapi_document(api):
    document = api.get("/api/v1/openapi.json").get_json()
    assert document["x-sundial-limits"] == limits.LIMITS
    assert "| at_times_per_job | 1,000 |" in document["info"]["description"]
    assert document["components"]["schemas"]["JobEntry"]["properties"]["at"]["maxItems"] == limits.MAX_AT_TIMES


def test_projects_list_counts_jobs(api):
    api.put("a", noop_job(schedule="triggered"))
    projects = api.get("/api/v1/projects").get_json()["projects"]
    assert [(p["id"], p["job_count"], p["config_error"]) for p in projects] == [("demo", 2, None)]


def test_a_project_file_without_jobs_holds_api_jobs(api):
    api.write_config("empty", "acl: {owners: [user:alice@example.com]}\n")
    assert api.put("j", noop_job(schedule="every 1m"), project="empty").status_code == 201
    assert api.get("/api/v1/projects/empty/jobs").get_json()["jobs"][0]["source"] == "api"


def test_api_jobs_stop_with_their_project_file_and_come_back_with_it(api):
    api.put("on", noop_job(schedule="every 1m"))
    api.put("off", noop_job(schedule="every 1m", disabled=True))
    api.put("gone", noop_job(schedule="every 1m"))
    api.client.delete(api.url("gone"))
    text = (api.configs / "demo.yaml").read_text()
    (api.configs / "demo.yaml").unlink()
    api.reimport()
    assert error_of(api.get(api.url("on"))) == (404, "NOT_FOUND")
    api.until(150)
    assert api.delivered("on") == []
    api.write_config("demo", text)
    assert api.job("on")["state"] == "SCHEDULED" and api.job("off")["state"] == "DISABLED"
    assert error_of(api.get(api.url("gone"))) == (404, "NOT_FOUND")
    api.until(181)
    assert len(api.delivered("on")) == 1
