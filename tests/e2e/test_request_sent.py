"""The invocation page's "Request sent" is what the attempt sent, kept in the invocation's
log with its secrets masked before storing: after the job's definition changes, the page
still shows the old URL and body. On the embedded backend and on the Datastore emulator
with the Cloud Tasks emulator, through a real server and a real receiver."""

from __future__ import annotations

import sqlite3

import pytest

from tests.e2e.support import Receiver, Server, free_port, wait_until
from tests.support.emulators import cloud_server_env

SECRET = "hunter2-signing-value"
CONFIG = """
allowed_hosts: ["127.0.0.1"]
jobs:
  - id: report
    schedule: triggered
    target:
      http:
        url: "{url}/{path}?run=${{invocationId}}"
        headers: {{X-Signing: {{secret: SIGN}}, Authorization: "Bearer plain-token-xyz", Accept-Language: visible}}
        body: "{body} ${{invocationId}}"
"""
JOB = "/api/v1/projects/e2e/jobs/report"


def _write(configs, receiver, path: str, body: str) -> None:
    (configs / "e2e.yaml").write_text(CONFIG.format(url=receiver.url, path=path, body=body))


@pytest.fixture
def backend(request, tmp_path):
    """(environment of the server, whether it is the cloud backend) for each backend."""
    if request.param == "local":
        return {}, False
    database, tasks = request.getfixturevalue("datastore"), request.getfixturevalue("tasks_emulator")
    port = free_port()
    return {**cloud_server_env(database, tasks, "sent", port), "SUNDIAL_SECRETS": "local", "_PORT": str(port)}, True


def _html(server: Server, path: str) -> str:
    import urllib.request
    with urllib.request.urlopen(server.url + path, timeout=10) as response:
        return response.read().decode()


@pytest.mark.parametrize("backend", ["local", "cloud"], indirect=True)
def test_the_page_shows_what_was_sent_after_the_definition_changed(tmp_path, backend):
    env, cloud = backend
    port = int(env.pop("_PORT")) if cloud else None
    receiver = Receiver()
    configs, secrets = tmp_path / "configs", tmp_path / "secrets"
    configs.mkdir()
    (secrets / "e2e").mkdir(parents=True)
    (secrets / "e2e" / "SIGN").write_text(SECRET + "\n")
    _write(configs, receiver, "first", "version-one")
    server = Server(configs, tmp_path / "s.db", tmp_path / "server.log",
                    {**env, "SUNDIAL_SECRETS_DIR": str(secrets)}, port=port).start()
    try:
        assert wait_until(lambda: server.call("GET", JOB)[0] == 200, timeout=10)
        status, triggered = server.call("POST", f"{JOB}:trigger")
        assert status == 200, triggered
        invocation = f"{JOB}/invocations/{triggered['id']}"
        assert wait_until(lambda: server.get(invocation)["status"] == "SUCCEEDED", timeout=20)
        arrival = receiver.at_path(f"/first?run={triggered['id']}")[0]
        assert arrival.headers["X-Signing"] == SECRET  # the real value went out ...

        _write(configs, receiver, "second", "version-two")
        assert wait_until(lambda: "/second" in str(server.get(JOB)["target"]), timeout=10)
        page = _html(server, f"/p/e2e/report/{triggered['id']}")
        assert f"POST {receiver.url}/first?run={triggered['id']}" in page
        assert f"version-one {triggered['id']}" in page and "version-two" not in page and "/second" not in page
        assert 'id="sent-recorded"' in page and "Accept-Language: visible" in page
        assert SECRET not in page and "plain-token-xyz" not in page

        stored = str(server.get(invocation)["log"])  # ... and never reached the store
        assert "X-Signing" in stored and SECRET not in stored and "plain-token-xyz" not in stored
        if not cloud:
            with sqlite3.connect(tmp_path / "s.db") as db:
                rows = str(db.execute("SELECT * FROM invocations").fetchall())
            assert "version-one" in rows and SECRET not in rows and "plain-token-xyz" not in rows
    finally:
        server.stop()
        receiver.close()
