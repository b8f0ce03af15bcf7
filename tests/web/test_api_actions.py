"""pause, resume, trigger and abort; invocation history and one invocation's log."""

from __future__ import annotations

from datetime import timedelta

from tests.engine.harness import START
from tests.web.conftest import async_job, error_of, http_job, noop_job


def test_pause_with_a_reason_then_resume(api):
    api.put("j", noop_job(schedule="every 1m"))
    paused = api.post("j", ":pause", {"reason": "maintenance"})
    assert paused.status_code == 200
    job = paused.get_json()
    assert (job["state"], job["paused"], job["pause_reason"], job["next_run_time"]) == (
        "PAUSED", True, "maintenance", None)
    api.until(150)
    assert api.delivered("j") == []
    resumed = api.post("j", ":resume").get_json()
    assert (resumed["state"], resumed["paused"]) == ("SCHEDULED", False)
    api.until(185)
    assert [r.scheduled_time for r in api.delivered("j")] == [START + timedelta(minutes=3)]
    assert [(h["status"], h["reason"]) for h in api.history("j")] == [
        ("SKIPPED", "paused"), ("SKIPPED", "paused"), ("SUCCEEDED", "")]


def test_pause_without_a_body_and_resume_of_a_running_job_change_nothing_else(api):
    api.put("j", noop_job(schedule="every 1m"))
    assert api.client.post(api.url("j", ":pause")).get_json()["pause_reason"] == ""
    assert api.post("j", ":resume").get_json()["state"] == "SCHEDULED"
    assert api.post("j", ":resume").get_json()["state"] == "SCHEDULED"


def test_a_paused_job_refuses_a_trigger_with_409(api):
    api.put("j", noop_job(schedule="triggered"))
    api.post("j", ":pause")
    response = api.post("j", ":trigger")
    assert error_of(response) == (409, "FAILED_PRECONDITION")
    assert "paused" in response.get_json()["error"]["message"]
    assert api.history("j") == []


def test_a_disabled_job_refuses_pause_and_trigger(api):
    api.put("j", noop_job(schedule="triggered", disabled=True))
    assert error_of(api.post("j", ":pause")) == (409, "FAILED_PRECONDITION")
    assert error_of(api.post("j", ":trigger")) == (409, "FAILED_PRECONDITION")


