"""Throttles on the cloud backend: a real server on the Datastore emulator, with
gcloud-tasks-emulator dispatching the throttle's queue.

What the emulator can and cannot show (read in its source, 0.6.2): it stores a queue's
rate limits as given but ignores them, and dispatches each queue's tasks one at a time.
So the concurrency bound itself (Cloud Tasks' `max_concurrent_dispatches`) is Google's
to keep; what is checked here is Sundial's half: the queue exists with
`max_concurrent_dispatches` = the throttle's `max_in_flight`, `main.py queues` creates
it, and every delivery of the throttled jobs goes through it, each event once, never
more than max_in_flight at a time.
"""

import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from engine.adapters.cloud.cloud_tasks_queue import build_tasks_client, throttle_queue_id
from tests.e2e.support import ROOT, Receiver, Server, free_port, wait_until
from tests.support.cloud_stores import ON_BOTH_IN_LONG_RUNS

PROJECT, LOCATION, CHAIN = "sundial-test", "us-central1", "sundial"
LIMIT, EVENTS = 5, 6

CONFIG = """
allowed_hosts: ["127.0.0.1"]
throttles:
  slow-consumers: {{max_in_flight: {limit}}}
jobs:
  - id: a
    at: ["{start}"]
    fanout: {{count: {events}, spread: 0s}}
    throttle: slow-consumers
    target: {{http: {{url: "{url}/slow"}}}}
  - id: b
    at: ["{start}"]
    fanout: {{count: {events}, spread: 0s}}
    throttle: slow-consumers
    target: {{http: {{url: "{url}/slow"}}}}
"""


class PathReceiver(Receiver):
    def _serve(self, handler) -> None:
        with self.lock:
            self.active["all"] += 1
            self.max_active["all"] = max(self.max_active["all"], self.active["all"])
        try:
            super()._serve(handler)
        finally:
            with self.lock:
                self.active["all"] -= 1


@pytest.fixture
def setup(tmp_path, cloud_database, tasks_emulator):
    receiver = PathReceiver(delays={"/slow": 0.3})
    configs = tmp_path / "configs"
    configs.mkdir()
    start = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=8)
    (configs / "cloud.yaml").write_text(CONFIG.format(
        url=receiver.url, start=start.isoformat().replace("+00:00", "Z"), limit=LIMIT, events=EVENTS))
    port = free_port()
    env = {
        "SUNDIAL_BACKEND": "cloud", "GOOGLE_CLOUD_PROJECT": PROJECT,
        "DATASTORE_EMULATOR_HOST": cloud_database.host, "SUNDIAL_TASKS_EMULATOR_HOST": tasks_emulator.host,
        "SUNDIAL_TASKS_LOCATION": LOCATION, "SUNDIAL_TASKS_QUEUE": CHAIN,
        "SUNDIAL_SERVICE_URL": f"http://127.0.0.1:{port}",
    }
    server = Server(configs, tmp_path / "unused.db", tmp_path / "server.log", env, port=port)
    yield server, receiver, configs, env, tasks_emulator
    server.stop()
    receiver.close()


@pytest.mark.parametrize("cloud_database", ON_BOTH_IN_LONG_RUNS, indirect=True)
def test_the_queues_command_creates_the_throttle_queue_with_its_limit(setup):
    _, _, configs, env, emulator = setup
    answer = subprocess.run(
        [sys.executable, "main.py", "queues", "--configs", str(configs)],
        cwd=ROOT, env={**env}, capture_output=True, text=True, timeout=60,
    )
    assert answer.returncode == 0, answer.stderr
    queue_id = throttle_queue_id(CHAIN, "cloud/slow-consumers")
    assert queue_id.startswith("sundial-t-cloud-slow-consumers-")
    client = build_tasks_client(emulator.host)
    path = client.queue_path(PROJECT, LOCATION, queue_id)
    assert f"{path}: " in answer.stdout
    assert client.get_queue(name=path).rate_limits.max_concurrent_dispatches == LIMIT


@pytest.mark.parametrize("cloud_database", ON_BOTH_IN_LONG_RUNS, indirect=True)
def test_throttled_deliveries_go_through_the_throttle_queue_within_its_limit(setup):
    server, receiver, _, _, emulator = setup
    server.start()  # its config import creates the throttle's queue itself
    client = build_tasks_client(emulator.host)
    path = client.queue_path(PROJECT, LOCATION, throttle_queue_id(CHAIN, "cloud/slow-consumers"))
    assert wait_until(lambda: _queue_limit(client, path) == LIMIT, 10)
    assert wait_until(lambda: len(receiver.at_path("/slow")) >= 2 * EVENTS, 30)
    time.sleep(0.5)
    events = Counter((a.headers["X-Sundial-Job"], a.headers["X-Sundial-Event"]) for a in receiver.at_path("/slow"))
    assert len(events) == 2 * EVENTS and max(events.values()) == 1
    assert 1 <= receiver.max_active["all"] <= LIMIT


def _queue_limit(client, path: str) -> int | None:
    try:
        return client.get_queue(name=path).rate_limits.max_concurrent_dispatches
    except Exception:
        return None
