"""The UI's buttons: POST forms with a CSRF token, the API's use cases behind them, and
the access hook asked twice — once to show a button, once when it is pressed."""

from __future__ import annotations

import re

from tests.ui.test_pages import text


def test_pause_with_a_reason_shows_it_and_resume_clears_it(ui):
    response = ui.press("from-config", "pause", reason="vendor outage")
    assert response.status_code == 303 and response.location.endswith("/p/demo/from-config")
    page = text(ui.page("/p/demo/from-config"))
    assert "Paused: vendor outage" in page and "PAUSED" in page and "Resume" in page
    assert ui.job("from-config")["pause_reason"] == "vendor outage"
    assert "PAUSED vendor outage" in text(ui.page("/p/demo"))
    ui.press("from-config", "resume")
    assert ui.job("from-config")["paused"] is False and "Pause" in ui.page("/p/demo/from-config")


def test_trigger_makes_an_invocation_that_shows_at_the_top_of_the_history(ui):
    response = ui.press("from-config", "trigger")
    assert response.status_code == 303
    invocation = ui.history("from-config")[-1]
    assert invocation["trigger"] == "manual"
    page = ui.page("/p/demo/from-config")
    assert f"Triggered: invocation {invocation['id']}" in page
    first_row = re.search(r"<tbody>.*?</tr>", page.split('id="history"')[1], re.S).group(0)
    assert invocation["id"] in first_row and "manual" in first_row


def test_a_paused_job_refuses_a_trigger_with_a_message(ui):
    ui.press("from-config", "pause")
    response = ui.press("from-config", "trigger")
    assert response.status_code == 303
    assert "Not triggered" in ui.page("/p/demo/from-config") and ui.history("from-config") == []


def test_abort_shows_only_while_something_is_active_and_aborts_it(ui):
    assert 'id="abort"' not in ui.page("/p/demo/from-config")
    ui.answer("accepted")  # an async target's 202: the invocation stays RUNNING
    invocation = ui.post("from-config", ":trigger").get_json()["id"]
    ui.until(1)
    assert ui.job("from-config")["active_invocations"] == [invocation]
    assert 'id="abort"' in ui.page("/p/demo/from-config")
    assert ui.press("from-config", "abort", reason="stuck").status_code == 303
    assert ui.job("from-config")["active_invocations"] == []
    assert "ABORTED" in text(ui.page(f"/p/demo/from-config/{invocation}"))


def test_a_post_without_the_sessions_token_is_refused_and_changes_nothing(ui):
    ui.token()  # the session has a token ...
    for token in ("", "forged"):  # ... and the form does not carry it
        response = ui.press("from-config", "pause", token=token, reason="csrf")
        assert response.status_code == 403 and "security token" in response.data.decode()
    fresh = ui.app.test_client()  # a session that never loaded a form has no token at all
    assert fresh.post("/p/demo/from-config:pause", data={"csrf_token": ui.token()}).status_code == 403
    assert ui.job("from-config")["paused"] is False


def test_a_reader_sees_no_buttons_and_the_server_refuses_them_anyway(ui, role):
    token = ui.token()  # a valid token: only the permission is missing
    role("reader")
    page = ui.page("/p/demo/from-config")
    assert "<form" not in page and "Trigger" not in page and "csrf_token" not in page
    for action in ("trigger", "pause", "resume", "abort"):
        response = ui.press("from-config", action, token=token)
        assert response.status_code == 403 and "may not" in response.data.decode()
    assert ui.job("from-config")["paused"] is False and ui.history("from-config") == []


def test_a_triggerer_may_trigger_and_pause_but_not_abort(ui, role):
    role("triggerer")
    ui.target.check = lambda request: None
    page = ui.page("/p/demo/from-config")
    assert 'id="trigger"' in page and 'id="pause"' in page
    assert ui.press("from-config", "abort").status_code == 403
    assert ui.press("from-config", "trigger").status_code == 303


def test_a_project_the_caller_may_not_read_does_not_exist_for_them(ui, role):
    role("nobody")
    assert "demo" not in text(ui.page("/"))
    assert ui.client.get("/p/demo").status_code == 404
    assert ui.client.get("/p/demo/from-config").status_code == 404
