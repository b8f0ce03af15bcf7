"""Cloud Tasks down, then back (engine/adapters/cloud/cloud_tasks_queue.py): an enqueue
waits a bounded time for it, in all, so an API write never hangs on the queue; what
failed is kept and created again by `resend_unsent` (serve's requeue loop) as soon as the
queue answers, under its own name. Real gRPC: nothing listening on a port, then
gcloud-tasks-emulator started on that very port."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

import pytest

from config.settings import Settings
from engine.adapters.cloud.cloud_tasks_queue import ENQUEUE_BUDGET, CloudTasksQueue, build_tasks_client
from engine.clock import SystemClock
from engine.ports import Task
from tests.cloud.test_cloud_tasks_emulator import serving, wait_for
from tests.support import emulators
from tests.support.emulators import TasksEmulator, free_port

PROJECT, LOCATION, QUEUE = "sundial-test", "us-central1", "sundial"  # the emulator's default queue
SECRET = "outage-secret"


def _ticks(count: int) -> list[Task]:
    eta = datetime.now(timezone.utc)
    return [Task(f"tick-p-j{i}-1.1-1", "tick", {"project": "p", "job": f"j{i}", "nonce": "1.1"}, eta)
            for i in range(count)]


def _timed_enqueue(queue: CloudTasksQueue, tasks: list[Task], most: float) -> float | None:
    """Seconds enqueue_now took, or None if it had not returned after `most` seconds."""
    took: list[float] = []

    def run() -> None:
        started = time.monotonic()
        queue.enqueue_now(tasks)
        took.append(time.monotonic() - started)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(most)
    return took[0] if took else None


def test_an_enqueue_while_the_queue_is_down_returns_within_its_budget_and_its_tasks_follow_when_it_is_back(
        monkeypatch):
    # Before: each task was retried for 30 s (an API :resume hung over 15 s in a chaos
    # trial), and a chain whose enqueue failed waited for the watchdog.
    port = free_port()
    with serving(Settings(task_secret=SECRET)) as (url, engine, _):
        queue = CloudTasksQueue(build_tasks_client(f"127.0.0.1:{port}"), PROJECT, LOCATION, QUEUE, url, SECRET,
                                clock=SystemClock())
        tasks = _ticks(3)
        took = _timed_enqueue(queue, tasks, ENQUEUE_BUDGET + 3)
        assert took is not None and took < ENQUEUE_BUDGET + 2, f"enqueue_now took {took} s with the queue down"
        assert queue.counters["enqueue_failures"] == 3 and len(queue.unsent) == 3
        assert queue.resend_unsent() == 0  # still down: kept

        monkeypatch.setattr(emulators, "free_port", lambda: port)  # the queue comes back where it was
        emulator = TasksEmulator(target_port=int(url.rsplit(":", 1)[1]))
        if emulator.unavailable():
            pytest.skip(emulator.unavailable())
        emulator.start()
        back = time.monotonic()
        try:
            while queue.unsent and time.monotonic() < back + 10:
                queue.resend_unsent()  # as serve's requeue loop does, every second
                time.sleep(1)
            created_after = time.monotonic() - back
            arrived = wait_for(engine.handled, 3)
        finally:
            emulator.stop()
    assert len(queue.unsent) == 0 and created_after <= 3.5, f"created {created_after:.1f} s after the queue was back"
    assert sorted(task.name for task in arrived) == sorted(task.name for task in tasks)
