"""`auth` end to end on the embedded backend: the real server mints tokens through a
stand-in metadata server and a stand-in IAM Credentials API (pointed at by
GCE_METADATA_HOST and SUNDIAL_IAM_CREDENTIALS_URL) and delivers them to a receiver
that verifies each one; the token shows nowhere: not in the stored invocation, the
API, the job's definition, the invocation page or the server's log. The operator grants
the accounts to project e2e only (SUNDIAL_IDENTITIES): project beta's file and its API
jobs naming them are refused, and nothing is minted for beta."""

from __future__ import annotations

import urllib.request

import pytest

from tests.e2e.support import Server, wait_until
from tests.support.google_identity import Google

CONFIG = """
jobs:
  - id: own
    schedule: triggered
    target:
      http:
        url: {url}/own?x=1
        auth: {{oidc: {{service_account: {own}}}}}
  - id: other
    schedule: triggered
    target:
      http:
        url: {url}/access
        auth: {{oauth: {{service_account: {other}}}}}
  - id: stranger
    schedule: triggered
    retry: {{max_attempts: 2, min_backoff: 1s, max_backoff: 1s}}
    target:
      http:
        url: {url}/stranger
        auth: {{oidc: {{service_account: stranger@p.iam.gserviceaccount.com}}}}
"""
BETA = """
jobs:
  - id: steal-own
    schedule: triggered
    target: {{http: {{url: '{url}/steal', auth: {{oauth: {{service_account: {own}}}}}}}}}
  - id: steal-other
    schedule: triggered
    target: {{http: {{url: '{url}/steal', auth: {{oidc: {{service_account: {other}}}}}}}}}
"""
JOBS = "/api/v1/projects/e2e/jobs"
STRANGER = "stranger@p.iam.gserviceaccount.com"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("auth")
    google = Google()
    configs = tmp / "configs"
    configs.mkdir()
    (configs / "e2e.yaml").write_text(CONFIG.format(url=google.receiver.url, own=google.own, other=google.other))
    (configs / "beta.yaml").write_text(BETA.format(url=google.receiver.url, own=google.own, other=google.other))
    env = {"GCE_METADATA_HOST": google.metadata.host, "GCE_METADATA_IP": google.metadata.host,
           "SUNDIAL_IAM_CREDENTIALS_URL": google.iam.url,
           "SUNDIAL_IDENTITIES": f"e2e={google.own},{google.other},{STRANGER}"}
    server = Server(configs, tmp / "sundial.db", tmp / "server.log", env=env).start()
    yield server, google, tmp
    server.stop()
    google.close()


def finished(server: Server, job: str, invocation: str) -> dict | None:
    found = server.get(f"{JOBS}/{job}/invocations/{invocation}")
    return found if found["status"] in ("SUCCEEDED", "FAILED") else None


def test_tokens_are_minted_delivered_and_shown_nowhere(run):
    server, google, tmp = run
    ids = {}
    for job in ("own", "other"):
        status, triggered = server.call("POST", f"{JOBS}/{job}:trigger")
        assert status == 200, triggered
        ids[job] = triggered["id"]
    done = {job: wait_until(lambda job=job: finished(server, job, ids[job]), timeout=15) for job in ids}
    assert {job: row["status"] for job, row in done.items()} == {"own": "SUCCEEDED", "other": "SUCCEEDED"}
    by_path = {check.path.split("?")[0]: check.claims for check in google.receiver.checked}
    assert by_path["/own"]["email"] == google.own and by_path["/own"]["aud"] == google.receiver.url  # its origin
    assert by_path["/access"]["email"] == google.other
    tokens = google.receiver.tokens()
    assert len(tokens) == 2
    definition = server.get(f"{JOBS}/own")
    page = urllib.request.urlopen(f"{server.url}/p/e2e/own/{ids['own']}", timeout=10).read().decode()
    assert "Authorization: •••" in page
    # The database, its -wal, and the heartbeat files in sundial.db-heartbeats/.
    stored = [path.read_bytes().decode("latin-1") for path in tmp.glob("sundial.db*") if path.is_file()]
    stored += [path.read_bytes().decode("latin-1") for path in tmp.glob("sundial.db-heartbeats/*")]
    shown = [str(done), str(definition), page, (tmp / "server.log").read_text(errors="replace"), *stored]
    assert google.own in str(definition)  # the auth config is shown; a token never is
    for token in tokens:
        assert not any(token in text or token.split(".")[2] in text for text in shown)


def test_a_token_that_cannot_be_minted_fails_each_attempt_with_an_auth_reason(run):
    server, google, _ = run
    status, triggered = server.call("POST", f"{JOBS}/stranger:trigger")
    assert status == 200, triggered
    row = wait_until(lambda: finished(server, "stranger", triggered["id"]), timeout=15)
    assert (row["status"], row["attempt"]) == ("FAILED", 2)
    assert row["reason"].startswith("auth: cannot mint OIDC token for stranger@p.iam.gserviceaccount.com: 403 ")
    assert not any(check.path.startswith("/stranger") for check in google.receiver.checked)  # never sent


def test_another_project_can_name_none_of_the_accounts(run):
    server, google, _ = run
    [beta] = [project for project in server.get("/api/v1/projects")["projects"] if project["id"] == "beta"]
    errors = " ".join(beta["job_errors"])
    for account in (google.own, google.other):
        assert f"{account} is not granted to project beta" in errors
        target = {"http": {"url": f"{google.receiver.url}/steal", "auth": {"oauth": {"service_account": account}}}}
        status, answer = server.call("PUT", "/api/v1/projects/beta/jobs/steal", {"schedule": "triggered",
                                                                                  "target": target})
        assert status == 400 and f"{account} is not granted to project beta" in answer["error"]["message"]
    assert server.get("/api/v1/projects/beta/jobs")["jobs"] == []  # nothing to trigger, nothing minted
    assert not any(check.path.startswith("/steal") for check in google.receiver.checked)
