"""The cloud adapters end to end: a real server on the Datastore emulator, and on the
Firestore emulator in Datastore mode, with gcloud-tasks-emulator dispatching real HTTP
requests to its task handlers.

Skipped, with the reason, where an emulator is not installed.
"""

import time
from collections import defaultdict

import pytest

from tests.e2e.support import Receiver, Server, epoch, free_port, wait_until
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


def _chain_running(receiver: Receiver) -> float:
    """When the first occurrence reached the target. The first tick task of a new server
    can come seconds late (the emulator dispatches a queue's tasks one at a time, and the
    server's first requests open its clients), and a tick later than the next fire time
    rightly records the superseded one SKIPPED/missed; exactly once is checked from here."""
    assert wait_until(lambda: receiver.at_path("/two"), timeout=30), "no occurrence reached the target"
    return receiver.at_path("/two")[0].at


def _check_exactly_once(server: Server, receiver: Receiver, running: float) -> None:
    """Every even second from a second after the chain ran to 3 s before the end reached
    the target under one invocation id, and no occurrence has two invocations."""
    arrivals = [a for a in receiver.at_path("/two") if running + 1 <= a.scheduled <= running + RUN_SECONDS - 3]
    ids = defaultdict(set)
    for arrival in arrivals:
        ids[round(arrival.scheduled)].add(arrival.headers["X-Sundial-Invocation"])
    expected = {s for s in range(int(running) + 2, int(running + RUN_SECONDS - 3)) if s % 2 == 0}
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
    running = _chain_running(receiver)
    time.sleep(RUN_SECONDS)
    _check_exactly_once(server, receiver, running)
    statuses = {row["status"] for row in server.invocations("cloud", "every-two")
                if epoch(row["scheduled_time"]) >= running + 1}
    assert statuses <= {"SUCCEEDED", "RUNNING", "STARTING"}


@pytest.mark.parametrize("cloud_database", ON_BOTH_IN_LONG_RUNS, indirect=True)
def test_every_task_sent_twice_makes_no_duplicate_invocation(cloud):
    start, receiver = cloud
    server = start(SUNDIAL_FAULT_DUPLICATE_TASKS="1")
    running = _chain_running(receiver)
    time.sleep(RUN_SECONDS)
    _check_exactly_once(server, receiver, running)
