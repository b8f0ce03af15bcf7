"""On Cloud Tasks, a task run again after a run that gave no answer proves nothing while
the attempt's lease runs (docs/REFERENCE.md section 4): the run may have died, or only
its request ended (Cloud Run ends a request at its timeout and leaves the handler
sending). gcloud-tasks-emulator runs the task again after the killed server gave no
answer, with a retry count of 1; the new server leaves the attempt in flight and sends it
again under the same invocation id only once its lease (the target's timeout plus
SUNDIAL_START_GRACE) has run out, never twice at once.
"""

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
    target: {{http: {{url: {url}/slow, timeout: 6s}}}}
"""
LEASE = 12  # seconds: the attempt's timeout (6 s) + SUNDIAL_START_GRACE (6 s)


@pytest.mark.parametrize("cloud_database", ON_BOTH_IN_LONG_RUNS, indirect=True)
def test_a_task_run_again_after_its_server_died_sends_the_attempt_again_only_after_its_lease(
        tmp_path, cloud_database, tasks_emulator):
    receiver = Receiver(delays={"/slow": 4})
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "cloud.yaml").write_text(CONFIG.format(url=receiver.url))
    port = free_port()
    env = {**cloud_server_env(cloud_database, tasks_emulator, "redelivery", port), "SUNDIAL_START_GRACE": "6s"}

    def start() -> Server:
        return Server(configs, tmp_path / "unused.db", tmp_path / "server.log", env, port=port).start()

    server = start()
    try:
        status, _ = server.call("POST", "/api/v1/projects/cloud/jobs/slow:trigger")
        assert status == 200
        assert wait_until(lambda: len(receiver.at_path("/slow")) == 1, timeout=20)
        server.kill()  # the attempt is in flight: the target is still working on it
        server = start()
        assert wait_until(lambda: len(receiver.at_path("/slow")) == 2, timeout=LEASE + 30), "not delivered again"
        first, again = receiver.at_path("/slow")
        assert again.at - first.at >= LEASE - 1  # not while the first might still be sending it
        assert again.headers["X-Sundial-Invocation"] == first.headers["X-Sundial-Invocation"]
        invocation = first.headers["X-Sundial-Invocation"]
        row = wait_until(lambda: _finished(server, invocation), timeout=15)
        assert row["status"] == "SUCCEEDED"
    finally:
        server.stop()
        receiver.close()


def _finished(server: Server, invocation: str) -> dict | None:
    row = server.get(f"/api/v1/projects/cloud/jobs/slow/invocations/{invocation}")
    return row if row["status"] not in ("STARTING", "RUNNING") else None
