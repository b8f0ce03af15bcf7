"""pause_after_failures and on_failure through the API's job body, and in `defaults`."""

from config.loader import ProjectConfigError, parse_project_text
from engine.ports import DeliveryResult
from tests.web.conftest import error_of, http_job, noop_job


def test_a_put_job_takes_pause_after_failures_and_on_failure(api):
    body = noop_job(schedule="every 1m", pause_after_failures=2,
                    on_failure={"http": {"url": "http://127.0.0.1:9/alert"}})
    assert api.put("j", body).status_code == 201
    stored = api.store.get_job("demo", "j")
    assert stored.definition.pause_after_failures == 2
    assert stored.definition.on_failure["http"]["url"] == "http://127.0.0.1:9/alert"
    assert stored.record.policy.pause_after_failures == 2 and stored.record.policy.notify_failures


def test_the_api_pauses_a_job_after_its_consecutive_failures(api):
    api.put("j", http_job(schedule="every 1m", pause_after_failures=2))
    api.target.respond = lambda request: DeliveryResult(
        "failed" if request.job_id == "j" else "succeeded", "http 500")
    api.until(150)
    job = api.job("j")
    assert (job["state"], job["paused"]) == ("PAUSED", True)
    assert job["pause_reason"] == "paused after 2 consecutive failures (last: http 500)"
    assert api.post("j", ":resume").status_code == 200
    assert api.job("j")["state"] == "SCHEDULED"


def test_bad_values_are_refused_naming_the_field(api):
    zero = api.put("j", noop_job(schedule="every 1m", pause_after_failures=0))
    assert error_of(zero) == (400, "INVALID_ARGUMENT")
    assert "pause_after_failures" in zero.get_json()["error"]["message"]
    bad = api.put("j", noop_job(schedule="every 1m", on_failure={"smoke": {}}))
    assert error_of(bad) == (400, "INVALID_ARGUMENT")
    assert "on_failure" in bad.get_json()["error"]["message"]


def test_the_openapi_job_body_lists_the_new_fields(api):
    schema = api.get("/api/v1/openapi.json").get_json()["components"]["schemas"]
    entry = next(s for s in schema.values() if "pause_after_failures" in s.get("properties", {}))
    assert entry["properties"]["pause_after_failures"]["minimum"] == 1
    assert "on_failure" in entry["properties"]


def test_pause_after_failures_has_a_project_default_and_on_failure_has_none():
    text = """
defaults: {pause_after_failures: 4}
jobs:
  - id: a
    schedule: every 1m
    target: {noop: {}}
  - id: b
    schedule: every 1m
    pause_after_failures: 1
    target: {noop: {}}
"""
    a, b = parse_project_text("p", text, "p.yaml").jobs
    assert (a.policy.pause_after_failures, b.policy.pause_after_failures) == (4, 1)
    try:
        parse_project_text("p", "defaults: {on_failure: {noop: {}}}\n", "p.yaml")
    except ProjectConfigError as error:
        assert "p.yaml:1: defaults.on_failure: cannot have a default" in str(error)
    else:
        raise AssertionError("on_failure in defaults must be refused")
