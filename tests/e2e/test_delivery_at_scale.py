"""Fan-out, throttles, triggers, pause_after_failures and on_failure against a real
server and a real receiver. One server run of about 15 seconds serves every job here.
"""

import json
import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from tests.e2e.support import Receiver, Server, wait_until

FANOUT, SPREAD = 200, 10  # events, seconds
THROTTLE, SLOW = 5, 0.3  # max_in_flight, seconds per answer
PER_JOB = 20  # throttled events of each of the two jobs

CONFIG = """
throttles:
  slow-consumers: {{max_in_flight: {throttle}}}
jobs:
  - id: spread
    at: ["{start}"]
    fanout: {{count: {fanout}, spread: {spread}s}}
    target: {{http: {{url: "{url}/spread", body: '${{eventIndex}}/${{eventCount}}'}}}}
  - id: throttled-a
    at: ["{start}"]
    fanout: {{count: {per_job}, spread: 0s}}
    throttle: slow-consumers
    target: {{http: {{url: "{url}/slow"}}}}
  - id: throttled-b
    at: ["{start}"]
    fanout: {{count: {per_job}, spread: 0s}}
    throttle: slow-consumers
    target: {{http: {{url: "{url}/slow"}}}}
  - id: upstream-ok
    at: ["{start}"]
    triggers: [downstream-ok]
    target: {{http: {{url: "{url}/ok"}}}}
  - id: downstream-ok
    schedule: triggered
    target: {{http: {{url: "{url}/downstream"}}}}
  - id: upstream-failing
    at: ["{start}"]
    triggers: [downstream-never]
    target: {{http: {{url: "{url}/fail"}}}}
  - id: downstream-never
    schedule: triggered
    target: {{http: {{url: "{url}/downstream"}}}}
  - id: flaky
    schedule: "* * * * * ?"
    pause_after_failures: 3
    target: {{http: {{url: "{url}/fail"}}}}
  - id: alerting
    at: ["{start}"]
    target: {{http: {{url: "{url}/fail"}}}}
    on_failure: {{http: {{url: "{url}/alert"}}}}
"""


class PathReceiver(Receiver):
    """Counts requests in flight per path (the throttle spans jobs, not one job)."""

    def _serve(self, handler) -> None:
        path = handler.path
        with self.lock:
            self.active[path] += 1
            self.max_active[path] = max(self.max_active[path], self.active[path])
        try:
            super()._serve(handler)
        finally:
            with self.lock:
                self.active[path] -= 1


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("at-scale")
    receiver = PathReceiver(delays={"/slow": SLOW}, statuses={"/fail": 500})
    configs = tmp / "configs"
    configs.mkdir()
    start = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=4)
    (configs / "scale.yaml").write_text(CONFIG.format(
        url=receiver.url, start=start.isoformat().replace("+00:00", "Z"), fanout=FANOUT,
        spread=SPREAD, throttle=THROTTLE, per_job=PER_JOB))
    server = Server(configs, tmp / "sundial.db", tmp / "server.log").start()
    wait_until(lambda: len(receiver.at_path("/spread")) >= FANOUT, timeout=SPREAD + 12)
    yield server, receiver, start.timestamp()
    server.stop()
    receiver.close()


def test_a_fanout_of_200_over_10s_arrives_evenly_and_each_event_once(run):
    server, receiver, start = run
    arrivals = receiver.at_path("/spread")
    events = Counter(a.headers["X-Sundial-Event"] for a in arrivals)
    assert set(events) == {f"{i}/{FANOUT}" for i in range(FANOUT)}
    assert max(events.values()) == 1
    assert all(a.body == a.headers["X-Sundial-Event"] for a in arrivals)  # ${eventIndex}/${eventCount}
    assert len({a.headers["X-Sundial-Invocation"] for a in arrivals}) == 1  # one occurrence
    share = FANOUT / SPREAD
    per_second = Counter(int(a.at - start) for a in arrivals)
    assert max(per_second.values()) <= 2 * share, sorted(per_second.items())
    for arrival in arrivals:  # event i is due at start + i * spread / count
        index = int(arrival.headers["X-Sundial-Event"].split("/")[0])
        assert arrival.at >= start + index * SPREAD / FANOUT - 0.05
    [row] = wait_until(lambda: [r for r in server.invocations("scale", "spread") if r["finished_time"]], 5)
    assert (row["status"], row["event_count"]) == ("SUCCEEDED", FANOUT)


def test_two_jobs_sharing_a_throttle_never_exceed_its_max_in_flight(run):
    server, receiver, _ = run
    assert wait_until(lambda: len(receiver.at_path("/slow")) >= 2 * PER_JOB, 15)
    assert receiver.max_active["/slow"] == THROTTLE  # reached, never exceeded
    events = Counter((a.headers["X-Sundial-Job"], a.headers["X-Sundial-Event"]) for a in receiver.at_path("/slow"))
    assert len(events) == 2 * PER_JOB and max(events.values()) == 1
    for job in ("throttled-a", "throttled-b"):
        rows = wait_until(lambda: [r for r in server.invocations("scale", job) if r["finished_time"]], 10)
        assert [r["status"] for r in rows] == ["SUCCEEDED"]  # waited its turn: late, not missed


def test_success_triggers_the_named_job_and_failure_does_not(run):
    server, _, _ = run
    rows = wait_until(lambda: server.invocations("scale", "downstream-ok"), 10)
    assert [(r["trigger"], r["status"]) for r in rows][:1] in (
        [("job:upstream-ok", "SUCCEEDED")], [("job:upstream-ok", "RUNNING")], [("job:upstream-ok", "STARTING")])
    assert [r["status"] for r in server.invocations("scale", "upstream-failing")] == ["FAILED"]
    assert server.invocations("scale", "downstream-never") == []


def test_pause_after_failures_pauses_the_job_with_the_reason(run):
    server, _, _ = run
    job = wait_until(lambda: (j := server.get("/api/v1/projects/scale/jobs/flaky"))["state"] == "PAUSED" and j, 10)
    assert job and job["paused"]
    assert job["pause_reason"] == "paused after 3 consecutive failures (last: http 500)"
    time.sleep(1.5)  # nothing more is delivered once paused
    statuses = [r["status"] for r in server.invocations("scale", "flaky")]
    assert statuses == ["FAILED"] * 3


def test_on_failure_is_notified_with_the_invocation_summary(run):
    server, receiver, start = run
    [alert] = wait_until(lambda: receiver.at_path("/alert"), 10)
    [row] = server.invocations("scale", "alerting")
    assert json.loads(alert.body) == {
        "project": "scale", "job": "alerting", "invocation_id": row["id"], "status": "FAILED",
        "reason": "http 500", "attempts": 1, "failures": 1, "trigger": "schedule",
        "scheduled_time": datetime.fromtimestamp(start, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
    }
    assert alert.headers["X-Sundial-Invocation"] == row["id"]
    assert alert.headers["Content-Type"] == "application/json"
    assert (row["status"], row["reason"]) == ("FAILED", "http 500")
    detail = server.get(f"/api/v1/projects/scale/jobs/alerting/invocations/{row['id']}")
    assert wait_until(lambda: any(e["message"] == "on_failure attempt 1: notified" for e in server.get(
        f"/api/v1/projects/scale/jobs/alerting/invocations/{row['id']}")["log"]), 5), detail["log"]
