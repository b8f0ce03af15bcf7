"""Every (caller, action) pair of the API against the project ACL (docs/REFERENCE.md section 6),
with bearer tokens from SUNDIAL_API_TOKENS, and forged identities that must not count.

Each refused request changes nothing: the job's state, definition and history are the
same afterwards."""

from __future__ import annotations

import pytest

from config.settings import Settings
from tests.web.conftest import Api, noop_job
from web.app import create_app

ACL = """\
acl:
  readers: [user:Reader@example.com, group:auditors]
  triggerers: [user:trigger@example.com]
  owners: [serviceAccount:deployer@p.iam.gserviceaccount.com]
jobs:
  - id: from-config
    schedule: every 1m
    target: {noop: {}}
"""
TOKENS = ("r-token=user:reader@example.com,t-token=user:trigger@example.com,"
          "o-token=serviceAccount:deployer@p.iam.gserviceaccount.com,x-token=user:stranger@example.com,"
          "a-token=user:auditor@example.com")
GROUPS = "auditors: [user:auditor@example.com]\n"

CALLERS = {
    "no credentials": {},
    "unknown token": {"Authorization": "Bearer nope"},
    "forged IAP assertion": {"X-Goog-IAP-JWT-Assertion": "eyJhbGciOiJub25lIn0.eyJlbWFpbCI6Im8ifQ."},
    "forged ID token": {"Authorization": "Bearer eyJhbGciOiJub25lIn0.eyJlbWFpbCI6Im8ifQ.sig"},
    "outsider": {"Authorization": "Bearer x-token"},
    "reader": {"Authorization": "Bearer r-token"},
    "reader by group": {"Authorization": "Bearer a-token"},
    "triggerer": {"Authorization": "Bearer t-token"},
    "owner": {"Authorization": "Bearer o-token"},
}
LEVEL = {"outsider": 0, "reader": 1, "reader by group": 1, "triggerer": 2, "owner": 3}

JOB = "/api/v1/projects/demo/jobs/j"
# action -> (method, path, body, the level it needs: 1 read, 2 trigger, 3 own)
ACTIONS = {
    "list jobs": ("GET", "/api/v1/projects/demo/jobs", None, 1),
    "get job": ("GET", JOB, None, 1),
    "list invocations": ("GET", JOB + "/invocations", None, 1),
    "get invocation": ("GET", JOB + "/invocations/{invocation}", None, 1),
    "list audit": ("GET", "/api/v1/projects/demo/audit", None, 1),
    "trigger": ("POST", JOB + ":trigger", None, 2),
    "re-run": ("POST", JOB + ":trigger", {"scheduled_time": "2026-01-01T00:00:00Z"}, 2),  # within the history
    # The job is `triggered`: a caller who may backfill hears why it has no fire times (400).
    "backfill": ("POST", JOB + ":backfill", {"start": "2020-01-01T00:00:00Z", "end": "2020-01-02T00:00:00Z"}, 2),
    "pause": ("POST", JOB + ":pause", {"reason": "r"}, 2),
    "resume": ("POST", JOB + ":resume", None, 2),
    "abort": ("POST", JOB + ":abort", None, 3),
    "bulk pause": ("POST", "/api/v1/projects/demo/jobs:pause", {"reason": "r"}, 2),
    "bulk resume": ("POST", "/api/v1/projects/demo/jobs:resume", None, 2),
    "replace job": ("PUT", JOB, noop_job(schedule="every 5m"), 3),
    "delete job": ("DELETE", JOB, None, 3),
}


class Secured(Api):
    """The API harness with API tokens, a groups file and the demo project's ACL."""

    def __init__(self, tmp_path, monkeypatch):
        super().__init__(tmp_path)
        groups = tmp_path / "groups.yaml"
        groups.write_text(GROUPS)
        self.app = create_app(self.engine, Settings(task_secret="t", demo_echo=False, api_tokens=TOKENS,
                                                    groups_file=str(groups)))
        self.client = self.app.test_client()
        self.write_config("demo", ACL)


