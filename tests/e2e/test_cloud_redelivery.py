"""On Cloud Tasks, a start task run again after its server died (docs/REFERENCE.md section 4):
gcloud-tasks-emulator runs it again after the killed server gave no answer, with a
retry count of 1. The new server cannot tell that from a duplicate delivery of a run
still sending the attempt (a task that was a retry already carries the same count in
both), so it does not settle the attempt at once: it leaves a start task due when the
attempt's lease runs out, which sends the attempt again under the same invocation id,
as the same attempt, since it is still in flight then.
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
    target: {{http: {{url: {url}/slow, timeout: 10s}}}}
"""
LEASE = 15  # seconds: the target's timeout (10 s) + start grace (SUNDIAL_START_GRACE, 5 s)


@pytest.mark.parametrize("cloud_database", ON_BOTH_IN_LONG_RUNS, indirect=True)
def test_a_start_task_run_again_after_its_server_died_sends_the_attempt_again_at_its_lease_end(
        tmp_path, cloud_database, tasks_emulator):
    receiver = Receiver(delays={"/slow": 4})
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "cloud.yaml").write_text(CONFIG.format(url=receiver.url))
    port = free_port()
    env = cloud_server_env(cloud_database, tasks_emulator, "redelivery", port)
    env["SUNDIAL_START_GRACE"] = "5s"

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
        assert wait_until(lambda: len(receiver.at_path("/slow")) == 2, timeout=40), "not delivered again"
        first, again = receiver.at_path("/slow")
        assert LEASE - 1 < again.at - first.at < LEASE + 15, (first.at, again.at, restarted)
        assert again.headers["X-Sundial-Invocation"] == first.headers["X-Sundial-Invocation"]
        assert (first.headers["X-Sundial-Attempt"], again.headers["X-Sundial-Attempt"]) == ("1", "1")
        invocation = first.headers["X-Sundial-Invocation"]
        row = wait_until(lambda: _finished(server, invocation), timeout=15)
        assert row["status"] == "SUCCEEDED"
    finally:
        server.stop()
        receiver.close()


def _finished(server: Server, invocation: str) -> dict | None:
    row = server.get(f"/api/v1/projects/cloud/jobs/slow/invocations/{invocation}")
    return row if row["status"] not in ("STARTING", "RUNNING") else None
