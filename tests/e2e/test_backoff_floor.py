"""The backoff floor, seen from the target, on both backends: the next attempt never
arrives less than `min_backoff` after the previous attempt's answer (jitter adds to
the wait, never takes from it). The cloud runs go through gcloud-tasks-emulator, on the
Datastore emulator and on the Firestore emulator in Datastore mode.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.support import Receiver, Server, free_port, wait_until
from tests.support.emulators import cloud_server_env

ATTEMPTS = 5
ANSWER_DELAY = 0.05  # seconds the target works before it answers 500
MIN_BACKOFF = 0.2

CONFIG = """
allowed_hosts: ["127.0.0.1"]
jobs:
  - id: failing
    schedule: triggered
    retry: {{max_attempts: {attempts}, min_backoff: 200ms, max_backoff: 200ms}}
    target: {{http: {{url: {url}/fail}}}}
"""


def _gaps_after_answers(receiver: Receiver) -> list[float]:
    arrivals = sorted(a.at for a in receiver.at_path("/fail"))
    return [later - (earlier + ANSWER_DELAY) for earlier, later in zip(arrivals, arrivals[1:])]


def _run(server: Server, receiver: Receiver) -> list[float]:
    status, _ = server.call("POST", "/api/v1/projects/floor/jobs/failing:trigger")
    assert status == 200
    assert wait_until(lambda: len(receiver.at_path("/fail")) == ATTEMPTS, timeout=30)
    return _gaps_after_answers(receiver)


@pytest.fixture
def setup(tmp_path):
    receiver = Receiver(delays={"/fail": ANSWER_DELAY}, statuses={"/fail": 500})
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "floor.yaml").write_text(CONFIG.format(attempts=ATTEMPTS, url=receiver.url))
    servers: list[Server] = []
    yield configs, receiver, servers
    for server in servers:
        server.stop()
    receiver.close()


def test_retries_wait_at_least_min_backoff_after_each_answer_on_sqlite(setup, tmp_path):
    configs, receiver, servers = setup
    servers.append(Server(configs, tmp_path / "sundial.db", tmp_path / "serve.log").start())
    gaps = _run(servers[0], receiver)
    assert len(gaps) == ATTEMPTS - 1
    assert min(gaps) >= MIN_BACKOFF, gaps


def test_retries_wait_at_least_min_backoff_after_each_answer_on_cloud_tasks(setup, tmp_path, cloud_database,
                                                                          tasks_emulator):
    configs, receiver, servers = setup
    port = free_port()
    env = cloud_server_env(cloud_database, tasks_emulator, "floor", port)
    servers.append(Server(configs, tmp_path / "unused.db", tmp_path / "serve.log", env, port=port).start())
    started = time.time()
    gaps = _run(servers[0], receiver)
    assert len(gaps) == ATTEMPTS - 1
    assert min(gaps) >= MIN_BACKOFF, (gaps, time.time() - started)
