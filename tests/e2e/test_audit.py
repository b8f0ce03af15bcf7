"""The audit log end to end: a real server with API tokens, on the embedded backend and
on Datastore with Cloud Tasks (their emulators), a real receiver; operator actions over
HTTP show in GET .../audit with who took them, in paused_by, and on the job page."""

from __future__ import annotations

import urllib.request

import pytest

from tests.e2e.support import Receiver, Server, free_port, wait_until
from tests.support.emulators import cloud_server_env

CONFIG = """\
allowed_hosts: ["127.0.0.1"]  # the cloud backend refuses loopback targets unless allowed
acl:
  triggerers: [user:alice@example.com]
  owners: [serviceAccount:deployer@p.iam.gserviceaccount.com]
jobs: []
"""
TOKENS = "a-token=user:alice@example.com,b-token=serviceAccount:deployer@p.iam.gserviceaccount.com"
ALICE, DEPLOYER = {"Authorization": "Bearer a-token"}, {"Authorization": "Bearer b-token"}
JOB = "/api/v1/projects/ops/jobs/nightly"


@pytest.fixture(params=["sqlite", "datastore"])
def server(request, tmp_path):
    receiver = Receiver()
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "ops.yaml").write_text(CONFIG)
    port = free_port()
    env = {"SUNDIAL_API_TOKENS": TOKENS}
    if request.param == "datastore":
        env |= cloud_server_env(request.getfixturevalue("datastore_emulator"),
                                request.getfixturevalue("tasks_emulator"), "sundial-audit", port)
    started = Server(configs, tmp_path / "sundial.db", tmp_path / "server.log", env, port=port).start()
    yield started, receiver
    started.stop()
    receiver.close()


def _call(server: Server, method: str, path: str, headers: dict, body=None) -> dict | None:
    status, answer = server.call(method, path, body, headers)
    assert status < 300, (status, answer)
    return answer


def test_actions_show_in_the_audit_log_with_who_took_them(server):
    server, receiver = server
    target = {"http": {"url": f"{receiver.url}/nightly"}}
    _call(server, "PUT", JOB, DEPLOYER, {"schedule": "triggered", "target": target})
    invocation = _call(server, "POST", JOB + ":trigger", ALICE)["id"]
    assert wait_until(lambda: receiver.at_path("/nightly"), timeout=15)
    _call(server, "POST", JOB + ":pause", ALICE, {"reason": "INC-1234"})
    assert _call(server, "GET", JOB, DEPLOYER)["paused_by"] == "user:alice@example.com"
    entries = _call(server, "GET", "/api/v1/projects/ops/audit", DEPLOYER)["entries"]
    assert {(e["actor"], e["action"], e["job"], str({k: v for k, v in e["detail"].items() if k != "after"}))
            for e in entries} == {
        ("serviceAccount:deployer@p.iam.gserviceaccount.com", "put", "nightly", "{'created': True}"),
        ("user:alice@example.com", "trigger", "nightly", f"{{'invocation': '{invocation}'}}"),
        ("user:alice@example.com", "pause", "nightly", "{'reason': 'INC-1234'}"),
    }
    assert [e["time"] for e in entries] == sorted((e["time"] for e in entries), reverse=True)
    request = urllib.request.Request(server.url + "/p/ops/nightly", headers=ALICE)
    with urllib.request.urlopen(request, timeout=10) as response:
        page = response.read().decode()
    assert "Paused</strong> by <span" in page and "alice@example.com</span>" in page
    assert page.count("alice@example.com</td>") == 2 and 'id="audit"' in page
    log = server.log_path.read_text()
    assert "audit: user:alice@example.com paused ops/nightly: INC-1234" in log
