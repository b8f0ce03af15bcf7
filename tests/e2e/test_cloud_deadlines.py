"""The cloud backend keeps an async invocation's deadline without the watchdog: a real
server on the Datastore emulator, its own watchdog loop off (on App Engine the watchdog
is the minute cron), and gcloud-tasks-emulator posting the deadline task to it."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from tests.e2e.support import Receiver, Server, free_port, wait_until
from tests.support.cloud_stores import ON_BOTH_IN_LONG_RUNS
from tests.support.emulators import cloud_server_env

CONFIG = """
allowed_hosts: ["127.0.0.1"]
jobs:
  - id: async
    schedule: triggered
    timeout: 2s
    target: {{http: {{url: {url}/accepts, async: true}}}}
"""


@pytest.mark.parametrize("cloud_database", ON_BOTH_IN_LONG_RUNS, indirect=True)
def test_an_async_invocation_fails_timeout_at_its_deadline_with_no_watchdog(tmp_path, cloud_database,
                                                                             tasks_emulator):
    receiver = Receiver(statuses={"/accepts": 202})
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "deadlines.yaml").write_text(CONFIG.format(url=receiver.url))
    port = free_port()
    env = {**cloud_server_env(cloud_database, tasks_emulator, "deadlines", port), "SUNDIAL_WATCHDOG_PERIOD": "1h"}
    server = Server(configs, tmp_path / "unused.db", tmp_path / "serve.log", env, port=port).start()
    try:
        _trigger_and_wait(server)  # warm: the first request of a fresh server and emulator takes seconds
        took, row = _trigger_and_wait(server)
        assert (row["status"], row["reason"]) == ("FAILED", "timeout")
        assert 2 <= took <= 4, took
        assert len(receiver.at_path("/accepts")) == 2
    finally:
        server.stop()
        receiver.close()


def _trigger_and_wait(server: Server) -> tuple[float, dict]:
    """Trigger the job; (seconds from the trigger to its invocation's end, the invocation)."""
    began = time.time()
    status, invocation = server.call("POST", "/api/v1/projects/deadlines/jobs/async:trigger", {})
    assert status == 200, invocation
    path = f"/api/v1/projects/deadlines/jobs/async/invocations/{invocation['id']}"

    def ended():
        row = server.get(path)
        return row if row["status"] not in ("STARTING", "RUNNING") else None

    row = wait_until(ended, timeout=30, interval=0.1)
    assert row, server.get(path)
    return datetime.fromisoformat(row["finished_time"].replace("Z", "+00:00")).timestamp() - began, row