class SecuredApi(Secured):
    def __init__(self, tmp_path, monkeypatch):
        super().__init__(tmp_path, monkeypatch)
        owner = CALLERS["owner"]
        assert self.client.put(JOB, json=noop_job(schedule="triggered"), headers=owner).status_code == 201
        self.invocation = self.client.post(JOB + ":trigger", headers=owner).get_json()["id"]

    def snapshot(self) -> tuple:
        owner = CALLERS["owner"]
        job = self.client.get(JOB, headers=owner).get_json()
        history = self.client.get(JOB + "/invocations", headers=owner).get_json()["invocations"]
        return job["state"], job["schedule"], job.get("pause_reason"), len(history)


@pytest.fixture
def secured(tmp_path, monkeypatch) -> SecuredApi:
    return SecuredApi(tmp_path, monkeypatch)


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("who", CALLERS)
def test_each_caller_may_do_exactly_what_its_role_grants(secured, who, action):
    method, path, body, needs = ACTIONS[action]
    before = secured.snapshot()
    response = secured.client.open(path.format(invocation=secured.invocation), method=method,
                                   json=body, headers=CALLERS[who])
    if who not in LEVEL:
        expected = 401  # nothing that proves an identity: refused before anything is read
    elif LEVEL[who] == 0:
        expected = 404  # may not read: the project does not exist for this caller
    elif LEVEL[who] < needs:
        expected = 403
    else:
        expected = {"replace job": 200, "delete job": 204, "backfill": 400}.get(action, 200)
    assert response.status_code == expected, response.get_data(as_text=True)
    if expected >= 400:
        assert response.get_json()["error"]["code"] == {
            400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND"}[expected]
        assert secured.snapshot() == before


@pytest.mark.parametrize("who", CALLERS)
def test_the_project_list_shows_only_readable_projects(secured, who):
    response = secured.client.get("/api/v1/projects", headers=CALLERS[who])
    if who not in LEVEL:
        assert response.status_code == 401
        return
    shown = [p["id"] for p in response.get_json()["projects"]]
    assert shown == ([] if LEVEL[who] == 0 else ["demo"])


def test_a_project_without_an_acl_is_seen_by_administrators_only(secured, monkeypatch):
    secured.write_config("plain", "jobs: []\n")
    app = create_app(secured.engine, Settings(task_secret="t", demo_echo=False, api_tokens=TOKENS,
                                              admins="user:stranger@example.com"))
    as_admin = app.test_client().get("/api/v1/projects", headers=CALLERS["outsider"]).get_json()
    assert sorted(p["id"] for p in as_admin["projects"]) == ["demo", "plain"]
    as_owner = secured.client.get("/api/v1/projects/plain/jobs", headers=CALLERS["owner"])
    assert as_owner.status_code == 404


def test_anonymous_readers_on_app_engine_need_no_credentials(secured):
    secured.write_config("public", "acl: {readers: [anonymous]}\njobs: []\n")
    app = create_app(secured.engine, Settings(task_secret="t", demo_echo=False, on_app_engine=True))
    client = app.test_client()
    assert client.get("/api/v1/projects/public/jobs").status_code == 200
    assert client.get("/api/v1/projects/demo/jobs").status_code == 404
    assert client.post(JOB + ":trigger").status_code == 404


def test_the_async_completion_needs_its_token_not_a_caller_identity(secured):
    response = secured.client.post(JOB + f"/invocations/{secured.invocation}:complete",
                                   json={"status": "SUCCEEDED"},
                                   headers={"X-Sundial-Completion-Token": "wrong"})
    assert response.status_code == 403  # the token check, not the caller check (401)


def test_the_demo_echo_answers_the_demo_heartbeat_without_a_token(secured):
    # The example projects' heartbeat calls the server's own echo with no token: with API
    # tokens set (the container try-out), it was refused 401 at every beat.
    app = create_app(secured.engine, Settings(task_secret="t", demo_echo=True, api_tokens=TOKENS))
    client = app.test_client()
    answer = client.post("/demo/echo", headers={"X-Sundial-Invocation": "inv-1"})
    assert (answer.status_code, answer.get_json()) == (200, {"received": "inv-1"})
    assert client.get("/api/v1/projects").status_code == 401  # everything else still asks who
