"""The REST API end to end: a real server, a real receiver, jobs made over HTTP.

One server run serves every job here at once: a job of four one-off times, one
deleted before its times, and two async targets (one completes through its
callback, one never does and times out).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

from tests.e2e.support import Receiver, Server, wait_until

PROJECT = "api"
JOBS = f"/api/v1/projects/{PROJECT}/jobs"


def rfc3339(instant: float) -> str:
    return datetime.fromtimestamp(instant, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("api")
    receiver = Receiver(statuses={"/async-ok": 202, "/async-never": 202})
    configs = tmp / "configs"
    configs.mkdir()
    (configs / f"{PROJECT}.yaml").write_text("jobs: []\n")  # a project that holds API jobs only
    server = Server(configs, tmp / "sundial.db", tmp / "server.log").start()
    # The times are whole seconds from now on, a little ahead so that the PUTs land first.
    base = float(int(time.time()) + 3)
    reminders = [base + offset for offset in (0, 1, 2, 3.5)]
    status, job = server.call("PUT", f"{JOBS}/reminders", {
        "at": [rfc3339(t) for t in reminders], "target": {"http": {"url": f"{receiver.url}/reminders"}}})
    assert status == 201, job
    status, _ = server.call("PUT", f"{JOBS}/cancelled", {
        "at": [rfc3339(base + offset) for offset in (1, 2)], "target": {"http": {"url": f"{receiver.url}/cancelled"}}})
    assert status == 201
    assert server.call("DELETE", f"{JOBS}/cancelled")[0] == 204
    for name, timeout in (("async-ok", "1m"), ("async-never", "2s")):
        status, _ = server.call("PUT", f"{JOBS}/{name}", {
            "schedule": "triggered", "timeout": timeout,
            "target": {"http": {"url": f"{receiver.url}/{name}", "async": True}}})
        assert status == 201
    yield server, receiver, reminders
    server.stop()
    receiver.close()


def invocation(server: Server, job: str, invocation_id: str) -> dict:
    return server.get(f"{JOBS}/{job}/invocations/{invocation_id}")


def test_four_at_times_are_four_deliveries_at_those_times(run):
    server, receiver, reminders = run
    assert wait_until(lambda: len(receiver.at_path("/reminders")) >= 4, timeout=reminders[-1] - time.time() + 5)
    time.sleep(1)  # anything extra would show now
    arrivals = receiver.at_path("/reminders")
    assert [a.headers["X-Sundial-Scheduled-Time"] for a in arrivals] == [rfc3339(t) for t in reminders]
    # A tick may run up to 50 ms early (statemachine.policy.Tuning.accept_early).
    assert all(-0.06 <= a.lateness < 1.0 for a in arrivals), [a.lateness for a in arrivals]
    assert len({a.headers["X-Sundial-Invocation"] for a in arrivals}) == 4
    history = server.get(f"{JOBS}/reminders/invocations")["invocations"]
    assert [h["status"] for h in history] == ["SUCCEEDED"] * 4
    assert server.get(f"{JOBS}/reminders")["state"] == "DONE"


def test_a_job_deleted_before_its_times_delivers_nothing(run):
    server, receiver, reminders = run
    wait_until(lambda: time.time() > reminders[0] + 3, timeout=10)
    assert receiver.at_path("/cancelled") == []
    assert server.call("GET", f"{JOBS}/cancelled")[0] == 404
    assert "cancelled" not in [job["id"] for job in server.get(JOBS)["jobs"]]


def test_an_async_target_completes_through_its_callback_and_a_wrong_token_changes_nothing(run):
    server, receiver, _ = run
    status, triggered = server.call("POST", f"{JOBS}/async-ok:trigger")
    assert status == 200
    (arrival,) = wait_until(lambda: receiver.at_path("/async-ok"), timeout=5)
    url, token = arrival.headers["X-Sundial-Completion-Url"], arrival.headers["X-Sundial-Completion-Token"]
    path = url[len(server.url):]
    assert path == f"{JOBS}/async-ok/invocations/{triggered['id']}:complete"
    assert wait_until(lambda: invocation(server, "async-ok", triggered["id"])["status"] == "RUNNING", timeout=5)
    before = invocation(server, "async-ok", triggered["id"])
    status, error = server.call("POST", path, {"status": "FAILED"}, {"X-Sundial-Completion-Token": "not-it"})
    assert (status, error["error"]["code"]) == (403, "PERMISSION_DENIED")
    assert invocation(server, "async-ok", triggered["id"]) == before
    status, done = server.call("POST", path, {"status": "SUCCEEDED", "message": "all good"},
                               {"Authorization": f"Bearer {token}"})
    assert (status, done["status"]) == (200, "SUCCEEDED")
    assert invocation(server, "async-ok", triggered["id"])["status"] == "SUCCEEDED"


def test_an_async_target_that_never_calls_back_fails_with_timeout(run):
    server, receiver, _ = run
    started = time.time()
    _, triggered = server.call("POST", f"{JOBS}/async-never:trigger")
    assert wait_until(lambda: receiver.at_path("/async-never"), timeout=5)
    final = wait_until(lambda: invocation(server, "async-never", triggered["id"])["status"] == "FAILED", timeout=12)
    row = invocation(server, "async-never", triggered["id"])
    assert final and (row["status"], row["reason"]) == ("FAILED", "timeout")
    finished = datetime.fromisoformat(row["finished_time"].replace("Z", "+00:00")).timestamp()
    assert finished - started >= 2  # not before its deadline
