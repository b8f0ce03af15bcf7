"""Credentials written into a definition are masked wherever the definition is shown
(docs/REFERENCE.md section 6.4): the API's Job and jobs list, and the UI's job page with
its definition YAML, for the target and its hooks alike, to readers and owners. Every
literal header value but a harmless few's is masked, and a URL's credential-like query
values and password; a secret reference shows only its name. An owner's PUT of what a
GET showed keeps the stored values for the masks, and sends what it sent before."""

from __future__ import annotations

import json

from engine.secrets import REDACTED

LITERAL = "Bearer literal-config-credential-XYZ"
TARGET_URL = "http://127.0.0.1:9/run?api_key=URL-QUERY-KEY&day=1"
HOOK_URL = "http://hook-user:HOOK-PASSWORD@127.0.0.1:9/hook?access_token=HOOK-QUERY-TOKEN"
HEADERS = {"Authorization": LITERAL, "Cookie": "session=abc", "X-Api-Key": "key-123",
           "X-Auth-Token": "LITERAL-XAUTH", "X-Goog-Api-Key": "LITERAL-GOOG", "Private-Token": "LITERAL-GITLAB",
           "X-My-Secret": "LITERAL-CUSTOM", "Content-Type": "application/x-visible"}
BODY = {"schedule": "triggered",
        "target": {"http": {"url": TARGET_URL, "headers": {**HEADERS, "X-Vendor": {"secret": "vendor-key"}}}},
        "on_failure": {"http": {"url": HOOK_URL, "headers": {"Authorization": "Basic hook-cred"}}}}
SECRETS = ("literal-config-credential-XYZ", "session=abc", "key-123", "LITERAL-XAUTH", "LITERAL-GOOG",
           "LITERAL-GITLAB", "LITERAL-CUSTOM", "URL-QUERY-KEY", "HOOK-PASSWORD", "HOOK-QUERY-TOKEN", "hook-cred")


def _without_secret_store(body: dict) -> dict:
    body = json.loads(json.dumps(body))
    del body["target"]["http"]["headers"]["X-Vendor"]  # no secret store in this harness
    return body


def test_the_api_masks_credentials_for_a_reader(ui, role):
    assert ui.put("creds", BODY).status_code == 201
    role("reader")
    shown = json.dumps([ui.job("creds"), ui.get("/api/v1/projects/demo/jobs").get_json()])
    assert [secret for secret in SECRETS if secret in shown] == []
    target = ui.job("creds")["target"]["http"]
    assert target["headers"] == {**dict.fromkeys(HEADERS, REDACTED), "Content-Type": "application/x-visible",
                                 "X-Vendor": {"secret": "vendor-key"}}
    assert target["url"] == f"http://127.0.0.1:9/run?api_key={REDACTED}&day=1"


def test_the_job_page_masks_credentials_for_a_reader(ui, role):
    ui.put("creds", BODY)
    role("reader")
    page = ui.page("/p/demo/creds")
    assert [secret for secret in SECRETS if secret in page] == []
    assert "application/x-visible" in page and "vendor-key" in page and "day=1" in page
    assert f"http://hook-user:{REDACTED}@127.0.0.1:9/hook?access_token={REDACTED}".replace(
        "<", "&lt;").replace(">", "&gt;") in page  # the hook, in the definition's YAML


def test_an_owners_put_of_what_a_get_showed_sends_what_it_sent_before(ui):
    body = _without_secret_store(BODY)
    assert ui.put("creds", body).status_code == 201
    shown = ui.job("creds")
    assert shown["target"]["http"]["headers"]["X-Auth-Token"] == REDACTED  # owners are shown masks too
    again = {key: shown[key] for key in ("schedule", "target", "timeout", "retry")}
    assert ui.put("creds", again).status_code == 200, ui.put("creds", again).get_json()
    assert ui.job("creds") == {**shown, "last_invocation": ui.job("creds")["last_invocation"]}
    ui.post("creds", ":trigger")
    ui.until(1)
    sent = next(d.target["http"] for d in ui.delivered("creds") if "/run" in d.target["http"]["url"])
    assert sent["headers"] == body["target"]["http"]["headers"] and sent["url"] == TARGET_URL


def test_a_mask_that_stands_for_nothing_it_may_keep_is_refused(ui):
    ui.put("creds", _without_secret_store(BODY))
    moved = {"schedule": "triggered", "target": {"http": {"url": "http://127.0.0.2:9/run",
                                                          "headers": {"X-Auth-Token": REDACTED}}}}
    answer = ui.put("creds", moved)
    assert answer.status_code == 400 and "scheme, host and port stay the same" in answer.get_json()["error"]["message"]
    assert ui.put("fresh", {**moved, "target": {"http": {**moved["target"]["http"], "url": TARGET_URL}}}
                  ).status_code == 400
    ui.post("creds", ":trigger")
    ui.until(1)
    sent = next(d.target["http"] for d in ui.delivered("creds") if "/run" in d.target["http"]["url"])
    assert sent["headers"]["X-Auth-Token"] == "LITERAL-XAUTH"  # the refused PUT changed nothing


def test_masking_is_on_output_only(ui):
    body = _without_secret_store(BODY)
    ui.put("creds", body)
    assert ui.put("creds", body).status_code == 200  # the same body again changes nothing
    ui.post("creds", ":trigger")
    ui.until(1)
    sent = next(d.target["http"]["headers"] for d in ui.delivered("creds")
                if "/run" in d.target["http"]["url"])
    assert sent["Authorization"] == LITERAL and sent["Cookie"] == "session=abc"