def test_a_rerun_older_than_the_history_window_is_refused_naming_the_field(api):
    """Finding N8: year 1 was accepted and answered `"1-01-01T00:00:00.000Z"`."""
    api.put("j", noop_job(schedule="triggered"))
    for old in ("0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "2025-11-20T09:59:59Z"):  # 45 days: 11-21 10:00
        status, code = error_of(answer := api.post("j", ":trigger", {"scheduled_time": old}))
        assert (status, code) == (400, "INVALID_ARGUMENT"), old
        assert "scheduled_time" in answer.get_json()["error"]["message"]
    assert api.history("j") == []
    kept = api.post("j", ":trigger", {"scheduled_time": "2025-11-21T10:00:00Z"})
    assert kept.status_code == 200 and kept.get_json()["scheduled_time"] == "2025-11-21T10:00:00.000Z"


def test_trigger_returns_the_invocation_and_delivers_it(api):
    api.put("j", http_job(schedule="triggered"))
    response = api.post("j", ":trigger")
    assert response.status_code == 200
    invocation = response.get_json()
    assert (invocation["job"], invocation["status"], invocation["trigger"]) == ("j", "STARTING", "manual")
    assert invocation["scheduled_time"] == "2026-01-05T10:00:00.000Z"
    api.until(1)
    assert [r.invocation_id for r in api.delivered("j")] == [invocation["id"]]
    assert api.get(api.url("j", f"/invocations/{invocation['id']}")).get_json()["status"] == "SUCCEEDED"


def test_a_repeated_request_id_names_the_same_invocation(api):
    api.put("j", noop_job(schedule="triggered", overlap="allow", max_concurrent=5))
    first = api.post("j", ":trigger", {"request_id": "req-1"}).get_json()
    api.until(2)
    again = api.post("j", ":trigger", {"request_id": "req-1"}).get_json()
    other = api.post("j", ":trigger", {"request_id": "req-2"}).get_json()
    assert again["id"] == first["id"] and again["status"] == "SUCCEEDED"
    assert other["id"] != first["id"]
    api.until(5)
    assert len(api.delivered("j")) == 2


def test_triggers_without_a_request_id_are_each_new(api):
    api.put("j", noop_job(schedule="triggered", overlap="allow", max_concurrent=5))
    ids = {api.post("j", ":trigger").get_json()["id"] for _ in range(3)}
    assert len(ids) == 3


def test_the_overlap_policy_applies_to_triggers(api):
    api.put("skip", noop_job(schedule="triggered"))
    api.put("buffer", noop_job(schedule="triggered", overlap="buffer_one"))
    for job in ("skip", "buffer"):
        api.post(job, ":trigger")
    api.clock.advance(seconds=1)
    skipped = api.post("skip", ":trigger").get_json()
    assert (skipped["status"], skipped["reason"]) == ("SKIPPED", "overlap")
    buffered = api.post("buffer", ":trigger").get_json()
    assert (buffered["status"], buffered["reason"]) == ("STARTING", "buffered")
    api.until(5)
    assert [h["id"] for h in api.history("buffer")][-1] == buffered["id"]
    assert len(api.delivered("buffer")) == 2


def test_abort_ends_the_active_invocations(api):
    api.put("j", async_job(schedule="triggered", overlap="allow", max_concurrent=3))
    api.answer("accepted", "accepted")  # both wait for a completion that never comes
    api.post("j", ":trigger")
    api.post("j", ":trigger")
    api.until(1)
    assert api.job("j")["state"] == "RUNNING" and len(api.job("j")["active_invocations"]) == 2
    job = api.post("j", ":abort", {"reason": "stuck"}).get_json()
    assert job["active_invocations"] == [] and job["state"] == "SCHEDULED"
    assert {(h["status"], h["reason"]) for h in api.history("j")} == {("ABORTED", "stuck")}
    assert api.post("j", ":abort").status_code == 200  # nothing active: nothing to do


def test_history_is_newest_first_with_stable_page_tokens(api):
    api.put("j", noop_job(schedule="every 1m"))
    api.until(7 * 60 + 1)
    first = api.get(api.url("j", "/invocations?page_size=3")).get_json()
    assert [i["scheduled_time"][11:16] for i in first["invocations"]] == ["10:07", "10:06", "10:05"]
    api.until(10 * 60 + 1)  # newer invocations do not shift the pages after a token
    second = api.get(api.url("j", f"/invocations?page_size=3&page_token={first['next_page_token']}")).get_json()
    assert [i["scheduled_time"][11:16] for i in second["invocations"]] == ["10:04", "10:03", "10:02"]
    last = api.get(api.url("j", f"/invocations?page_size=3&page_token={second['next_page_token']}")).get_json()
    assert [i["scheduled_time"][11:16] for i in last["invocations"]] == ["10:01"]
    assert last["next_page_token"] is None


def test_one_invocation_comes_with_its_log(api):
    api.put("j", noop_job(schedule="triggered"))
    invocation = api.post("j", ":trigger").get_json()
    api.until(1)
    full = api.get(api.url("j", f"/invocations/{invocation['id']}")).get_json()
    assert [entry["message"] for entry in full["log"]] == [
        "created", "attempt 1 starting", "attempt 1: succeeded", "finished: SUCCEEDED"]
    listed = api.get(api.url("j", "/invocations")).get_json()["invocations"][0]
    assert "log" not in listed and listed["id"] == invocation["id"]


def test_unknown_invocations_jobs_and_projects_are_404(api):
    api.put("j", noop_job(schedule="triggered"))
    for path in ("/api/v1/projects/nope/jobs", "/api/v1/projects/nope/jobs/j", api.url("nope"),
                 api.url("nope", "/invocations"), api.url("j", "/invocations/nope"), "/api/v1/nothing-here"):
        assert error_of(api.get(path)) == (404, "NOT_FOUND"), path
    for action in (":pause", ":resume", ":trigger", ":abort"):
        assert error_of(api.post("nope", action)) == (404, "NOT_FOUND"), action
        assert error_of(api.client.post(f"/api/v1/projects/nope/jobs/j{action}")) == (404, "NOT_FOUND")
    assert error_of(api.put("j", noop_job(schedule="triggered"), project="nope")) == (404, "NOT_FOUND")


def test_actions_refuse_unknown_fields_and_wrong_types(api):
    api.put("j", noop_job(schedule="triggered"))
    for action, body in ((":pause", {"reasons": "x"}), (":resume", {"now": True}), (":trigger", {"id": "x"}),
                         (":abort", {"why": "x"}), (":pause", {"reason": 5}), (":trigger", {"request_id": 7})):
        response = api.post("j", action, body)
        assert error_of(response) == (400, "INVALID_ARGUMENT"), (action, body)
    assert "unknown field 'reasons'" in api.post("j", ":pause", {"reasons": "x"}).get_json()["error"]["message"]
    too_long = api.post("j", ":pause", {"reason": "x" * 1001})
    assert error_of(too_long) == (400, "INVALID_ARGUMENT")
    assert "at most 1,000" in too_long.get_json()["error"]["message"]
