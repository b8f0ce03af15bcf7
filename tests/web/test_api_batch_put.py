"""POST /api/v1/projects/{p}/jobs:batchPut: each job created, replaced or refused on its
own, as its PUT alone would be, with one result per job in the order listed, and one
audit entry per job changed."""

from __future__ import annotations

import pytest

from tests.web.conftest import error_of, http_job, noop_job
from tests.web.test_access import CALLERS, LEVEL, Secured

BATCH = "/api/v1/projects/demo/jobs:batchPut"


def batch(api, *pairs, headers=None):
    return api.client.post(BATCH, json={"jobs": [{"id": job_id, "job": job} for job_id, job in pairs]},
                           headers=headers or {})


def results(response) -> list[tuple]:
    assert response.status_code == 200, response.get_data(as_text=True)
    return [(r["id"], r["status"], r.get("error", {}).get("code")) for r in response.get_json()["results"]]


def test_a_batch_creates_then_replaces_and_leaves_unchanged_jobs_unwritten(api):
    first = batch(api, ("a", noop_job(schedule="every 1m")), ("b", http_job(schedule="every 5m")))
    assert results(first) == [("a", 201, None), ("b", 201, None)]
    assert api.job("a")["source"] == "api" and api.job("b")["schedule"] == "every 5m"
    counters = api.store.inner.counters  # the in-memory store's (engine/adapters/memory)
    writes = counters["writes"]
    again = batch(api, ("b", http_job(schedule="every 5m")), ("a", noop_job(schedule="every 1m")))
    assert results(again) == [("b", 200, None), ("a", 200, None)]  # in the order listed
    assert counters["writes"] == writes  # unchanged jobs: nothing written
    changed = batch(api, ("a", noop_job(schedule="every 2m")))
    assert results(changed) == [("a", 200, None)] and api.job("a")["schedule"] == "every 2m"
    entries = api.get("/api/v1/projects/demo/audit").get_json()["entries"]
    # One entry per job changed (the clock stands still here: entries of one time, any order).
    assert sorted((e["action"], e["job"], e["detail"]["created"]) for e in entries) == [
        ("put", "a", False), ("put", "a", True), ("put", "b", True)]


def test_a_bad_job_among_good_ones_is_refused_alone_with_a_puts_error(api):
    response = batch(api,
                     ("good-1", noop_job(schedule="every 1m")),
                     ("bad-body", noop_job(schedule="every 1m", overlap="sometimes")),
                     ("from-config", noop_job(schedule="every 1m")),
                     ("...", noop_job(schedule="every 1m")),
                     ("bad-trigger", noop_job(schedule="every 1m", triggers=["nowhere"])),
                     ("good-2", noop_job(schedule="triggered")))
    assert results(response) == [("good-1", 201, None), ("bad-body", 400, "INVALID_ARGUMENT"),
                                 ("from-config", 409, "ALREADY_EXISTS"), ("...", 400, "INVALID_ARGUMENT"),
                                 ("bad-trigger", 400, "INVALID_ARGUMENT"), ("good-2", 201, None)]
    refused = response.get_json()["results"][1]["error"]
    alone = api.put("bad-body", noop_job(schedule="every 1m", overlap="sometimes")).get_json()["error"]
    assert refused == alone  # the same error object a PUT of it alone answers
    listed = {job["id"] for job in api.get("/api/v1/projects/demo/jobs").get_json()["jobs"]}
    assert listed == {"from-config", "good-1", "good-2"}
    assert api.job("from-config")["source"] == "config"


def test_jobs_of_one_batch_may_trigger_each_other_but_not_in_a_cycle(api):
    response = batch(api, ("first", noop_job(schedule="every 1m", triggers=["second"])),
                     ("second", noop_job(schedule="triggered")))
    assert results(response) == [("first", 201, None), ("second", 201, None)]
    cycle = batch(api, ("x", noop_job(schedule="triggered", triggers=["y"])),
                  ("y", noop_job(schedule="triggered", triggers=["x"])))
    assert results(cycle) == [("x", 400, "INVALID_ARGUMENT"), ("y", 400, "INVALID_ARGUMENT")]
    assert "trigger cycle" in cycle.get_json()["results"][0]["error"]["message"]


