"""The simulation's one clock: the engine's wall clock and its monotonic clock read
the same simulated time, so a process that stalls past a lease sees it run out."""

from __future__ import annotations

from datetime import datetime, timedelta

from statemachine.durations import UTC

START = datetime(2026, 3, 1, 0, 0, tzinfo=UTC)


class SimClock:
    def __init__(self, start: datetime = START):
        self.current = start
        self._epoch = start

    def now(self) -> datetime:
        return self.current

    def monotonic(self) -> float:
        return (self.current - self._epoch).total_seconds()

    def advance(self, by: timedelta) -> None:
        self.current += by

    def advance_to(self, when: datetime) -> None:
        self.current = max(self.current, when)

    def sleep(self, seconds: float) -> None:
        """A wait in the engine (a staged request's time) moves the clock on."""
        self.current += timedelta(seconds=seconds)
