"""Fan-in (`after`) through the real server on the embedded backend: a job waiting on two
upstream jobs is delivered once per scheduled time they both succeeded for, with that
time in its headers; one waiting on a failing job records each time SKIPPED/upstream."""

from __future__ import annotations

from datetime import datetime

from tests.e2e.support import Receiver, Server, wait_until


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_fan_in_runs_after_both_upstream_jobs_and_skips_after_a_failure(tmp_path):
    receiver = Receiver()
    receiver.statuses["/fail"] = 500
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "e2e.yaml").write_text(f"""
jobs:
  - {{id: extract-a, schedule: every 2s, target: {{http: {{url: "{receiver.url}/a"}}}}}}
  - {{id: extract-b, schedule: every 2s, target: {{http: {{url: "{receiver.url}/b"}}}}}}
  - {{id: broken, schedule: every 2s, target: {{http: {{url: "{receiver.url}/fail"}}}}}}
  - id: report
    after: [extract-a, extract-b]
    after_window: 30s
    target: {{http: {{url: "{receiver.url}/report"}}}}
  - id: never
    after: [extract-a, broken]
    target: {{http: {{url: "{receiver.url}/never"}}}}
  - {{id: half, schedule: every 4s, target: {{http: {{url: "{receiver.url}/half"}}}}}}
  - id: sometimes
    after: [extract-a, half]
    after_window: 3s
    target: {{http: {{url: "{receiver.url}/sometimes"}}}}
""")
    server = Server(configs, tmp_path / "sundial.db", tmp_path / "server.log").start()
    try:
        assert wait_until(lambda: len(receiver.at_path("/report")) >= 2, timeout=60)
        reports = server.invocations("e2e", "report")
        assert {row["trigger"] for row in reports} == {"after"}
        times = [row["scheduled_time"] for row in reports]
        assert len(times) == len(set(times))  # once per scheduled time
        succeeded = {row["scheduled_time"] for job in ("extract-a", "extract-b")
                     for row in server.invocations("e2e", job) if row["status"] == "SUCCEEDED"}
        assert set(times) <= succeeded
        sent = {_instant(request.headers["X-Sundial-Scheduled-Time"]) for request in receiver.at_path("/report")}
        assert sent <= {_instant(time) for time in times}  # the upstream jobs' scheduled time, not the trigger's

        assert wait_until(lambda: len(server.invocations("e2e", "never")) >= 2, timeout=60)
        skipped = server.invocations("e2e", "never")
        assert {(row["status"], row["reason"], row["trigger"]) for row in skipped} == {("SKIPPED", "upstream", "after")}
        assert receiver.at_path("/never") == []

        # extract-a every 2 s, half every 4 s: every other time waits out its 3 s window.
        def outcomes():
            return {(row["status"], row["reason"]) for row in server.invocations("e2e", "sometimes")}
        assert wait_until(lambda: {("SUCCEEDED", ""), ("SKIPPED", "upstream")} <= outcomes(), timeout=60)
        for row in server.invocations("e2e", "sometimes"):
            if row["status"] == "SKIPPED":
                log = server.call("GET", f"/api/v1/projects/e2e/jobs/sometimes/invocations/{row['id']}")[1]["log"]
                assert [entry["message"] for entry in log] == ["skipped: upstream (no success of half within 3s)"]
    finally:
        server.stop()
        receiver.close()
