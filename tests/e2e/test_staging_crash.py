"""kill -9 of a server holding a staged request (statemachine/staging.py), restarted after
the request's time, through the real server on SQLite and a real receiver.

- Killed between the commit and T: the request never left. The restart settles the
  attempt after T, and it is sent then under the same invocation id, once; a job with
  a single attempt does not end FAILED `interrupted`.
- Killed just after T: the request may or may not have left. Whichever it was, the
  occurrence has one invocation id, each attempt reaches the receiver at most once, and
  it ends SUCCEEDED: sent again after the restart (as attempt 2 if it may have left,
  not counted against the single attempt).
"""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from tests.e2e.support import Receiver, Server, shown_staged, wait_until
from tests.support.cloud_stores import LONG_RUN

PERIOD = 4
CONFIG = (
    "jobs:\n"
    "  - id: once\n"
    f'    schedule: "*/{PERIOD} * * * * ?"\n'
    "    retry: {max_attempts: 1}\n"
    "    target: {http: {url: URL/once}}\n"
)
ENV = {"SUNDIAL_STAGE_AHEAD": "2500ms", "SUNDIAL_PROCESSES": "1"}


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _row(server: Server, t: float) -> dict | None:
    rows = [row for row in server.invocations("e2e", "once") if abs(_ts(row["scheduled_time"]) - t) < 0.001]
    assert len(rows) <= 1, rows  # one invocation per occurrence, whatever happened
    return rows[0] if rows else None


def _next_time(receiver: Receiver, after: float) -> float:
    t = receiver.at_path("/once")[0].scheduled
    while t < after:
        t += PERIOD
    return t


def _ended(server: Server, t: float) -> dict:
    assert wait_until(lambda: (_row(server, t) or {}).get("status") in ("SUCCEEDED", "FAILED"), timeout=15)
    row = _row(server, t)
    assert row is not None
    return row


@pytest.mark.skipif(not LONG_RUN, reason=(
    "two kills and restarts take about 20 s; the machine's rule (tests/unit/test_machine_staging.py) "
    "and the mark (tests/local/test_release_marks.py) always run: set SUNDIAL_FAULTS_SCALE"))
def test_a_staged_request_killed_before_it_left_is_sent_at_restart_under_its_id(tmp_path):
    receiver = Receiver()
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "e2e.yaml").write_text(CONFIG.replace("URL", receiver.url))
    db, log = tmp_path / "sundial.db", tmp_path / "server.log"
    server = Server(configs, db, log, env=ENV).start()
    try:
        assert wait_until(lambda: receiver.at_path("/once"), timeout=3 * PERIOD)

        # Killed 0.9 s before T, its attempt committed (staged 2.5 s ahead).
        t = _next_time(receiver, time.time() + 1.5)
        time.sleep(max(0.0, t - 0.9 - time.time()))
        # Staged: its invocation is in the job's record (its row is written when it ends),
        # shown as not started until T.
        job = server.get("/api/v1/projects/e2e/jobs/once")
        assert shown_staged(job, t), job
        server.kill()
        assert time.time() < t, "killed after T: the machine is too slow for this check"
        time.sleep(max(0.0, t + 0.3 - time.time()))
        server = Server(configs, db, log, env=ENV).start()  # it settles the attempt after T
        row = _ended(server, t)
        arrivals = [a for a in receiver.at_path("/once") if abs(a.scheduled - t) < 0.001]
        assert row["status"] == "SUCCEEDED", row
        assert [a.headers["X-Sundial-Invocation"] for a in arrivals] == [row["id"]]
        assert arrivals[0].at >= t

        # Killed just after T: sent or not, one id, each attempt at most once, and delivered.
        t2 = _next_time(receiver, time.time() + 3)
        time.sleep(max(0.0, t2 + 0.005 - time.time()))
        server.kill()
        server = Server(configs, db, log, env=ENV).start()
        row = _ended(server, t2)
        arrivals = [a for a in receiver.at_path("/once") if abs(a.scheduled - t2) < 0.001]
        attempts = [a.headers["X-Sundial-Attempt"] for a in arrivals]
        assert len(attempts) == len(set(attempts)) and arrivals, arrivals
        assert all(a.headers["X-Sundial-Invocation"] == row["id"] for a in arrivals)
        assert row["status"] == "SUCCEEDED", row
    finally:
        server.stop()
        receiver.close()
