"""serve's requeue loop on the cloud backend (engine/adapters/cloud/queue_watch.py) against
gcloud-tasks-emulator stopped and started again on the same port, empty as after a
SIGKILL: the watch sees it go and come back, and runs its repair once it is back."""

from __future__ import annotations

import threading
import time

import pytest

from engine.adapters.cloud.cloud_tasks_queue import CloudTasksQueue, build_tasks_client
from engine.adapters.cloud.queue_watch import QueueWatch
from engine.clock import SystemClock
from tests.support import emulators
from tests.support.emulators import TasksEmulator, free_port


def _checks_until(watch: QueueWatch, done, seconds: float) -> float | None:
    """Run the loop's check every second until `done()`; seconds it took, None if never."""
    started = time.monotonic()
    while time.monotonic() < started + seconds:
        watch.check()
        if done():
            return time.monotonic() - started
        time.sleep(1)
    return None


def test_the_watch_runs_its_repair_once_the_queue_answers_again(monkeypatch):
    port = free_port()
    monkeypatch.setattr(emulators, "free_port", lambda: port)  # every start on the same port
    emulator = TasksEmulator(target_port=9)
    if emulator.unavailable():
        pytest.skip(emulator.unavailable())
    queue = CloudTasksQueue(build_tasks_client(f"127.0.0.1:{port}"), "sundial-test", "us-central1", "sundial",
                            "http://127.0.0.1:9", "secret", clock=SystemClock())
    repairs: list[float] = []
    watch = QueueWatch(queue, lambda: repairs.append(time.monotonic()))
    emulator.start()
    try:
        assert _checks_until(watch, lambda: not watch.down, 10) is not None
        emulator.stop()
        # Back 4 s later, while the loop goes on looking every second (an outage shorter
        # than the client's own retries, which a probe must not ride out).
        back: list[float] = []
        restart = threading.Timer(4, lambda: (emulator.start(), back.append(time.monotonic())))
        restart.start()
        took = _checks_until(watch, lambda: bool(repairs), 25)
        restart.join()
    finally:
        emulator.stop()
    assert took is not None, "the watch never saw the queue go and come back"
    assert repairs[0] - back[0] < 3.5, "the repair did not run within seconds of the queue's return"
    assert len(repairs) == 1 and not watch.down
