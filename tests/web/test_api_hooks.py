"""on_recovery and the hook-only template variables through the API's job body."""

from engine.secrets import REDACTED
from tests.web.conftest import error_of, http_job, noop_job


def test_a_put_job_takes_on_recovery_and_hook_variables_in_it(api):
    hook = {"http": {"url": "http://127.0.0.1:9/ok", "body": '{"text":"${jobId} ${status} after ${failures}"}'}}
    assert api.put("j", noop_job(schedule="every 1m", on_recovery=hook)).status_code == 201
    stored = api.store.get_job("demo", "j")
    assert stored.definition.on_recovery["http"]["body"] == hook["http"]["body"]
    assert stored.record.policy.notify_recoveries and not stored.record.policy.notify_failures


def test_reason_in_a_jobs_target_is_refused_naming_it(api):
    refused = api.put("j", http_job(schedule="every 1m", target={"http": {"url": "http://127.0.0.1:9/x",
                                                                           "body": "${reason}"}}))
    assert error_of(refused) == (400, "INVALID_ARGUMENT")
    message = refused.get_json()["error"]["message"]
    assert "target.http.body: ${reason} is only for on_failure and on_recovery templates" in message


def test_the_openapi_job_body_lists_on_recovery(api):
    schema = api.get("/api/v1/openapi.json").get_json()["components"]["schemas"]
    entry = next(s for s in schema.values() if "on_failure" in s.get("properties", {}))
    assert "on_recovery" in entry["properties"]


def test_the_job_page_shows_both_hooks_with_their_credential_headers_masked(api):
    hook = {"http": {"url": "http://127.0.0.1:9/ok", "headers": {"Authorization": "Bearer s3cret"}}}
    api.put("j", noop_job(schedule="every 1m", on_failure=hook, on_recovery=hook))
    page = api.client.get("/p/demo/j").get_data(as_text=True)
    assert "on_recovery" in page and "s3cret" not in page
    assert page.count(REDACTED.replace("<", "&lt;").replace(">", "&gt;")) >= 2
    stored = api.store.get_job("demo", "j").definition.on_recovery
    assert stored["http"]["headers"]["Authorization"] == "Bearer s3cret"  # only what is shown is masked
