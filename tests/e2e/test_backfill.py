"""Backfills and re-runs end to end: a real server, a real receiver, on the embedded
backend and on the cloud one (Datastore emulator and gcloud-tasks-emulator).

The receiver must see one delivery per fire time of the range, each with its own
X-Sundial-Scheduled-Time and its own rendered template values, and nothing twice.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from tests.e2e.support import Receiver, Server, free_port, wait_until
from tests.support.cloud_stores import LONG_RUN
from tests.support.emulators import cloud_server_env

PROJECT = "bf"
JOBS = f"/api/v1/projects/{PROJECT}/jobs"
ZONE = "America/New_York"
CONFIG = """
allowed_hosts: ["127.0.0.1"]
jobs:
  - id: hourly
    schedule: "0 * * * *"
    timezone: ZONE
    overlap: skip
    target:
      http:
        url: URL/hourly
        body: '{"hour": "${startOfHour}", "day": "${todaysDate}", "at": "${scheduledTime}"}'
  - id: on-demand
    schedule: triggered
    target: {noop: {}}
  - id: frozen
    schedule: "0 * * * *"
    target: {noop: {}}
  - id: every-second
    schedule: every 1s
    target: {noop: {}}
""".replace("ZONE", ZONE)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _hours_back(count: int) -> tuple[datetime, datetime]:
    end = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    return end - timedelta(hours=count), end


def _expected_body(moment: datetime) -> dict:
    local = moment.astimezone(ZoneInfo(ZONE))
    return {"hour": local.isoformat(timespec="milliseconds"), "day": local.date().isoformat(), "at": rfc3339(moment)}


def _start(tmp_path, env: dict | None = None, port: int | None = None) -> tuple[Server, Receiver]:
    receiver = Receiver()
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / f"{PROJECT}.yaml").write_text(CONFIG.replace("URL", receiver.url))
    server = Server(configs, tmp_path / "sundial.db", tmp_path / "server.log", env, port=port).start()
    assert wait_until(lambda: server.call("GET", f"{JOBS}/hourly")[0] == 200, timeout=15)
    return server, receiver


@pytest.fixture
def local(tmp_path):
    server, receiver = _start(tmp_path)
    yield server, receiver
    server.stop()
    receiver.close()


@pytest.fixture
def cloud(tmp_path, datastore, tasks_emulator):
    port = free_port()
    server, receiver = _start(tmp_path, cloud_server_env(datastore, tasks_emulator, "sundial", port), port)
    yield server, receiver
    server.stop()
    receiver.close()


def _check_backfill_and_rerun(server: Server, receiver: Receiver) -> None:
    start, end = _hours_back(5)
    status, answer = server.call("POST", f"{JOBS}/hourly:backfill",
                                 {"start": rfc3339(start), "end": rfc3339(end), "request_id": "incident-42"})
    assert status == 200, answer
    times = [start + timedelta(hours=i) for i in range(5)]
    assert answer["count"] == 5 and len(set(answer["invocations"])) == 5
    arrived = wait_until(lambda: len(receiver.at_path("/hourly")) >= 5 and receiver.at_path("/hourly"), timeout=20)
    assert arrived
    # The same request again (a client retrying) names the same invocations and sends nothing new.
    assert server.call("POST", f"{JOBS}/hourly:backfill",
                       {"start": rfc3339(start), "end": rfc3339(end), "request_id": "incident-42"}) == (200, answer)
    # Re-run the 2nd hour once more, as the invocation page's button does.
    status, rerun = server.call("POST", f"{JOBS}/hourly:trigger", {"scheduled_time": rfc3339(times[1])})
    assert (status, rerun["trigger"], rerun["scheduled_time"]) == (200, "manual", rfc3339(times[1]))
    assert wait_until(lambda: len(receiver.at_path("/hourly")) >= 6, timeout=20)
    time.sleep(1)  # anything extra would show now
    arrivals = receiver.at_path("/hourly")
    assert len(arrivals) == 6
    backfilled, again = arrivals[:5], arrivals[5]
    # In order, one per fire time, each with its own time and template values.
    assert [a.headers["X-Sundial-Scheduled-Time"] for a in backfilled] == [rfc3339(t) for t in times]
    assert [json.loads(a.body) for a in backfilled] == [_expected_body(t) for t in times]
    assert [a.headers["X-Sundial-Invocation"] for a in backfilled] == answer["invocations"]
    assert (again.headers["X-Sundial-Scheduled-Time"], json.loads(again.body)) == (
        rfc3339(times[1]), _expected_body(times[1]))
    assert again.headers["X-Sundial-Invocation"] == rerun["id"]
    rows = {row["id"]: row for row in server.invocations(PROJECT, "hourly")}
    assert wait_until(lambda: all(server.get(f"{JOBS}/hourly/invocations/{i}")["status"] == "SUCCEEDED"
                                  for i in answer["invocations"]), timeout=10)
    rows = {row["id"]: row for row in server.invocations(PROJECT, "hourly")}
    assert [(rows[i]["trigger"], rows[i]["scheduled_time"]) for i in answer["invocations"]] == [
        ("backfill", rfc3339(t)) for t in times]
    assert not [row for row in rows.values() if row["status"] == "SKIPPED"]  # `skip` does not drop them


def test_a_backfill_and_a_rerun_deliver_each_time_once_on_sqlite(local):
    _check_backfill_and_rerun(*local)


def test_a_backfill_and_a_rerun_deliver_each_time_once_on_datastore_and_cloud_tasks(cloud):
    _check_backfill_and_rerun(*cloud)


def test_what_a_backfill_refuses(local):
    server, _ = local
    start, end = _hours_back(2)
    body = {"start": rfc3339(start), "end": rfc3339(end)}

    def refused(job: str, payload: dict, action: str = "backfill") -> tuple[int, str, str]:
        status, answer = server.call("POST", f"{JOBS}/{job}:{action}", payload)
        return status, answer["error"]["code"], answer["error"]["message"]

    now = datetime.now(timezone.utc).replace(microsecond=0)
    status, code, message = refused("every-second", {"start": rfc3339(now - timedelta(seconds=1001)),
                                                     "end": rfc3339(now)})
    assert (status, code) == (400, "INVALID_ARGUMENT") and "1,001" in message and "1,000" in message
    assert refused("hourly", {"start": body["end"], "end": body["start"]})[:2] == (400, "INVALID_ARGUMENT")
    future = rfc3339(datetime.now(timezone.utc) + timedelta(hours=1))
    assert "future" in refused("hourly", {"start": body["start"], "end": future})[2]
    assert "triggered" in refused("on-demand", body)[2]
    assert "offset" in refused("hourly", {"start": "2026-01-05T10:00:00", "end": body["end"]})[2]
    assert server.call("POST", f"{JOBS}/frozen:pause", {"reason": "incident"})[0] == 200
    assert refused("frozen", body)[:2] == (409, "FAILED_PRECONDITION")
    assert "future" in refused("hourly", {"scheduled_time": future}, "trigger")[2]
    assert server.invocations(PROJECT, "frozen") == [] and server.invocations(PROJECT, "hourly") == []


@pytest.mark.skipif(not LONG_RUN, reason="1,000 backfilled runs end to end (about 13 s): set SUNDIAL_FAULTS_SCALE")
def test_a_thousand_run_backfill_completes_every_run_once_on_sqlite(local):
    server, _ = local
    now = datetime.now(timezone.utc).replace(microsecond=0)
    status, answer = server.call("POST", f"{JOBS}/every-second:backfill",
                                 {"start": rfc3339(now - timedelta(seconds=1000)), "end": rfc3339(now)})
    assert (status, answer["count"]) == (200, 1000)

    def backfilled() -> list[dict]:
        return [row for row in server.invocations(PROJECT, "every-second") if row["trigger"] == "backfill"]

    started = time.time()
    assert wait_until(lambda: sum(row["status"] == "SUCCEEDED" for row in backfilled()) >= 1000, timeout=60,
                      interval=0.5)
    print(f"1,000 backfilled runs in {time.time() - started:.1f} s")
    rows = backfilled()
    assert sorted(row["id"] for row in rows) == sorted(answer["invocations"])
    assert {row["status"] for row in rows} == {"SUCCEEDED"}
