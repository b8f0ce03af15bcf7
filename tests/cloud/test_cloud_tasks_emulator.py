"""CloudTasksQueue, ensure_queue and `main.py queues` against gcloud-tasks-emulator: the
emulator really POSTs each task to Sundial's task handler, through the guard."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

import pytest
from werkzeug.serving import make_server

from config.settings import Settings
from engine.adapters.cloud.cloud_tasks_queue import (
    AppEngineTarget,
    CloudTasksQueue,
    QueueSpec,
    build_tasks_client,
    ensure_queue,
)
from engine.clock import SystemClock
from engine.ports import Task
from web.app import create_app

PROJECT, LOCATION = "sundial-test", "us-central1"


class RecordingEngine:
    def __init__(self):
        self.handled, self.arrived = [], []
        self.tasks = self  # the task handler calls engine.tasks.handle(task)

    def handle(self, task):
        self.handled.append(task)
        self.arrived.append(datetime.now(timezone.utc))


@contextmanager
def serving(settings: Settings, port: int = 0):
    """Sundial's Flask app on a real port, with an engine that records its tasks; yields
    (base URL, engine, the headers of every request that reached the app)."""
    engine, seen = RecordingEngine(), []
    app = create_app(engine, settings)

    def recording(environ, start_response):
        seen.append({k[5:].replace("_", "-").title(): v for k, v in environ.items() if k.startswith("HTTP_")})
        return app(environ, start_response)

    server = make_server("127.0.0.1", port, recording, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", engine, seen
    finally:
        server.shutdown()
        thread.join(5)


@pytest.fixture
def service():
    with serving(Settings(task_secret="emulator-secret")) as (url, engine, _):
        yield url, engine


@pytest.fixture
def client(tasks_emulator):
    return build_tasks_client(tasks_emulator.host)


def wait_for(items: list, count: int, timeout: float = 10.0) -> list:
    deadline = time.monotonic() + timeout
    while len(items) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return items


def test_ensure_queue_is_idempotent(client):
    spec = QueueSpec("ensure-me")
    assert ensure_queue(client, PROJECT, LOCATION, spec) == "created"
    ensure_queue(client, PROJECT, LOCATION, spec)  # the emulator answers a repeat with the queue
    path = client.queue_path(PROJECT, LOCATION, "ensure-me")
    names = [q.name for q in client.list_queues(parent=f"projects/{PROJECT}/locations/{LOCATION}")]
    assert names.count(path) == 1


def test_the_emulator_posts_each_task_to_its_handler_at_its_eta(client, service):
    url, engine = service
    ensure_queue(client, PROJECT, LOCATION, QueueSpec("chain-dispatch"))
    queue = CloudTasksQueue(client, PROJECT, LOCATION, "chain-dispatch", url, "emulator-secret",
                            clock=SystemClock())
    eta = datetime.now(timezone.utc) + timedelta(seconds=1)
    tick = Task("tick-p-j-1.1-1", "tick", {"project": "p", "job": "j", "nonce": "1.1"}, eta)
    start = Task("start-p-j-inv-0-1-1", "start",
                 {"project": "p", "job": "j", "invocation": "inv", "event": 0, "attempt": 1}, eta)
    queue.enqueue_now([tick, start])
    arrived = wait_for(engine.handled, 2)
    assert sorted((t.kind, t.name) for t in arrived) == [("start", start.name), ("tick", tick.name)]
    assert {t.kind: t.payload for t in arrived} == {"tick": tick.payload, "start": start.payload}
    assert all(abs(t.eta - eta) < timedelta(milliseconds=1) for t in arrived)
    assert min(engine.arrived) >= eta  # never before its schedule time
    assert queue.counters["enqueues"] == 2


def test_tasks_without_the_secret_are_refused_and_never_reach_the_engine(client, service):
    url, engine = service
    ensure_queue(client, PROJECT, LOCATION, QueueSpec("chain-unsigned"))
    queue = CloudTasksQueue(client, PROJECT, LOCATION, "chain-unsigned", url, "a-wrong-secret",
                            clock=SystemClock())
    queue.enqueue_now([Task("tick-x", "tick", {"project": "p", "job": "j", "nonce": "n"},
                            datetime.now(timezone.utc))])
    time.sleep(1.0)  # the emulator retries a 403 again and again; none may get through
    assert engine.handled == []
    client.delete_queue(name=queue.queue_path)  # stops the emulator retrying it forever


def test_on_app_engine_an_app_engine_task_reaches_its_handler_admitted_by_app_engines_queue_header(
        tasks_emulator, client):
    """The emulator dispatches App Engine tasks to its --target-port, as App Engine would
    to the app, with X-AppEngine-QueueName. The task's secret is not the app's, so only
    that header (which App Engine strips from outside requests) can admit it."""
    ensure_queue(client, PROJECT, LOCATION, QueueSpec("chain-app-engine"))
    queue = CloudTasksQueue(client, PROJECT, LOCATION, "chain-app-engine", "", "not-the-apps-secret",
                            clock=SystemClock(), app_engine=AppEngineTarget("default"))
    tick = Task("tick-p-j-2.1-1", "tick", {"project": "p", "job": "j", "nonce": "2.1"}, datetime.now(timezone.utc))
    settings = Settings(task_secret="the-apps-secret", on_app_engine=True, gcp_project=PROJECT)
    try:
        with serving(settings, port=tasks_emulator.target_port) as (_, engine, seen):
            queue.enqueue_now([tick])
            arrived = wait_for(engine.handled, 1)
    finally:
        client.delete_queue(name=queue.queue_path)  # a refused task would be retried forever
    assert [(t.kind, t.name, t.payload) for t in arrived] == [("tick", tick.name, tick.payload)]
    assert seen[0]["X-Appengine-Queuename"] == queue.queue_path
    assert not any(name.startswith("X-Cloudtasks-") for name in seen[0])  # not an HTTP task


def test_the_queues_command_creates_the_chain_queue_and_can_run_again(tasks_emulator, client, monkeypatch, capsys):
    from cli import main

    monkeypatch.setenv("SUNDIAL_TASKS_EMULATOR_HOST", tasks_emulator.host)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    monkeypatch.setenv("SUNDIAL_TASKS_LOCATION", LOCATION)
    monkeypatch.setenv("SUNDIAL_TASKS_QUEUE", "chain-from-cli")
    path = f"projects/{PROJECT}/locations/{LOCATION}/queues/chain-from-cli"
    assert main(["queues"]) == 0
    assert main(["queues"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith(f"{path}: ")
    names = [q.name for q in client.list_queues(parent=f"projects/{PROJECT}/locations/{LOCATION}")]
    assert names.count(path) == 1


def test_the_queues_command_needs_a_project(monkeypatch, capsys):
    from cli import main

    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    assert main(["queues"]) == 2
    assert "GOOGLE_CLOUD_PROJECT" in capsys.readouterr().err
