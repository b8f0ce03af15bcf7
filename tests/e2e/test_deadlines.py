"""Deadlines kept within a second or two by a real server: an async invocation's
`timeout`, an attempt's own `timeout` and a fan-out's spread. The watchdog keeps its
production period (30 s) here, so it cannot be what keeps them."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from datetime import datetime

import pytest

from tests.e2e.support import Receiver, Server, wait_until

PRODUCTION_WATCHDOG = {"SUNDIAL_WATCHDOG_PERIOD": "30s", "SUNDIAL_TICK_GRACE": "30s", "SUNDIAL_START_GRACE": "60s"}


def _instant(raw: str) -> float:
    return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()


@pytest.fixture
def env(tmp_path):
    receiver = Receiver(statuses={"/accepts": 202}, delays={"/hangs": 30, "/hangs-too": 30})
    configs = tmp_path / "configs"
    configs.mkdir()
    servers = []

    def start(text: str, **settings) -> Server:
        (configs / "e2e.yaml").write_text(text)
        server = Server(configs, tmp_path / "sundial.db", tmp_path / "server.log",
                        {**PRODUCTION_WATCHDOG, **settings}).start()
        servers.append(server)
        return server

    yield receiver, configs, start, tmp_path
    for server in servers:
        server.stop()
    receiver.close()


def _trigger_and_wait(server: Server, job: str, timeout: float = 40) -> tuple[float, dict]:
    """Trigger the job; (seconds from the trigger to its invocation's end, the invocation)."""
    began = time.time()
    status, invocation = server.call("POST", f"/api/v1/projects/e2e/jobs/{job}:trigger", {})
    assert status == 200, invocation

    def ended():
        row = server.get(f"/api/v1/projects/e2e/jobs/{job}/invocations/{invocation['id']}")
        return row if row["status"] not in ("STARTING", "RUNNING") else None

    row = wait_until(ended, timeout=timeout, interval=0.05)
    assert row, f"{job}: still running {timeout} s after its trigger"
    return _instant(row["finished_time"]) - began, row


ASYNC = """jobs:
  - id: async
    schedule: triggered
    timeout: 2s
    target: {{http: {{url: {url}/accepts, async: true}}}}
"""


def test_an_async_target_that_never_completes_fails_timeout_within_two_seconds_of_its_deadline(env):
    receiver, _, start, _ = env
    server = start(ASYNC.format(url=receiver.url))
    for _ in range(3):  # three phases of the watchdog's 30 s
        took, row = _trigger_and_wait(server, "async")
        assert (row["status"], row["reason"]) == ("FAILED", "timeout")
        assert 2 <= took <= 4, took
    assert len(receiver.at_path("/accepts")) == 3


def _many_jobs(count: int, schedule: str, prefix: str) -> str:
    return "jobs:\n" + "".join(
        f'  - id: {prefix}{i}\n    schedule: "{schedule}"\n    target: {{noop: {{}}}}\n' for i in range(count))


def _log_times(log_path, message: str, **fields) -> list[float]:
    """When each line of the server's log with this message (and these fields) was written."""
    times = []
    for line in log_path.read_text().splitlines():
        entry = json.loads(line) if line.startswith("{") else {}
        if entry.get("message") == message and all(entry.get(k) == v for k, v in fields.items()):
            times.append(_instant(entry["time"]))
    return times


@pytest.mark.skipif(float(os.environ.get("SUNDIAL_FAULTS_SCALE", "1")) < 2,
                    reason="1,500 jobs beside the deadline (about 28 s): set SUNDIAL_FAULTS_SCALE=2")
def test_the_deadline_holds_while_the_watchdog_repairs_many_jobs_and_a_long_import_runs(env):
    receiver, configs, start, tmp_path = env
    fire = int(time.time()) + 15  # all of them, once the early ticks of staging are long past
    (configs / "busy.yaml").write_text(_many_jobs(1500, f"every 1m offset {fire % 60}s", "b"))
    server = start(ASYNC.format(url=receiver.url).replace("timeout: 2s", "timeout: 6s"),
                   SUNDIAL_WATCHDOG_PERIOD="1s", SUNDIAL_TICK_GRACE="1s")
    assert server.get("/api/v1/projects/busy/jobs?page_size=1")["jobs"]
    with sqlite3.connect(tmp_path / "sundial.db", timeout=10) as conn:
        conn.execute("DELETE FROM tasks")  # their ticks for `fire`: 1,500 broken chains at fire + 1 s
    time.sleep(max(0.0, fire + 1.5 - time.time()))
    (configs / "later.yaml").write_text(_many_jobs(20_000, "every 1h", "l"))  # read within the import period
    took, row = _trigger_and_wait(server, "async")
    assert (row["status"], row["reason"]) == ("FAILED", "timeout")
    assert took <= 8, took
    deadline = _instant(row["finished_time"])
    log = tmp_path / "server.log"
    assert wait_until(lambda: _log_times(log, "imported project", project="later"), timeout=60)
    assert wait_until(lambda: len(_log_times(log, "watchdog repaired")) >= 1500, timeout=60)
    # Both were at work when the deadline came.
    repairs, importing = _log_times(log, "watchdog repaired"), _log_times(log, "importing project", project="later")
    assert repairs[0] < deadline < repairs[-1], (repairs[0], deadline, repairs[-1])
    assert importing[0] - 1 < deadline + 2 and deadline < importing[-1], (importing[0], deadline, importing[-1])


SYNC = """jobs:
  - id: staged
    schedule: "*/5 * * * * ?"
    retry: {{max_attempts: 1}}
    target: {{http: {{url: {url}/hangs, timeout: 2s}}}}
  - id: manual
    schedule: triggered
    retry: {{max_attempts: 1}}
    target: {{http: {{url: {url}/hangs-too, timeout: 2s}}}}
"""


def test_an_attempt_whose_target_never_answers_ends_within_its_timeout_and_a_second(env):
    receiver, _, start, _ = env
    server = start(SYNC.format(url=receiver.url))
    for _ in range(2):
        took, row = _trigger_and_wait(server, "manual")
        assert (row["status"], row["reason"]) == ("FAILED", "timeout") and took <= 3, (took, row)
    def two_ended():
        ended = [row for row in server.invocations("e2e", "staged") if row["finished_time"]]
        return ended[:2] if len(ended) >= 2 else None

    ended = wait_until(two_ended, timeout=20)
    assert ended, server.invocations("e2e", "staged")
    for row in ended:  # staged ahead, sent at its time, and no answer for 2 s
        assert (row["status"], row["reason"]) == ("FAILED", "timeout")
        assert _instant(row["finished_time"]) - _instant(row["scheduled_time"]) <= 3, row


FANOUT = """jobs:
  - id: spread
    schedule: triggered
    timeout: 2s
    fanout: {{count: 4, spread: 4s}}
    target: {{http: {{url: {url}/accepts, async: true}}}}
"""


def test_a_fanouts_events_start_on_time_and_its_deadline_holds(env):
    receiver, _, start, _ = env
    server = start(FANOUT.format(url=receiver.url))
    took, row = _trigger_and_wait(server, "spread")
    assert (row["status"], row["reason"]) == ("FAILED", "timeout")
    assert 6 <= took <= 8, took  # the spread, then the timeout
    arrivals = receiver.at_path("/accepts")
    assert sorted(a.headers["X-Sundial-Event"] for a in arrivals) == ["0/4", "1/4", "2/4", "3/4"]
    for arrival in arrivals:
        due = arrival.scheduled + int(arrival.headers["X-Sundial-Event"].split("/")[0])
        assert 0 <= arrival.at - due < 1, (arrival.headers["X-Sundial-Event"], arrival.at - due)
