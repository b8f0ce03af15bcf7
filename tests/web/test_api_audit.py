"""GET /api/v1/projects/{p}/audit and what feeds it: every operator action through the API
and the UI's buttons recorded with the caller who did it (API tokens configured), paged
newest first, readable by the project's readers only; `paused_by` on the job."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest

from tests.web.conftest import error_of, noop_job
from tests.web.test_access import CALLERS, JOB, Secured

AUDIT = "/api/v1/projects/demo/audit"
OWNER, TRIGGERER = CALLERS["owner"], CALLERS["triggerer"]
DEPLOYER = "serviceAccount:deployer@p.iam.gserviceaccount.com"


@pytest.fixture
def secured(tmp_path, monkeypatch) -> Secured:
    return Secured(tmp_path, monkeypatch)


def _act(secured, method: str, path: str, headers: dict, body=None):
    # One second apart: entries within one millisecond have no order among them.
    secured.clock.current += timedelta(seconds=1)
    response = secured.client.open(path, method=method, json=body, headers=headers)
    assert response.status_code < 300, response.get_data(as_text=True)
    return response


def _entries(secured, query: str = "", headers=OWNER) -> list[dict]:
    response = secured.client.get(AUDIT + query, headers=headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()["entries"]


def test_each_action_is_recorded_with_its_caller_newest_first(secured, caplog):
    caplog.set_level(logging.INFO, logger="sundial.audit")
    _act(secured, "PUT", JOB, OWNER, noop_job(schedule="triggered"))
    _act(secured, "PUT", JOB, OWNER, noop_job(schedule="every 5m"))
    _act(secured, "POST", JOB + ":pause", TRIGGERER, {"reason": "INC-1234"})
    job = secured.client.get(JOB, headers=OWNER).get_json()
    assert (job["paused"], job["pause_reason"], job["paused_by"]) == (True, "INC-1234", "user:trigger@example.com")
    _act(secured, "POST", JOB + ":resume", TRIGGERER)
    assert "paused_by" not in secured.client.get(JOB, headers=OWNER).get_json()  # only while paused
    invocation = _act(secured, "POST", JOB + ":trigger", TRIGGERER).get_json()["id"]
    _act(secured, "POST", JOB + ":abort", OWNER, {"reason": "stuck"})
    _act(secured, "DELETE", JOB, OWNER)
    entries = _entries(secured)
    assert [(e["actor"], e["action"], e["job"], _put_as_created(e["detail"])) for e in entries] == [
        (DEPLOYER, "delete", "j", {}),
        (DEPLOYER, "abort", "j", {"reason": "stuck"}),
        ("user:trigger@example.com", "trigger", "j", {"invocation": invocation}),
        ("user:trigger@example.com", "resume", "j", {}),
        ("user:trigger@example.com", "pause", "j", {"reason": "INC-1234"}),
        (DEPLOYER, "put", "j", {"created": False}),
        (DEPLOYER, "put", "j", {"created": True}),
    ]
    assert entries[0]["time"] == "2026-01-05T10:00:07.000Z"
    # One JSON log line per action, at INFO, saying who did what.
    lines = [r.getMessage() for r in caplog.records if r.name == "sundial.audit"]
    assert "audit: user:trigger@example.com paused demo/j: INC-1234" in lines and len(lines) == 7
    assert all(r.levelname == "INFO" for r in caplog.records if r.name == "sundial.audit")


def _put_as_created(detail: dict) -> dict:
    """A PUT's detail without what it describes of the definitions (tested on its own)."""
    return {"created": detail["created"]} if "created" in detail else detail


def test_a_put_records_the_targets_and_digest_it_replaced_and_put(secured, caplog):
    """Finding N9: an owner PUT an exfiltrating target, triggered it and PUT the original
    back, and the log showed two `put ... replaced` with no trace of the URL used."""
    caplog.set_level(logging.INFO, logger="sundial.audit")
    original = {"schedule": "triggered", "target": {"http": {"url": "https://api.example.com/run?key=SECRET"}}}
    exfiltrating = {"schedule": "triggered", "target": {"http": {"url": "https://u:pw@evil.example/x?t=1#f"}},
                    "on_failure": {"pubsub": {"topic": "projects/p/topics/t"}}}
    for body in (original, exfiltrating, original):
        _act(secured, "PUT", JOB, OWNER, body)
    back, away, created = [e["detail"] for e in _entries(secured)]
    assert created["created"] is True and "before" not in created
    assert created["after"]["targets"] == {"target": "http https://api.example.com/run"}
    assert away["created"] is False and away["before"] == created["after"]
    assert away["after"]["targets"] == {"target": "http https://evil.example/x",
                                        "on_failure": "pubsub projects/p/topics/t"}
    assert back["before"] == away["after"] and back["after"] == created["after"]
    assert created["after"]["revision"] != away["after"]["revision"]
    assert len(created["after"]["revision"]) == 16
    assert not any(word in json.dumps(_entries(secured)) for word in ("SECRET", "pw@", "t=1"))
    lines = [r.getMessage() for r in caplog.records if r.name == "sundial.audit"]
    assert (f"audit: {DEPLOYER} put demo/j: replaced: on_failure none -> pubsub projects/p/topics/t; "
            "target http https://api.example.com/run -> http https://evil.example/x") in lines, lines


