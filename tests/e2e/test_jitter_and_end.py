"""`jitter`, `end`, `description` and `labels` through the real server and a real receiver,
on the embedded backend and on the cloud one (Datastore emulator + tasks emulator).

Jobs are PUT through the API, so that a later `end` can be PUT again without waiting
for a config re-read.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from statemachine.policy import JobPolicy, occurrence_delay
from tests.e2e.support import Receiver, Server, free_port, wait_until
from tests.support.emulators import cloud_server_env

JITTER = timedelta(milliseconds=900)
JOBS = "/api/v1/projects/{project}/jobs"


def _rfc3339(moment: float) -> str:
    return datetime.fromtimestamp(moment, timezone.utc).isoformat().replace("+00:00", "Z")


def _exercise(server: Server, receiver: Receiver, project: str) -> None:
    jobs = JOBS.format(project=project)
    status, job = server.call("PUT", f"{jobs}/jittered", {
        "schedule": "every 1s", "jitter": "900ms", "description": "Spread out", "labels": {"team": "data"},
        "target": {"http": {"url": f"{receiver.url}/jitter", "body": "${scheduledTime}"}}})
    assert status == 201, job
    assert (job["description"], job["labels"], job["jitter"]) == ("Spread out", {"team": "data"}, "900ms")
    end = int(time.time()) + 3
    status, job = server.call("PUT", f"{jobs}/ending", {
        "schedule": "every 1s", "end": _rfc3339(end), "labels": {"team": "ops"},
        "target": {"http": {"url": f"{receiver.url}/end"}}})
    assert status == 201, job

    def ended():
        return server.get(f"{jobs}/ending")["state"] == "DONE" and len(receiver.at_path("/jitter")) >= 4
    assert wait_until(ended, timeout=30)

    policy = JobPolicy(jitter=JITTER)
    arrivals = receiver.at_path("/jitter")
    delays = []
    for arrival in arrivals:
        nominal = arrival.headers["X-Sundial-Scheduled-Time"]
        assert nominal.endswith(".000Z") and arrival.body == nominal  # the nominal time, not the delivery's
        scheduled = datetime.fromisoformat(nominal.replace("Z", "+00:00"))
        delay = occurrence_delay(policy, project, "jittered", scheduled, "schedule").total_seconds()
        delays.append(delay)
        assert arrival.at >= arrival.scheduled + delay - 0.02, (nominal, delay, arrival.at)
    assert max(delays) >= 0.1  # some delay is large enough to tell a jittered delivery from one on time
    rows = {row["scheduled_time"]: row for row in server.invocations(project, "jittered")}
    assert {a.headers["X-Sundial-Scheduled-Time"] for a in arrivals} <= set(rows)

    ending = server.get(f"{jobs}/ending")
    assert ending["next_run_time"] is None
    times = [row["scheduled_time"] for row in server.invocations(project, "ending")]
    assert times and max(times) <= _rfc3339(end).replace("Z", ".000Z")
    status, job = server.call("PUT", f"{jobs}/ending", {
        "schedule": "every 1s", "end": _rfc3339(end + 3600), "labels": {"team": "ops"},
        "target": {"http": {"url": f"{receiver.url}/end"}}})
    assert status == 200 and job["state"] != "DONE" and job["next_run_time"] is not None, job

    listed = server.get(f"{jobs}?label=team:data")["jobs"]
    assert [j["id"] for j in listed] == ["jittered"]
    assert server.call("GET", f"{jobs}?label=Team")[0] == 400


def test_jitter_and_end_on_the_embedded_backend(tmp_path):
    receiver = Receiver()
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "e2e.yaml").write_text("jobs: []\n")
    server = Server(configs, tmp_path / "sundial.db", tmp_path / "server.log").start()
    try:
        _exercise(server, receiver, "e2e")
    finally:
        server.stop()
        receiver.close()


@pytest.mark.parametrize("cloud_database", ["datastore"], indirect=True)
def test_jitter_and_end_on_the_cloud_backend(tmp_path, cloud_database, tasks_emulator):
    receiver = Receiver()
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "cloud.yaml").write_text('allowed_hosts: ["127.0.0.1"]\njobs: []\n')
    port = free_port()
    env = cloud_server_env(cloud_database, tasks_emulator, "sundial", port)
    server = Server(configs, tmp_path / "unused.db", tmp_path / "server.log", env, port=port).start()
    try:
        _exercise(server, receiver, "cloud")
    finally:
        server.stop()
        receiver.close()
