"""`auth` end to end on the cloud backend: the real server on the Datastore emulator and
gcloud-tasks-emulator mints a token through the stand-in metadata server (the runtime's
own account) and one through the stand-in IAM Credentials API (another account), the
verifying receiver accepts both, and neither is in Datastore or the API.

Skipped, with the reason, where an emulator is not installed.
"""

from __future__ import annotations

import pytest

from tests.e2e.support import Server, free_port, wait_until
from tests.support.emulators import cloud_server_env
from tests.support.google_identity import Google
from tests.upgrade.restore import datastore_client

CONFIG = """
allowed_hosts: ["127.0.0.1"]
jobs:
  - id: own
    schedule: triggered
    target: {{http: {{url: {url}/own, auth: {{oidc: {{service_account: {own}}}}}}}}}
  - id: other
    schedule: triggered
    target: {{http: {{url: {url}/access, auth: {{oauth: {{service_account: {other}}}}}}}}}
"""
JOBS = "/api/v1/projects/cloud/jobs"


@pytest.mark.parametrize("cloud_database", ["datastore"], indirect=True)
def test_tokens_are_minted_and_delivered_on_the_cloud_backend(tmp_path, cloud_database, tasks_emulator):
    google = Google()
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "cloud.yaml").write_text(CONFIG.format(url=google.receiver.url, own=google.own, other=google.other))
    port = free_port()
    env = {**cloud_server_env(cloud_database, tasks_emulator, "sundial", port),
           "GCE_METADATA_HOST": google.metadata.host, "GCE_METADATA_IP": google.metadata.host,
           "SUNDIAL_IAM_CREDENTIALS_URL": google.iam.url,
           "SUNDIAL_IDENTITIES": f"cloud={google.own},{google.other}"}  # the operator's grant
    server = Server(configs, tmp_path / "unused.db", tmp_path / "server.log", env, port=port).start()
    try:
        ids = {job: server.call("POST", f"{JOBS}/{job}:trigger")[1]["id"] for job in ("own", "other")}
        rows = {job: wait_until(lambda job=job: _finished(server, job, ids[job]), timeout=20) for job in ids}
        shown = str(rows) + str([server.get(f"{JOBS}/{job}") for job in ids])
    finally:
        server.stop()
        google.close()
    assert {job: row["status"] for job, row in rows.items()} == {"own": "SUCCEEDED", "other": "SUCCEEDED"}
    emails = {check.path: check.claims["email"] for check in google.receiver.checked}
    assert emails == {"/own": google.own, "/access": google.other}
    stored = _everything_stored(cloud_database)
    assert google.own in stored  # the job's auth is stored; its tokens never are
    for token in google.receiver.tokens():
        assert token.split(".")[2] not in shown + stored


def _everything_stored(database) -> str:
    """Every entity of every kind in the emulator, as text."""
    client = datastore_client(database, "sundial-test")  # cloud_server_env's project
    kinds = [entity.key.id_or_name for entity in client.query(kind="__kind__").fetch()]
    return " ".join(str(dict(entity)) for kind in kinds for entity in client.query(kind=kind).fetch())


def _finished(server: Server, job: str, invocation: str) -> dict | None:
    found = server.get(f"{JOBS}/{job}/invocations/{invocation}")
    return found if found["status"] in ("SUCCEEDED", "FAILED") else None
