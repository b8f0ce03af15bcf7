"""Occurrences staged before their time (statemachine/staging.py), through the real
server on SQLite and a real receiver: the attempt is committed ahead of T, and a pause,
a delete or a new target URL in the last second before T decides what goes out at T.

The server stages 2.5 s ahead here, so that the staged state can be seen through the API
before the test acts; by default it stages 1 s ahead."""

from __future__ import annotations

import time

import pytest

from tests.e2e.support import Receiver, Server, shown_staged, wait_until
from tests.support.cloud_stores import LONG_RUN

JOBS = "/api/v1/projects/e2e/jobs"
PERIOD = 4
SCHEDULE = f"*/{PERIOD} * * * * ?"


def _put(server: Server, job: str, url: str) -> None:
    status, body = server.call("PUT", f"{JOBS}/{job}", {"schedule": SCHEDULE, "target": {"http": {"url": url}}})
    assert status in (200, 201), body


def _scheduled_at(receiver: Receiver, path: str, t: float) -> list:
    return [a for a in receiver.at_path(path) if abs(a.scheduled - t) < 0.001]


@pytest.mark.skipif(not LONG_RUN, reason=(
    "staging is off by default and its engine tests always run (this one takes about 12 s): "
    "set SUNDIAL_FAULTS_SCALE"))
def test_pause_delete_and_change_in_the_last_second_before_t_decide_what_goes_at_t(tmp_path):
    receiver = Receiver()
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "e2e.yaml").write_text("jobs: []\n")
    server = Server(configs, tmp_path / "sundial.db", tmp_path / "server.log",
                    env={"SUNDIAL_STAGE_AHEAD": "2500ms"}).start()
    try:
        for job in ("normal", "paused", "deleted", "changed"):
            _put(server, job, f"{receiver.url}/old/{job}")
        assert wait_until(lambda: receiver.at_path("/old/normal"), timeout=3 * PERIOD)
        t = receiver.at_path("/old/normal")[0].scheduled + PERIOD
        time.sleep(max(0.0, t - 0.9 - time.time()))
        # Staged: every job's next occurrence is committed, its request held for T, and
        # shown as not started (SCHEDULED, next run at T, its invocation STARTING).
        views = {job: server.get(f"{JOBS}/{job}") for job in ("paused", "deleted", "changed")}
        assert all(shown_staged(view, t) for view in views.values()), views
        assert server.call("POST", f"{JOBS}/paused:pause", {})[0] == 200
        assert server.call("DELETE", f"{JOBS}/deleted")[0] == 204
        _put(server, "changed", f"{receiver.url}/new/changed")
        acted = time.time()
        assert acted < t, f"the test acted {acted - t:.2f} s after T; the machine is too slow for this check"

        assert wait_until(lambda: _scheduled_at(receiver, "/new/changed", t), timeout=10)
        assert wait_until(lambda: _scheduled_at(receiver, "/old/normal", t), timeout=10)
        time.sleep(1.0)  # anything sent late to an old definition would be in by now
        assert _scheduled_at(receiver, "/old/paused", t) == []
        assert _scheduled_at(receiver, "/old/deleted", t) == []
        assert _scheduled_at(receiver, "/old/changed", t) == []
        # Sent at T, not at the commit a few seconds before it.
        (normal,) = _scheduled_at(receiver, "/old/normal", t)
        (changed,) = _scheduled_at(receiver, "/new/changed", t)
        assert normal.at >= t and changed.at >= t
        skipped = [row for row in server.invocations("e2e", "paused") if row["status"] == "SKIPPED"]
        assert [row["reason"] for row in skipped] == ["paused"], skipped
        # Every arrival of the job left untouched came at or after its time.
        assert all(a.at >= a.scheduled for a in receiver.at_path("/old/normal"))
    finally:
        server.stop()
        receiver.close()
