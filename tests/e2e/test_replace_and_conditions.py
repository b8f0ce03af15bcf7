"""`overlap: replace` and a trigger `on: failed` through the real server on the embedded
backend: a slow job's running invocation is ABORTED/replaced by its next occurrence (the
job page shows the reason), and a failing job starts the job it names `on: failed`."""

from __future__ import annotations

import urllib.request

from tests.e2e.support import Receiver, Server, wait_until


def test_replace_and_an_on_failed_trigger(tmp_path):
    receiver = Receiver()
    receiver.delays["/slow"] = 4.5  # longer than the schedule's period: the next one replaces it
    receiver.statuses["/fail"] = 500
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "e2e.yaml").write_text(f"""
jobs:
  - id: slow
    schedule: every 2s
    overlap: replace
    target: {{http: {{url: "{receiver.url}/slow", timeout: 30s}}}}
  - id: failing
    schedule: every 2s
    triggers: [{{job: alarm, on: failed}}, {{job: cheer, on: succeeded}}]
    target: {{http: {{url: "{receiver.url}/fail"}}}}
  - id: alarm
    schedule: triggered
    target: {{http: {{url: "{receiver.url}/alarm"}}}}
  - id: cheer
    schedule: triggered
    target: {{http: {{url: "{receiver.url}/cheer"}}}}
""")
    server = Server(configs, tmp_path / "sundial.db", tmp_path / "server.log").start()
    try:
        def replaced():
            return [row for row in server.invocations("e2e", "slow") if row["reason"] == "replaced"]
        assert wait_until(lambda: len(replaced()) >= 2, timeout=60)
        assert all(row["status"] == "ABORTED" for row in replaced())
        assert not [row for row in server.invocations("e2e", "slow") if row["status"] == "SUCCEEDED"]
        with urllib.request.urlopen(f"{server.url}/p/e2e/slow?status=aborted", timeout=10) as page:
            assert "<td>replaced</td>" in page.read().decode()

        assert wait_until(lambda: len(receiver.at_path("/alarm")) >= 1, timeout=60)
        alarms = server.invocations("e2e", "alarm")
        assert alarms and all(row["trigger"] == "job:failing" for row in alarms)
        failed = {row["scheduled_time"] for row in server.invocations("e2e", "failing") if row["status"] == "FAILED"}
        assert {row["scheduled_time"] for row in alarms} <= failed
        assert receiver.at_path("/cheer") == []
    finally:
        server.stop()
        receiver.close()
