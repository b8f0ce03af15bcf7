"""Page tokens on every paged endpoint: the one a page gives resumes its list, and one
the list never issued is a 400 instead of a 200 with an empty (or wrong) page."""

from __future__ import annotations

import pytest

from tests.web.conftest import error_of, noop_job

LISTS = {
    "jobs": "/api/v1/projects/demo/jobs",
    "invocations": "/api/v1/projects/demo/jobs/j/invocations",
    "audit": "/api/v1/projects/demo/audit",
    "audit of a job": "/api/v1/projects/demo/audit?job=j",
}


@pytest.fixture
def listed(api):
    for name in ("j", "k", "l"):
        api.put(name, noop_job(schedule="triggered"))
    for _ in range(3):
        assert api.post("j", ":trigger").status_code == 200
    return api


def _page(api, path: str, token: str | None = None):
    joiner = "&" if "?" in path else "?"
    query = f"{joiner}page_size=2" + (f"&page_token={token}" if token is not None else "")
    return api.get(path + query)


@pytest.mark.parametrize("name", LISTS)
def test_a_token_resumes_its_own_list(listed, name):
    first = _page(listed, LISTS[name]).get_json()
    token = first["next_page_token"]
    assert token
    second = _page(listed, LISTS[name], token)
    assert second.status_code == 200
    key = {"jobs": "jobs", "invocations": "invocations"}.get(name, "entries")
    assert second.get_json()[key] and second.get_json()[key] != first[key]


@pytest.mark.parametrize("name", LISTS)
def test_a_token_the_list_never_issued_is_a_400(listed, name):
    """Finding N9: `?page_token=zzz` answered 200 with an empty page."""
    issued = _page(listed, LISTS[name]).get_json()["next_page_token"]
    others = [_page(listed, path).get_json()["next_page_token"] for other, path in LISTS.items() if other != name]
    for token in ["zzz", "zz%00", issued[:-1], issued + "0", issued.replace(".", "x"), *others]:
        answer = _page(listed, LISTS[name], token)
        assert error_of(answer) == (400, "INVALID_ARGUMENT"), token
        assert "page_token" in answer.get_json()["error"]["message"]


def test_an_empty_token_is_the_first_page(listed):
    assert _page(listed, LISTS["jobs"], "").get_json() == _page(listed, LISTS["jobs"]).get_json()
