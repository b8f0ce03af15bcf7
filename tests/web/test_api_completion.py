"""Async completion: POST .../invocations/{id}:complete with the invocation's token."""

from __future__ import annotations

import pytest

from tests.web.conftest import async_job, error_of


@pytest.fixture
def running(api):
    """An async job whose invocation the target accepted (202): RUNNING, waiting."""
    api.put("j", async_job(schedule="triggered", timeout="5m"))
    api.answer("accepted")
    invocation = api.post("j", ":trigger").get_json()["id"]
    api.until(1)
    (request,) = api.delivered("j")
    assert request.completion_url == f"http://127.0.0.1:8080{api.url('j', f'/invocations/{invocation}:complete')}"
    return invocation, request.completion_token


def complete(api, invocation: str, body: dict, token: str | None = None, bearer: str | None = None):
    headers = {}
    if token is not None:
        headers["X-Sundial-Completion-Token"] = token
    if bearer is not None:
        headers["Authorization"] = f"Bearer {bearer}"
    return api.client.post(api.url("j", f"/invocations/{invocation}:complete"), json=body, headers=headers)


def status_of(api, invocation: str) -> tuple[str, str]:
    row = api.get(api.url("j", f"/invocations/{invocation}")).get_json()
    return row["status"], row["reason"]


def test_the_callback_with_its_token_completes_the_invocation(api, running):
    invocation, token = running
    assert status_of(api, invocation) == ("RUNNING", "")
    response = complete(api, invocation, {"status": "SUCCEEDED", "message": "exported 42 rows"}, token)
    assert response.status_code == 200
    assert (response.get_json()["status"], response.get_json()["id"]) == ("SUCCEEDED", invocation)
    log = api.get(api.url("j", f"/invocations/{invocation}")).get_json()["log"]
    assert {"message": "completion: SUCCEEDED", "detail": "exported 42 rows"}.items() <= next(
        entry for entry in log if entry["message"].startswith("completion")).items()
    assert log[-1]["message"] == "finished: SUCCEEDED"
    assert api.job("j")["state"] == "SCHEDULED"


def test_the_token_may_come_as_a_bearer_token(api, running):
    invocation, token = running
    assert complete(api, invocation, {"status": "SUCCEEDED"}, bearer=token).status_code == 200


def test_a_failed_completion_carries_its_message_as_the_reason(api, running):
    invocation, token = running
    complete(api, invocation, {"status": "FAILED", "message": "upstream said no"}, token)
    assert status_of(api, invocation) == ("FAILED", "upstream said no")


def test_a_wrong_token_is_403_and_changes_nothing(api, running):
    invocation, token = running
    before = api.get(api.url("j", f"/invocations/{invocation}")).get_json()
    for wrong in ("nope", token[:-1] + ("0" if token[-1] != "0" else "1"), "é"):
        response = complete(api, invocation, {"status": "FAILED"}, wrong)
        assert error_of(response) == (403, "PERMISSION_DENIED")
    assert api.get(api.url("j", f"/invocations/{invocation}")).get_json() == before


def test_no_token_is_401(api, running):
    invocation, _ = running
    assert error_of(complete(api, invocation, {"status": "SUCCEEDED"})) == (401, "UNAUTHENTICATED")


def test_another_invocations_token_is_refused(api, running):
    invocation, _ = running
    other = api.engine.deliveries.completion_token("0" * 22)
    assert error_of(complete(api, invocation, {"status": "SUCCEEDED"}, other)) == (403, "PERMISSION_DENIED")


def test_the_same_completion_again_is_200_a_different_one_409(api, running):
    invocation, token = running
    complete(api, invocation, {"status": "SUCCEEDED"}, token)
    assert complete(api, invocation, {"status": "SUCCEEDED"}, token).status_code == 200
    late = complete(api, invocation, {"status": "FAILED"}, token)
    assert error_of(late) == (409, "FAILED_PRECONDITION")
    assert status_of(api, invocation) == ("SUCCEEDED", "")


def test_without_a_callback_the_invocation_times_out(api, running):
    invocation, token = running
    api.until(5 * 60 + 1)
    api.engine.maintenance.run_watchdog()
    assert status_of(api, invocation) == ("FAILED", "timeout")
    assert error_of(complete(api, invocation, {"status": "SUCCEEDED"}, token)) == (409, "FAILED_PRECONDITION")


def test_a_malformed_completion_is_400(api, running):
    invocation, token = running
    for body in ({}, {"status": "DONE"}, {"status": "SUCCEEDED", "extra": 1}, {"status": "FAILED", "message": 3}):
        assert error_of(complete(api, invocation, body, token)) == (400, "INVALID_ARGUMENT"), body
    long = complete(api, invocation, {"status": "FAILED", "message": "x" * 4001}, token)
    assert error_of(long) == (400, "INVALID_ARGUMENT")
    assert status_of(api, invocation) == ("RUNNING", "")


def test_an_unknown_invocation_with_its_own_valid_token_is_404(api, running):
    unknown = "f" * 22
    response = complete(api, unknown, {"status": "SUCCEEDED"}, api.engine.deliveries.completion_token(unknown))
    assert error_of(response) == (404, "NOT_FOUND")


def test_a_report_that_echoes_the_completion_token_is_stored_masked(api, running):
    invocation, token = running
    complete(api, invocation, {"status": "FAILED", "message": f"bad token? {token} said the worker"}, token)
    row = api.get(api.url("j", f"/invocations/{invocation}")).get_json()
    assert token not in str(row)
    assert row["reason"].startswith("bad token? ") and row["reason"].endswith(" said the worker")
