"""Every error of the API: its code, its status, and a message that says what to fix."""

from __future__ import annotations

import pytest

from config import limits
from engine import operations
from engine.ports import StoreError
from tests.web.conftest import error_of, http_job, noop_job


def message_of(response) -> str:
    return response.get_json()["error"]["message"]


@pytest.mark.parametrize("body, says", [
    ("{not json", "not valid JSON"),
    ('{"schedule": NaN, "target": {"noop": {}}}', "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ("", "needs a JSON object"),
    ('{"schedule": "every 1m", "target": {"noop": {}}, "colour": "blue"}', "colour"),
    ('{"schedule": "every 1m", "target": {"noop": {}, "smoke": {}}}', "smoke"),
    ('{"schedule": "every 61 parsecs", "target": {"noop": {}}}', "schedule"),
    ('{"schedule": "0 0 32 * *", "target": {"noop": {}}}', "schedule"),
    ('{"schedule": "every 1m", "timezone": "Mars/Olympus_Mons", "target": {"noop": {}}}', "timezone"),
    ('{"at": ["2030-01-04T09:00:00"], "target": {"noop": {}}}', "has no offset"),
    ('{"at": ["next tuesday"], "target": {"noop": {}}}', "at[0]"),
    ('{"at": [], "target": {"noop": {}}}', "at least one"),
    ('{"schedule": "every 1m", "at": ["2030-01-04T09:00:00Z"], "target": {"noop": {}}}', "both"),
    ('{"target": {"noop": {}}}', "needs a schedule or at"),
    ('{"schedule": "every 1m"}', "target"),
    ('{"schedule": "every 1m", "target": {"http": {"url": "ftp://x"}}}', "http://"),
    ('{"schedule": "every 1m", "target": {"http": {"url": "http://169.254.169.254/"}}}', "link-local"),
    ('{"schedule": "every 1m", "target": {"http": {"url": "http://x", "body": "${nope}"}}}', "nope"),
    ('{"schedule": "every 1m", "throttle": "unknown", "target": {"noop": {}}}', "unknown throttle"),
    ('{"schedule": "every 1m", "retry": {"max_attempts": 0}, "target": {"noop": {}}}', "max_attempts"),
])
def test_a_bad_put_body_is_400_with_a_message_naming_the_problem(api, body, says):
    response = api.put("j", body)
    assert error_of(response) == (400, "INVALID_ARGUMENT"), response.get_json()
    assert says in message_of(response)
    assert error_of(api.client.get(api.url("j"))) == (404, "NOT_FOUND")


def test_every_problem_of_an_entry_is_listed_in_details(api):
    response = api.put("j", {"schedule": "nonsense", "timezone": "Nowhere/Land", "target": {"noop": {}}})
    details = response.get_json()["error"]["details"]
    assert len(details) == 2 and message_of(response) == "; ".join(details)


@pytest.mark.parametrize("job_id", ["bad id", "bad$id", "ü", "x" * 101])
def test_a_job_id_with_bad_characters_is_400(api, job_id):
    response = api.put(job_id, noop_job(schedule="every 1m"))
    assert error_of(response) == (400, "INVALID_ARGUMENT")
    assert "is not a valid job id" in message_of(response)


def test_more_at_times_than_the_limit_is_400(api):
    times = [f"2030-01-01T00:{m // 60:02d}:{m % 60:02d}Z" for m in range(limits.MAX_AT_TIMES + 1)]
    response = api.put("j", noop_job(at=times))
    assert error_of(response) == (400, "INVALID_ARGUMENT")
    assert "1,001 timestamps; at most 1,000 are allowed" in message_of(response)
    assert api.put("j", noop_job(at=times[:-1])).status_code == 201


def test_templates_and_headers_are_bounded(api):
    url = "http://127.0.0.1:9/"
    big_body = http_job(schedule="triggered")
    big_body["target"]["http"]["body"] = "x" * (limits.MAX_BODY_BYTES + 1)
    assert "the limit is 262,144 bytes" in message_of(api.put("a", big_body))
    long_url = {"schedule": "triggered", "target": {"http": {"url": url + "x" * limits.MAX_URL_BYTES}}}
    assert "the limit is 8,192 bytes" in message_of(api.put("b", long_url))
    many = {f"X-H{i}": "v" for i in range(limits.MAX_HEADERS + 1)}
    response = api.put("c", {"schedule": "triggered", "target": {"http": {"url": url, "headers": many}}})
    assert "65 headers; at most 64 are allowed" in message_of(response)
    huge = {"X-Big": "v" * (limits.MAX_HEADER_VALUE_BYTES + 1)}
    big = {"schedule": "triggered", "target": {"http": {"url": url, "headers": huge}}}
    assert error_of(api.put("d", big))[0] == 400
    wide = {f"X-H{i}": "v" * 8000 for i in range(5)}
    response = api.put("e", {"schedule": "triggered", "target": {"http": {"url": url, "headers": wide}}})
    assert "all headers together" in message_of(response)


def test_a_body_larger_than_the_limit_is_413(api):
    body = '{"schedule": "every 1m", "target": {"noop": {}}, "x": "' + "y" * limits.MAX_REQUEST_BYTES + '"}'
    response = api.put("j", body)
    assert error_of(response) == (413, "PAYLOAD_TOO_LARGE")
    assert "524,288 bytes" in message_of(response)
    assert error_of(api.client.post("/api/v1/validate", data="#" * (limits.MAX_REQUEST_BYTES + 1))) == (
        413, "PAYLOAD_TOO_LARGE")


def test_a_project_holds_a_limited_number_of_jobs(api, monkeypatch):
    monkeypatch.setattr("web.api_jobs.MAX_JOBS_PER_PROJECT", 3)  # from-config is one of them
    assert api.put("a", noop_job(schedule="triggered")).status_code == 201
    assert api.put("b", noop_job(schedule="triggered")).status_code == 201
    full = api.put("c", noop_job(schedule="triggered"))
    assert error_of(full) == (409, "FAILED_PRECONDITION") and "3 jobs" in message_of(full)
    assert api.put("b", noop_job(schedule="every 1m")).status_code == 200  # replacing still works
    api.client.delete(api.url("a"))
    assert api.put("c", noop_job(schedule="triggered")).status_code == 201


def test_a_body_that_is_not_utf8_is_400(api):
    response = api.client.put(api.url("j"), data=b'{"schedule": "\xff"}')
    assert error_of(response) == (400, "INVALID_ARGUMENT") and "UTF-8" in message_of(response)


def test_a_bad_page_size_is_400(api):
    api.put("j", noop_job(schedule="triggered"))
    for size in ("0", "1001", "ten", "-1", "²"):
        response = api.get(api.url("j", f"/invocations?page_size={size}"))
        assert error_of(response) == (400, "INVALID_ARGUMENT"), size


def test_a_method_a_path_does_not_have_is_refused_in_json(api):
    response = api.client.patch(api.url("from-config"))
    assert error_of(response) == (405, "METHOD_NOT_ALLOWED")
    assert set(response.headers["Allow"].split(", ")) >= {"GET", "PUT", "DELETE"}


def test_an_unexpected_failure_is_a_500_in_json_and_storage_trouble_a_503(api, monkeypatch):
    api.put("j", noop_job(schedule="triggered"))

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(operations, "pause", broken)
    assert error_of(api.post("j", ":pause")) == (500, "INTERNAL")

    def unavailable(*args, **kwargs):
        raise StoreError("disk on fire")

    monkeypatch.setattr(operations, "resume", unavailable)
    assert error_of(api.post("j", ":resume")) == (503, "UNAVAILABLE")


@pytest.mark.parametrize("method, suffix", [("DELETE", "?allow_missing=true"), ("GET", ""),
                                            ("POST", ":pause"), ("GET", "/invocations")])
@pytest.mark.parametrize("job_id", ["%C2%84", "..", "...", "bad$id"])
def test_an_id_no_job_can_have_is_a_400_on_every_job_path(api, method, suffix, job_id):
    response = api.client.open(f"/api/v1/projects/demo/jobs/{job_id}{suffix}", method=method)
    assert response.status_code == 400, (method, suffix, response.status_code)
    assert "is not a valid job id" in message_of(response)


def test_a_null_reason_is_what_the_document_allows(api):
    from web.openapi_schemas import schemas

    assert schemas()["PauseRequest"]["properties"]["reason"]["nullable"] is True
    api.put("j", {"schedule": "triggered", "target": {"noop": {}}})
    assert api.post("j", ":pause", {"reason": None}).status_code == 200


def test_the_job_entry_schema_says_schedule_and_at_exclude_each_other(api):
    from web.openapi_schemas import schemas

    entry = schemas()["JobEntry"]
    # exactly one: both match two branches of oneOf, neither matches none
    assert entry["oneOf"] == [{"required": ["schedule"]}, {"required": ["at"]}]
    assert entry["properties"]["throttle"]["minLength"] == 1
    body = {"schedule": "triggered", "at": ["2030-01-01T00:00:00Z"], "target": {"noop": {}}}
    assert api.put("both", body).status_code == 400


@pytest.mark.parametrize("path", ["/api/v1/projects/demo%2F/jobs", "/api/v1//projects", "/api/v1/projects//demo/jobs"])
def test_no_redirect_is_built_from_the_callers_host(api, path):
    response = api.client.get(path, headers={"Host": "localhost:8080"})
    assert response.status_code == 404 and "Location" not in response.headers
