"""POST /api/v1/projects/{p}/jobs:pause and :resume: every job of a project, or those with
given labels, each changed and audited as if paused or resumed on its own."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.web.conftest import error_of, noop_job
from tests.web.test_access import CALLERS, Secured

PAUSE, RESUME = "/api/v1/projects/demo/jobs:pause", "/api/v1/projects/demo/jobs:resume"
AUDIT = "/api/v1/projects/demo/audit"
TRIGGERER = CALLERS["triggerer"]


def _jobs(api) -> None:
    api.put("a", noop_job(schedule="every 1m", labels={"team": "data", "tier": "1"}))
    api.put("b", noop_job(schedule="every 1m", labels={"team": "data", "tier": "2"}))
    api.put("c", noop_job(schedule="every 1m", labels={"team": "web"}))


def _states(api) -> dict[str, tuple[str, str]]:
    jobs = api.get("/api/v1/projects/demo/jobs").get_json()["jobs"]
    return {job["id"]: (job["state"], job["pause_reason"]) for job in jobs}


@pytest.mark.parametrize("label", ["team=data", "team:data", ["team=data"], ["team", "team=data"]])
def test_a_label_pauses_its_jobs_only_with_the_reason_and_resume_undoes_it(api, label):
    _jobs(api)
    answer = api.client.post(PAUSE, json={"label": label, "reason": "INC-9 warehouse down"})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert answer.get_json() == {"ids": ["a", "b"], "results": [{"id": "a", "outcome": "paused"},
                                                                {"id": "b", "outcome": "paused"}]}
    assert _states(api) == {"a": ("PAUSED", "INC-9 warehouse down"), "b": ("PAUSED", "INC-9 warehouse down"),
                            "c": ("SCHEDULED", ""), "from-config": ("SCHEDULED", "")}
    api.until(150)
    assert {r.job_id for r in api.target.requests} == {"c", "from-config"}
    resumed = api.client.post(RESUME, json={"label": label}).get_json()
    assert resumed["ids"] == ["a", "b"]
    assert {job: state for job, (state, _) in _states(api).items()} == dict.fromkeys("abc", "SCHEDULED") | {
        "from-config": "SCHEDULED"}


def test_no_label_acts_on_every_job_and_leaves_those_already_so_unchanged(api):
    _jobs(api)
    api.post("c", ":pause", {"reason": "its own incident"})
    answer = api.client.post(PAUSE, json={"reason": "freeze"}).get_json()
    assert answer["ids"] == ["a", "b", "from-config"]
    assert {"id": "c", "outcome": "unchanged"} in answer["results"]
    assert _states(api)["c"] == ("PAUSED", "its own incident")  # its own reason stays
    again = api.client.post(PAUSE, json={"reason": "freeze"}).get_json()  # a retry changes nothing
    assert again["ids"] == [] and {r["outcome"] for r in again["results"]} == {"unchanged"}
    assert api.client.post(RESUME).get_json()["ids"] == ["a", "b", "c", "from-config"]


def test_a_job_that_refuses_is_reported_and_the_others_go_on(api):
    _jobs(api)
    api.put("d", noop_job(schedule="every 1m", disabled=True, labels={"team": "data"}))
    answer = api.client.post(PAUSE, json={"label": "team=data"}).get_json()
    assert answer["ids"] == ["a", "b"]
    [refused] = [r for r in answer["results"] if r["id"] == "d"]
    assert refused["outcome"] == "failed" and refused["error"]["code"] == "FAILED_PRECONDITION"
    assert "disabled" in refused["error"]["message"]


@pytest.mark.parametrize("body, says", [
    ({"label": "Team=data"}, "label 'Team=data'"),
    ({"label": 7}, "label: expected a string"),
    ({"label": ["team", 7]}, "label: expected a string"),
    ({"reason": "x" * 10_000}, "reason:"),
    ({"labels": {"team": "data"}}, "unknown field 'labels'"),
])
def test_a_bad_body_is_400_and_changes_nothing(api, body, says):
    _jobs(api)
    answer = api.client.post(PAUSE, json=body)
    assert error_of(answer) == (400, "INVALID_ARGUMENT")
    assert says in answer.get_json()["error"]["message"]
    assert {state for state, _ in _states(api).values()} == {"SCHEDULED"}


def test_an_unknown_project_is_404(api):
    assert error_of(api.client.post("/api/v1/projects/nope/jobs:pause")) == (404, "NOT_FOUND")


def test_each_job_is_audited_as_if_paused_on_its_own_with_its_caller(tmp_path, monkeypatch):
    secured = Secured(tmp_path, monkeypatch)
    owner = CALLERS["owner"]
    for job, team in (("a", "data"), ("b", "data"), ("c", "web")):
        assert secured.client.put(f"/api/v1/projects/demo/jobs/{job}", headers=owner,
                                  json=noop_job(schedule="every 1m", labels={"team": team})).status_code == 201
    secured.clock.current += timedelta(seconds=1)
    paused = secured.client.post(PAUSE, json={"label": "team=data", "reason": "INC-9"}, headers=TRIGGERER)
    assert paused.get_json()["ids"] == ["a", "b"]
    secured.clock.current += timedelta(seconds=1)
    assert secured.client.post(RESUME, json={"label": "team=data", "reason": "INC-9 over"},
                               headers=TRIGGERER).get_json()["ids"] == ["a", "b"]
    entries = secured.client.get(AUDIT, headers=owner).get_json()["entries"]
    done = [(e["action"], e["job"], e["actor"], e["detail"].get("reason")) for e in entries
            if e["action"] in ("pause", "resume")]
    who = "user:trigger@example.com"
    assert sorted(done) == sorted([("pause", "a", who, "INC-9"), ("pause", "b", who, "INC-9"),
                                   ("resume", "a", who, "INC-9 over"), ("resume", "b", who, "INC-9 over")])
    job = secured.client.get("/api/v1/projects/demo/jobs/a", headers=owner).get_json()
    assert job["paused"] is False


def test_the_openapi_document_lists_the_bulk_actions(api):
    document = api.get("/api/v1/openapi.json").get_json()
    for path in ("/projects/{project}/jobs:pause", "/projects/{project}/jobs:resume"):
        operation = document["paths"][path]["post"]
        assert operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/BulkRequest")
        assert operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/BulkResult")
    assert set(document["components"]["schemas"]["BulkResult"]["properties"]) == {"ids", "results"}
