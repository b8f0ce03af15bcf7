"""A heartbeat that failed (a full disk) is tried again within a second, not a heartbeat
period later (app/bootstrap.py, `Liveness`): the first beat that succeeds once space is
back is what settles the attempts this process could not let out while it could not
write, so the jobs went on up to a period (5 s) after the fault ended."""

from __future__ import annotations

import time
from datetime import timedelta

from app.bootstrap import Liveness
from engine.ports import StoreError


class RegistryThatFailsFirst:
    """Only the registry's heartbeat: it fails `failures` times, then succeeds."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.beats: list[float] = []

    def heartbeat(self) -> None:
        self.beats.append(time.monotonic())
        if len(self.beats) <= self.failures:
            raise StoreError("sqlite: database or disk is full")

    def deregister(self) -> None:
        pass


def test_a_failed_heartbeat_is_tried_again_within_a_second_and_then_every_period():
    registry = RegistryThatFailsFirst(failures=1)
    liveness = Liveness(registry, None, timedelta(seconds=5))  # type: ignore[arg-type]
    liveness.start()  # the first beat, in start(): it fails
    try:
        time.sleep(2.5)
    finally:
        liveness.stop()
    assert len(registry.beats) == 2, f"beats at {[round(b - registry.beats[0], 2) for b in registry.beats]}"
    assert registry.beats[1] - registry.beats[0] < 1.5
