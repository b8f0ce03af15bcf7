"""The cloud adapters end to end: a real server on the Datastore emulator, and on the
Firestore emulator in Datastore mode, with gcloud-tasks-emulator dispatching real HTTP
requests to its task handlers.

Skipped, with the reason, where an emulator is not installed.
"""

import time
from collections import defaultdict

import pytest

from tests.e2e.support import Receiver, Server, free_port
from tests.support.cloud_stores import ON_BOTH_IN_LONG_RUNS
from tests.support.emulators import cloud_server_env

# The cloud backend refuses loopback targets unless the project allows them.
CONFIG = """
allowed_hosts: ["127.0.0.1"]
jobs:
  - id: every-two
    schedule: "*/2 * * * * ?"
    target: {{http: {{url: {url}/two}}}}
"""
RUN_SECONDS = 14


@pytest.fixture
def cloud(tmp_path, cloud_database, tasks_emulator):
    receiver = Receiver()
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "cloud.yaml").write_text(CONFIG.format(url=receiver.url))
    servers = []

    def start(**extra) -> Server:
        port = free_port()
        env = {**cloud_server_env(cloud_database, tasks_emulator, "sundial", port), **extra}
        server = Server(configs, tmp_path / "unused.db", tmp_path / "server.log", env, port=port).start()
        servers.append(server)
        return server

    yield start, receiver
    for server in servers:
        server.stop()
    receiver.close()


def _check_exactly_once(server: Server, receiver: Receiver, started: float) -> None:
    arrivals = [a for a in receiver.at_path("/two") if started + 3 <= a.scheduled <= started + RUN_SECONDS - 3]
    ids = defaultdict(set)
    for arrival in arrivals:
        ids[round(arrival.scheduled)].add(arrival.headers["X-Sundial-Invocation"])
    expected = {s for s in range(int(started) + 4, int(started + RUN_SECONDS - 3)) if s % 2 == 0}
    assert expected <= set(ids), f"missing: {sorted(expected - set(ids))}"
    assert all(len(group) == 1 for group in ids.values()), "one occurrence, two invocation ids"
    assert all(second % 2 == 0 for second in ids)
    rows = server.invocations("cloud", "every-two")
    per_time = defaultdict(list)
    for row in rows:
        per_time[row["scheduled_time"]].append(row["id"])
    assert all(len(group) == 1 for group in per_time.values()), "an occurrence has two invocations"
    delivered = {i for group in ids.values() for i in group}
    active = set(server.get("/api/v1/projects/cloud/jobs/every-two")["active_invocations"])
    assert delivered <= {row["id"] for row in rows} | active


@pytest.mark.parametrize("cloud_database", ON_BOTH_IN_LONG_RUNS, indirect=True)
def test_the_chain_runs_on_datastore_and_cloud_tasks(cloud):
    start, receiver = cloud
    server = start()
    started = time.time()
    time.sleep(RUN_SECONDS)
    _check_exactly_once(server, receiver, started)
    statuses = {row["status"] for row in server.invocations("cloud", "every-two")}
    assert statuses <= {"SUCCEEDED", "RUNNING", "STARTING"}


@pytest.mark.parametrize("cloud_database", ON_BOTH_IN_LONG_RUNS, indirect=True)
def test_every_task_sent_twice_makes_no_duplicate_invocation(cloud):
    start, receiver = cloud
    server = start(SUNDIAL_FAULT_DUPLICATE_TASKS="1")
    started = time.time()
    time.sleep(RUN_SECONDS)
    _check_exactly_once(server, receiver, started)
