"""A clock for tests of the threaded embedded path: the system clock, set where a test wants it.

The dispatcher, its pipeline and the stager wait on the clock for real (the dispatcher
sleeps until the next task is due, the stager until a held request's time), so a fake
clock that stands still would stop them. This one runs at the real pace from wherever
the test sets it: a test imports its jobs, then sets the clock a moment short of the
instant it is about (an occurrence's time, a tick's) before the threads start, instead of
sleeping there. Moving it on while they run is for a waiter that looks again often
(a dispatcher with a short `max_sleep`); a wait already begun still lasts its real time.
"""

from __future__ import annotations

import math
import threading
from datetime import datetime, timedelta

from statemachine.durations import UTC


class SetClock:
    def __init__(self) -> None:
        self._shift = timedelta(0)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        return datetime.now(UTC) + self._shift

    def set(self, at: datetime) -> None:
        """From now on the clock reads `at`, and goes on at the real pace (forwards only:
        what the store holds was stamped by it)."""
        with self._lock:
            shift = at - datetime.now(UTC)
            assert shift >= self._shift, "the clock only moves forwards"
            self._shift = shift

    def forward(self, delta: timedelta) -> None:
        with self._lock:
            self._shift += delta

    def reading_at(self, real_seconds: float) -> datetime:
        """What the clock read at the real (time.time()) instant `real_seconds`."""
        return datetime.fromtimestamp(real_seconds, UTC) + self._shift

    def next_whole_second(self, after: timedelta = timedelta(0)) -> datetime:
        """The first whole second at least `after` from now, by this clock."""
        return datetime.fromtimestamp(math.ceil((self.now() + after).timestamp()), UTC)
