"""When the embedded dispatcher (dispatcher.py) means to look at the queue next, and
what wakes it sooner."""

from __future__ import annotations

import threading
from datetime import datetime


class Wakeup:
    """When the dispatch loop means to look at the queue next, and what wakes it sooner.

    It is built before the store, whose `on_enqueue` hook is `task_enqueued`
    (app/bootstrap.py), and handed to the dispatcher.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._look_at: datetime | None = None  # None: the loop is looking now

    def task_enqueued(self, eta: datetime) -> None:
        """A transaction of this process enqueued a task due at `eta`.

        Wake the loop only if it would otherwise look too late: in the steady state
        every tick enqueues the next one, and waking for each would cost a lease
        transaction per tick for nothing.
        """
        look_at = self._look_at
        if look_at is None or eta < look_at:
            self._event.set()

    def ring(self) -> None:
        """Wake the loop now."""
        self._event.set()

    def looking(self) -> None:
        """The loop looks now: anything enqueued from here on wakes it again."""
        self._event.clear()
        self._look_at = None

    def plan(self, look_at: datetime | None) -> None:
        """The loop means to look next at `look_at` (None: it keeps looking)."""
        self._look_at = look_at

    def sleep(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True if something woke the loop before."""
        return self._event.wait(seconds)