def test_a_thousand_jobs_are_put_and_one_more_refuses_the_whole_request(api):
    jobs = [(f"r-{i}", noop_job(at=["2026-02-01T00:00:00Z"])) for i in range(1000)]
    assert results(batch(api, *jobs)) == [(f"r-{i}", 201, None) for i in range(1000)]
    more = [(f"s-{i}", noop_job(at=["2026-02-01T00:00:00Z"])) for i in range(1001)]
    assert error_of(batch(api, *more)) == (400, "INVALID_ARGUMENT")
    assert api.get("/api/v1/projects/demo/jobs/s-0").status_code == 404


def test_the_projects_job_limit_refuses_the_jobs_past_it(api, monkeypatch):
    monkeypatch.setattr("web.api_jobs.MAX_JOBS_PER_PROJECT", 3)  # from-config is one
    response = batch(api, ("a", noop_job(schedule="triggered")), ("b", noop_job(schedule="triggered")),
                     ("c", noop_job(schedule="triggered")))
    assert results(response) == [("a", 201, None), ("b", 201, None), ("c", 409, "FAILED_PRECONDITION")]
    assert results(batch(api, ("a", noop_job(schedule="every 1m")))) == [("a", 200, None)]  # a replacement fits


@pytest.mark.parametrize("body", [
    [], {"jobs": {"a": {}}}, {"jobs": [{"id": "a"}]}, {"jobs": [{"job": {}}]}, {"jobs": ["a"]},
    {"jobs": [{"id": 1, "job": {}}]}, {"jobs": [{"id": "a", "job": {}, "extra": 1}]}, {"entries": []},
    {"jobs": [{"id": "a", "job": {"target": {"noop": {}}}}, {"id": "a", "job": {"target": {"noop": {}}}}]},
])
def test_a_body_that_is_not_a_batch_is_refused_whole(api, body):
    assert error_of(api.client.post(BATCH, json=body)) == (400, "INVALID_ARGUMENT")
    assert api.get("/api/v1/projects/demo/jobs/a").status_code == 404


def test_an_empty_batch_answers_no_results(api):
    assert api.client.post(BATCH, json={"jobs": []}).get_json() == {"results": []}


def test_a_project_without_a_config_file_is_not_found(api):
    assert error_of(api.client.post("/api/v1/projects/nope/jobs:batchPut", json={"jobs": []})) == (404, "NOT_FOUND")


@pytest.mark.parametrize("who", CALLERS)
def test_only_owners_may_put_a_batch(tmp_path, monkeypatch, who):
    secured = Secured(tmp_path, monkeypatch)
    response = batch(secured, ("j", noop_job(schedule="triggered")), headers=CALLERS[who])
    if who not in LEVEL:
        expected = (401, "UNAUTHENTICATED")
    elif LEVEL[who] == 0:
        expected = (404, "NOT_FOUND")
    elif LEVEL[who] < 3:
        expected = (403, "PERMISSION_DENIED")
    else:
        assert results(response) == [("j", 201, None)]
        entries = secured.client.get("/api/v1/projects/demo/audit", headers=CALLERS[who]).get_json()["entries"]
        assert [(e["actor"], e["job"]) for e in entries] == [("serviceAccount:deployer@p.iam.gserviceaccount.com",
                                                             "j")]
        return
    assert error_of(response) == expected
    owner = CALLERS["owner"]
    assert secured.client.get("/api/v1/projects/demo/jobs/j", headers=owner).status_code == 404


def test_a_batch_reads_the_project_once_and_each_job_once_before_its_transactions(api, monkeypatch):
    reads: list[str] = []
    store = api.engine.queries.store
    for name in ("get_project", "get_job", "count_jobs"):
        real = getattr(store, name)
        monkeypatch.setattr(store, name, lambda *args, _real=real, _name=name: reads.append(_name) or _real(*args))
    assert {r["status"] for r in batch(api, *[(f"j{i}", noop_job(schedule="triggered")) for i in range(3)])
            .get_json()["results"]} == {201}
    assert sorted(reads) == ["count_jobs", "get_job", "get_job", "get_job", "get_project"]


def test_a_job_with_too_many_writers_at_work_is_refused_alone_with_429(api):
    writers = api.engine.writers
    places = [writers.admit("demo", "busy") for _ in range(writers.limit)]
    for place in places:
        place.__enter__()
    try:
        response = batch(api, ("busy", noop_job(schedule="triggered")), ("free", noop_job(schedule="triggered")))
    finally:
        for place in places:
            place.__exit__(None, None, None)
    assert results(response) == [("busy", 429, "RESOURCE_EXHAUSTED"), ("free", 201, None)]
    assert api.get("/api/v1/projects/demo/jobs/busy").status_code == 404
