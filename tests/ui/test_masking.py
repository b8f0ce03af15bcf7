"""Credential headers written into a definition are masked wherever the definition is
shown (docs/REFERENCE.md section 6): the API's Job, and the UI's job page with its definition YAML, for
the target and the on_failure hook alike. A secret reference shows only its name."""

from __future__ import annotations

import json

LITERAL = "Bearer literal-config-credential-XYZ"
BODY = {"schedule": "triggered", "target": {"http": {
    "url": "http://127.0.0.1:9/run", "headers": {
        "Authorization": LITERAL, "Cookie": "session=abc", "X-Api-Key": "key-123",
        "X-Vendor": {"secret": "vendor-key"}, "X-Trace": "trace-visible"}}},
    "on_failure": {"http": {"url": "http://127.0.0.1:9/hook", "headers": {
                                                                         "Authorization": "Basic hook-cred"}}}}
SECRETS = ("literal-config-credential-XYZ", "session=abc", "key-123", "hook-cred")


def test_the_api_masks_credential_headers(ui):
    assert ui.put("creds", BODY).status_code == 201
    shown = json.dumps([ui.job("creds"), ui.get("/api/v1/projects/demo/jobs").get_json()])
    assert not [secret for secret in SECRETS if secret in shown]
    headers = ui.job("creds")["target"]["http"]["headers"]
    assert headers["X-Trace"] == "trace-visible" and headers["X-Vendor"] == {"secret": "vendor-key"}
    assert headers["Authorization"] == "<redacted>"


def test_the_job_page_masks_credential_headers(ui):
    ui.put("creds", BODY)
    page = ui.page("/p/demo/creds")
    assert not [secret for secret in SECRETS if secret in page]
    assert "trace-visible" in page and "vendor-key" in page


def test_masking_is_on_output_only(ui):
    body = json.loads(json.dumps(BODY))
    del body["target"]["http"]["headers"]["X-Vendor"]  # no secret store in this harness
    ui.put("creds", body)
    assert ui.put("creds", body).status_code == 200  # the same body again changes nothing
    ui.post("creds", ":trigger")
    ui.until(1)
    sent = next(d.target["http"]["headers"] for d in ui.delivered("creds")
                if d.target["http"]["url"].endswith("/run"))
    assert sent["Authorization"] == LITERAL and sent["Cookie"] == "session=abc"