def test_refused_and_unchanged_actions_leave_no_entry(secured):
    _act(secured, "PUT", JOB, OWNER, noop_job(schedule="triggered"))
    _act(secured, "PUT", JOB, OWNER, noop_job(schedule="triggered"))  # the same body: nothing changed
    reader = CALLERS["reader"]
    assert secured.client.post(JOB + ":pause", json={}, headers=reader).status_code == 403
    assert secured.client.delete(JOB, headers=TRIGGERER).status_code == 403
    _act(secured, "POST", JOB + ":pause", TRIGGERER)
    assert error_of(secured.client.post(JOB + ":trigger", headers=TRIGGERER)) == (409, "FAILED_PRECONDITION")
    assert [e["action"] for e in _entries(secured)] == ["pause", "put"]


def test_readers_may_read_it_and_others_get_404_as_for_the_project(secured):
    _act(secured, "PUT", JOB, OWNER, noop_job(schedule="triggered"))
    assert len(_entries(secured, headers=CALLERS["reader"])) == 1
    assert error_of(secured.client.get(AUDIT, headers=CALLERS["outsider"])) == (404, "NOT_FOUND")
    assert secured.client.get(AUDIT).status_code == 401
    assert error_of(secured.client.get("/api/v1/projects/nope/audit", headers=OWNER)) == (404, "NOT_FOUND")


def test_pages_and_the_job_filter(secured):
    for job_id in ("a", "b", "a", "b", "a"):
        _act(secured, "POST", "/api/v1/projects/demo/jobs/from-config:pause", TRIGGERER,
             {"reason": job_id})  # config jobs too: pausing is an operator action
        _act(secured, "PUT", f"/api/v1/projects/demo/jobs/{job_id}", OWNER,
             noop_job(schedule=f"every {len(_entries(secured)) + 1}m"))
    everything = _entries(secured, "?page_size=1000")
    assert len(everything) == 10
    seen, token = [], None
    while True:
        page = secured.client.get(AUDIT + "?page_size=3" + (f"&page_token={token}" if token else ""),
                                  headers=OWNER).get_json()
        seen += page["entries"]
        token = page["next_page_token"]
        if token is None:
            break
    assert seen == everything and len(_entries(secured)) == 10  # default page: 100
    only_a = _entries(secured, "?job=a")
    assert [_put_as_created(e["detail"]) for e in only_a] == [{"created": False}, {"created": False},
                                                              {"created": True}]
    assert _entries(secured, "?job=from-config")[0]["detail"] == {"reason": "a"}
    for bad in ("?page_size=0", "?page_size=1001", "?page_size=x", "?job=..", "?job=a%2Fb"):
        assert error_of(secured.client.get(AUDIT + bad, headers=OWNER)) == (400, "INVALID_ARGUMENT"), bad


def test_without_tokens_the_actor_is_local(api):
    api.put("j", noop_job(schedule="triggered"))
    paused = api.post("j", ":pause", {"reason": "INC-1"}).get_json()
    assert paused["paused_by"] == "local"
    entries = api.get("/api/v1/projects/demo/audit").get_json()
    assert json.loads(json.dumps(entries))["next_page_token"] is None
    assert {(e["actor"], e["action"]) for e in entries["entries"]} == {("local", "put"), ("local", "pause")}


def test_a_backfill_and_a_rerun_are_recorded_with_their_range_and_time(secured):
    _act(secured, "PUT", JOB, OWNER, noop_job(schedule="0 0 * * * ?"))
    now = secured.clock.current
    start, end = (now - timedelta(hours=3)).strftime("%Y-%m-%dT%H:00:00Z"), now.strftime("%Y-%m-%dT%H:00:00Z")
    count = _act(secured, "POST", JOB + ":backfill", TRIGGERER, {"start": start, "end": end}).get_json()["count"]
    rerun_at = (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:00:00Z")
    rerun = _act(secured, "POST", JOB + ":trigger", TRIGGERER, {"scheduled_time": rerun_at}).get_json()
    entries = _entries(secured)
    assert [(e["actor"], e["action"]) for e in entries[:2]] == [("user:trigger@example.com", "trigger"),
                                                               ("user:trigger@example.com", "backfill")]
    millis = lambda text: text.replace("Z", ".000Z")  # noqa: E731
    assert entries[0]["detail"] == {"invocation": rerun["id"], "scheduled_time": millis(rerun_at)}
    assert entries[1]["detail"] == {"start": millis(start), "end": millis(end), "count": count} and count == 3
