"""Every (caller, UI action) pair against the project ACL with real identities (API tokens,
signed in through the UI's sign-in form, as a browser does): readers see no buttons and
the server refuses the POSTs anyway; nothing refused changes anything."""

from __future__ import annotations

import pytest

from tests.ui.conftest import HIDDEN_TOKEN
from tests.web.test_access import Secured

CALLERS = {"nobody signed in": None, "outsider": "x-token", "reader": "r-token",
           "triggerer": "t-token", "owner": "o-token"}
LEVEL = {"outsider": 0, "reader": 1, "triggerer": 2, "owner": 3}
JOB = "/p/demo/from-config"
PAGES = {"projects": "/", "jobs": "/p/demo", "job": JOB}
BUTTONS = {"trigger": 2, "pause": 2, "resume": 2, "abort": 3, "backfill": 2}


class SecuredUi(Secured):
    def browser(self, token: str | None):
        """A client that signed in with `token` through the form, as a person would."""
        client = self.app.test_client()
        if token is not None:
            csrf = HIDDEN_TOKEN.search(client.get("/signin").data.decode()).group(1)
            answer = client.post("/signin", data={"csrf_token": csrf, "token": token})
            assert answer.status_code == 303 and answer.location.endswith("/")
        return client

    def state(self) -> tuple:
        owner = {"Authorization": "Bearer o-token"}
        view = self.client.get("/api/v1/projects/demo/jobs/from-config", headers=owner).get_json()
        history = self.client.get("/api/v1/projects/demo/jobs/from-config/invocations",
                                  headers=owner).get_json()["invocations"]
        return view["state"], view.get("pause_reason"), len(history)


@pytest.fixture
def secured(tmp_path, monkeypatch) -> SecuredUi:
    return SecuredUi(tmp_path, monkeypatch)


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("who", CALLERS)
def test_pages_by_caller(secured, who, page):
    response = secured.browser(CALLERS[who]).get(PAGES[page])
    body = response.data.decode()
    if who not in LEVEL:
        assert response.status_code == 401 and "Sign in" in body
    elif LEVEL[who] == 0:
        assert response.status_code == (200 if page == "projects" else 404)
        assert "demo" not in body or page != "projects"
    else:
        assert response.status_code == 200
    if page == "job" and who in LEVEL and LEVEL[who] >= 1:
        shown = {button for button in BUTTONS if f'id="{button}"' in body}
        expected = {b for b, needs in BUTTONS.items() if LEVEL[who] >= needs}
        # Resume shows on a paused job only, Abort while something runs: neither here.
        assert shown == expected - {"resume", "abort"}


@pytest.mark.parametrize("action", BUTTONS)
@pytest.mark.parametrize("who", CALLERS)
def test_buttons_by_caller(secured, who, action):
    browser = secured.browser(CALLERS[who])
    csrf = HIDDEN_TOKEN.search(browser.get("/signin").data.decode()).group(1)
    before = secured.state()
    response = browser.post(f"{JOB}:{action}", data={"csrf_token": csrf, "reason": "r"})
    if who not in LEVEL:
        expected = 401
    elif LEVEL[who] == 0:
        expected = 404
    elif LEVEL[who] < BUTTONS[action]:
        expected = 403
    else:
        expected = 303
    assert response.status_code == expected, response.data.decode()[:300]
    if expected != 303:
        assert secured.state() == before


@pytest.mark.parametrize("who", ["reader", "triggerer"])
def test_only_a_caller_who_may_trigger_sees_and_presses_re_run(secured, who):
    owner = {"Authorization": "Bearer o-token"}
    invocation = secured.client.post("/api/v1/projects/demo/jobs/from-config:trigger", headers=owner).get_json()["id"]
    page = f"{JOB}/{invocation}"
    browser = secured.browser(CALLERS[who])
    body = browser.get(page).data.decode()
    assert ('id="rerun"' in body) is (who == "triggerer")
    csrf = HIDDEN_TOKEN.search(body).group(1)
    before = secured.state()
    response = browser.post(f"{page}:rerun", data={"csrf_token": csrf})
    if who == "reader":
        assert response.status_code == 403 and secured.state() == before
        return
    assert response.status_code == 303 and f"{JOB}/" in response.location and invocation not in response.location
    assert browser.post(f"{page}:rerun", data={}).status_code == 403  # no CSRF token: refused


def test_a_wrong_token_does_not_sign_in_and_signing_out_forgets_the_token(secured):
    client = secured.app.test_client()
    csrf = HIDDEN_TOKEN.search(client.get("/signin").data.decode()).group(1)
    refused = client.post("/signin", data={"csrf_token": csrf, "token": "guess"}, follow_redirects=True)
    assert "not known" in refused.data.decode()
    assert client.get("/p/demo").status_code == 401
    signed_in = secured.browser("o-token")
    page = signed_in.get("/p/demo")
    assert page.status_code == 200 and "Sign out" in page.data.decode()
    signed_in.post("/signout")  # without the form's token: a forged sign-out does nothing
    assert signed_in.get("/p/demo").status_code == 200
    csrf = HIDDEN_TOKEN.search(page.data.decode()).group(1)
    signed_in.post("/signout", data={"csrf_token": csrf})
    assert signed_in.get("/p/demo").status_code == 401


@pytest.mark.parametrize("forged", [
    {"Authorization": "Bearer eyJhbGciOiJub25lIn0.eyJlbWFpbCI6ImFAYi5jIn0.sig"},
    {"X-Goog-IAP-JWT-Assertion": "eyJhbGciOiJub25lIn0.eyJlbWFpbCI6ImFAYi5jIn0."},
    {"Authorization": "Bearer o-token-but-not-quite"},
])
def test_forged_identity_headers_on_ui_pages_and_buttons_are_refused(secured, forged):
    browser = secured.app.test_client()
    csrf = HIDDEN_TOKEN.search(browser.get("/signin").data.decode()).group(1)
    before = secured.state()
    assert browser.get(JOB, headers=forged).status_code == 401
    assert browser.post(f"{JOB}:pause", data={"csrf_token": csrf}, headers=forged).status_code == 401
    assert secured.state() == before


@pytest.mark.parametrize("host, secure", [("127.0.0.1", False), ("::1", False), ("localhost", False),
                                          ("0.0.0.0", True), ("10.1.2.3", True), ("sundial.example", True)])
def test_the_session_cookie_is_secure_off_loopback(tmp_path, host, secure):
    from config.settings import Settings
    from web.app import _cookie_needs_https

    assert _cookie_needs_https(Settings(host=host)) is secure
    assert _cookie_needs_https(Settings(host=host, on_app_engine=True)) is True
