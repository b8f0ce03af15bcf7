"""On Cloud Tasks, the task's own retry settles an attempt whose process died (docs/REFERENCE.md section 4):
gcloud-tasks-emulator runs the start task again after the killed server gave no answer,
with a retry count of 1, and the new server settles the attempt at once (interrupted)
and sends it again under the same invocation id, as attempt 2, instead of
leaving it "in flight" until its lease runs out (two minutes with the defaults) for the
watchdog to find.
"""

import time

import pytest

from tests.e2e.support import Receiver, Server, free_port, wait_until
from tests.support.cloud_stores import ON_BOTH_IN_LONG_RUNS
from tests.support.emulators import cloud_server_env

CONFIG = """
allowed_hosts: ["127.0.0.1"]
jobs:
  - id: slow
    schedule: triggered
    retry: {{max_attempts: 2, min_backoff: 1s}}
    target: {{http: {{url: {url}/slow}}}}
"""
LEASE = 120  # seconds: attempt_timeout (60 s) + start grace (60 s), the defaults


@pytest.mark.parametrize("cloud_database", ON_BOTH_IN_LONG_RUNS, indirect=True)
def test_a_start_task_run_again_after_its_server_died_retries_the_attempt_at_once(tmp_path, cloud_database,
                                                                                   tasks_emulator):
    receiver = Receiver(delays={"/slow": 4})
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "cloud.yaml").write_text(CONFIG.format(url=receiver.url))
    port = free_port()
    env = cloud_server_env(cloud_database, tasks_emulator, "redelivery", port)

    def start() -> Server:
        return Server(configs, tmp_path / "unused.db", tmp_path / "server.log", env, port=port).start()

    server = start()
    try:
        status, _ = server.call("POST", "/api/v1/projects/cloud/jobs/slow:trigger")
        assert status == 200
        assert wait_until(lambda: len(receiver.at_path("/slow")) == 1, timeout=20)
        server.kill()  # the attempt is in flight: the target is still working on it
        server = start()
        restarted = time.time()
        assert wait_until(lambda: len(receiver.at_path("/slow")) == 2, timeout=30), "not delivered again"
        first, again = receiver.at_path("/slow")
        assert again.at - restarted < 20 < LEASE
        assert again.headers["X-Sundial-Invocation"] == first.headers["X-Sundial-Invocation"]
        assert (first.headers["X-Sundial-Attempt"], again.headers["X-Sundial-Attempt"]) == ("1", "2")
        invocation = first.headers["X-Sundial-Invocation"]
        row = wait_until(lambda: _finished(server, invocation), timeout=15)
        assert row["status"] == "SUCCEEDED"
        assert any(entry["message"].startswith("attempt 1 interrupted; sent again as attempt 2")
                   for entry in row["log"])
    finally:
        server.stop()
        receiver.close()


def _finished(server: Server, invocation: str) -> dict | None:
    row = server.get(f"/api/v1/projects/cloud/jobs/slow/invocations/{invocation}")
    return row if row["status"] not in ("STARTING", "RUNNING") else None
