"""The job page's Audit section and its paused banner, after actions pressed in the UI by
people signed in with their own tokens (as a browser does)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from tests.ui.conftest import HIDDEN_TOKEN
from tests.ui.test_access_table import SecuredUi
from tests.ui.test_pages import text

JOB = "/p/demo/from-config"


@pytest.fixture
def secured(tmp_path, monkeypatch) -> SecuredUi:
    return SecuredUi(tmp_path, monkeypatch)


def _press(secured: SecuredUi, client, action: str, **form) -> None:
    secured.clock.current += timedelta(hours=1)  # entries an hour apart, in order
    csrf = HIDDEN_TOKEN.search(client.get(JOB).data.decode()).group(1)
    assert client.post(f"{JOB}:{action}", data={"csrf_token": csrf, **form}).status_code == 303


def _audit_rows(page: str) -> list[str]:
    section = page.split('id="audit"')[1]
    return [text(row) for row in re.findall(r"<tr>.*?</tr>", section.split("<tbody>")[1], re.S)]


def test_the_banner_says_who_paused_and_the_section_lists_who_did_what(secured):
    triggerer, reader = secured.browser("t-token"), secured.browser("r-token")
    assert "No operator actions recorded" in reader.get(JOB).data.decode()
    _press(secured, triggerer, "pause", reason="INC-1234")
    secured.clock.current += timedelta(hours=2)
    page = reader.get(JOB).data.decode()  # a reader sees it too
    banner = text(re.search(r'<p class="panel warning" id="paused-banner">.*?</p>', page, re.S).group(0))
    assert banner.startswith("Paused by trigger@example.com 2h ago: INC-1234 .")
    _press(secured, triggerer, "resume")
    _press(secured, triggerer, "trigger")
    page = reader.get(JOB).data.decode()
    assert 'id="paused-banner"' not in page
    invocation = secured.client.get("/api/v1/projects/demo/jobs/from-config/invocations",
                                    headers={"Authorization": "Bearer o-token"}).get_json()["invocations"][0]["id"]
    assert _audit_rows(page) == [
        f"2026-01-05 15:00:00 UTC now trigger@example.com trigger invocation {invocation}",
        "2026-01-05 14:00:00 UTC 1h ago trigger@example.com resume",
        "2026-01-05 11:00:00 UTC 4h ago trigger@example.com pause INC-1234",
    ]
