"""description, labels, jitter, start and end through PUT, the Job view and the jobs
list's label filter."""

from __future__ import annotations


def _entry(**more):
    return {"schedule": "every 1m", "target": {"noop": {}}, **more}


def test_put_shows_the_new_fields_only_when_set(api):
    created = api.put("extras", _entry(description="Nightly", labels={"team": "data"}, jitter="30s",
                                       start="2026-01-01T01:00:00+01:00", end="2126-01-01T00:00:00Z"))
    assert created.status_code == 201, created.get_json()
    job = api.job("extras")
    assert (job["description"], job["labels"], job["jitter"]) == ("Nightly", {"team": "data"}, "30s")
    assert (job["start"], job["end"]) == ("2026-01-01T00:00:00Z", "2126-01-01T00:00:00Z")
    api.put("bare", _entry())
    assert not {"description", "labels", "jitter", "start", "end"} & set(api.job("bare"))


def test_put_refuses_bad_fields_naming_them(api):
    answer = api.put("bad", _entry(labels={"Team": "x"}, jitter="2h"))
    assert answer.status_code == 400
    message = answer.get_json()["error"]["message"]
    assert "labels.Team: label key 'Team'" in message and "jitter: must be at most 1h" in message


def test_the_jobs_list_filters_by_label(api):
    api.put("a", _entry(labels={"team": "data", "tier": "1"}))
    api.put("b", _entry(labels={"team": "ops"}))
    base = "/api/v1/projects/demo/jobs"

    def ids(query):
        return [job["id"] for job in api.get(base + query).get_json()["jobs"]]

    assert ids("?label=team:data") == ["a"]
    assert ids("?label=team") == ["a", "b"]
    assert ids("?label=team:data&label=tier:2") == []
    assert api.get(base + "?label=Bad:x").status_code == 400
