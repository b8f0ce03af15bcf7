"""The chain spread over several Cloud Tasks queues, end to end: a real server on the
Datastore emulator with gcloud-tasks-emulator, jobs in different shards, each occurrence
delivered once; and (in long runs) a restart with another shard count, after which the
ticks left in the former shards still run and nothing is delivered twice."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

import pytest

from app.cloud_queues import provision_task_queues
from engine.adapters.cloud.cloud_tasks_queue import build_tasks_client
from statemachine.shards import shard_of
from tests.e2e.support import Receiver, Server, free_port
from tests.support.cloud_stores import LONG_RUN
from tests.support.emulators import cloud_server_env

JOBS = ("job-a", "job-b", "job-d", "job-f")  # shards 3, 1, 2 and 0 of 4
CONFIG = "allowed_hosts: ['127.0.0.1']\njobs:\n" + "".join(
    f"  - id: {job}\n    schedule: '*/2 * * * * ?'\n    target: {{http: {{url: '{{url}}/{job}'}}}}\n" for job in JOBS)


@pytest.fixture
def run(tmp_path, datastore, tasks_emulator):
    receiver = Receiver()
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "shards.yaml").write_text(CONFIG.replace("{url}", receiver.url))
    port, servers = free_port(), []
    queue = f"shards-{uuid.uuid4().hex[:8]}"  # the emulator outlives the test: queues of its own
    client = build_tasks_client(tasks_emulator.host)

    def start(shards: int) -> Server:
        provision_task_queues("sundial-test", "us-central1", queue, tasks_emulator.host, shards=shards)
        env = {**cloud_server_env(datastore, tasks_emulator, queue, port), "SUNDIAL_TASKS_QUEUE_SHARDS": str(shards)}
        server = Server(tmp_path / "configs", tmp_path / "unused.db", tmp_path / "server.log", env, port=port)
        servers.append(server.start())
        return server

    def pending(seconds: float = 2.0) -> set[str]:
        """Every queue seen holding a task over `seconds` (a tick being handled has
        left its queue, and the next one may not be there yet)."""
        seen, until = set(), time.monotonic() + seconds
        while time.monotonic() < until:
            seen |= _pending_queues(client, queue)
            time.sleep(0.2)
        return seen

    yield start, receiver, pending
    for server in servers:
        server.stop()
    receiver.close()
    for name in _chain_queues(client, queue):  # else the emulator retries their tasks forever
        client.delete_queue(name=name)


def _chain_queues(client, queue: str) -> list[str]:
    parent = "projects/sundial-test/locations/us-central1"
    return [q.name for q in client.list_queues(parent=parent)
            if q.name.rsplit("/", 1)[-1] == queue or q.name.rsplit("/", 1)[-1].startswith(f"{queue}-")]


def _pending_queues(client, queue: str) -> set[str]:
    """Which of the chain's queues hold a task now, named as shard numbers ("" for the first)."""
    return {name.rsplit("/", 1)[-1][len(queue):] for name in _chain_queues(client, queue)
            if list(client.list_tasks(parent=name))}


def _delivered(receiver: Receiver, job: str) -> dict[int, set[str]]:
    """Scheduled second -> the invocation ids that arrived for it."""
    ids = defaultdict(set)
    for arrival in receiver.at_path(f"/{job}"):
        ids[round(arrival.scheduled)].add(arrival.headers["X-Sundial-Invocation"])
    return ids


def _check(receiver: Receiver, windows: list[tuple[float, float]]) -> None:
    for job in JOBS:
        ids = _delivered(receiver, job)
        assert all(len(group) == 1 for group in ids.values()), f"{job}: one occurrence delivered twice"
        for begin, end in windows:
            expected = {s for s in range(int(begin) + 3, int(end) - 2) if s % 2 == 0}
            assert expected <= set(ids), f"{job}: missing {sorted(expected - set(ids))}"


@pytest.mark.skipif(not LONG_RUN, reason=(
    "four shards end to end (about 16 s; routing is tested on the tasks emulator in tests/cloud): "
    "set SUNDIAL_FAULTS_SCALE"))
def test_jobs_in_four_shards_run_once_each_through_their_own_queues(run):
    assert sorted(shard_of("shards", job, 4) for job in JOBS) == [0, 1, 2, 3]
    start, receiver, pending = run
    server = start(4)
    began = time.time()
    time.sleep(8)
    # Each job's next tick waits in its own shard: all four queues are in use.
    assert pending() == {"", "-1", "-2", "-3"}
    _check(receiver, [(began, time.time())])
    # A tick created ahead, still waiting in its shard when its job is paused, delivers nothing.
    status, _ = server.call("POST", "/api/v1/projects/shards/jobs/job-a:pause", {})
    paused = time.time()
    assert status == 200
    time.sleep(4.5)
    late = [a for a in receiver.at_path("/job-a") if a.scheduled > paused + 0.5]
    assert late == [], "a paused job was delivered"
    assert max(a.scheduled for a in receiver.at_path("/job-b")) > paused + 2  # the others went on


@pytest.mark.skipif(not LONG_RUN, reason="a restart of a cloud server (about 20 s): set SUNDIAL_FAULTS_SCALE")
def test_after_the_shard_count_changes_the_ticks_left_in_old_shards_run_and_none_twice(run):
    start, receiver, pending = run
    first = start(4)
    began = time.time()
    time.sleep(7)
    first.stop()
    stopped = time.time()
    second = start(1)  # every job now in the first queue: three of them move
    restarted = time.time()
    time.sleep(9)
    assert pending() == {""}  # the old shards drained
    _check(receiver, [(began, stopped), (restarted, time.time())])
    for job in JOBS:
        rows = second.invocations("shards", job)
        times = [row["scheduled_time"] for row in rows]
        assert len(times) == len(set(times)), f"{job}: an occurrence has two invocations"
