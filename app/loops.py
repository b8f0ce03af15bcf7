"""The periodic loops of `serve` (config import, watchdog, clean-up, heartbeat)."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Callable

from engine.logs import log_event

log = logging.getLogger("sundial.serve")


class PeriodicLoop:
    """Runs `work` now and then every `period` on a thread, logging failures.

    `first_in_start`: the first run happens in `start()` itself, so that what it does
    (the first config import) is done before the server answers anyone: a project whose
    file is in the configs directory exists from the first request on. `after_failure`:
    the wait after a run that raised, when it should be shorter than `period`.
    """

    def __init__(self, name: str, period: timedelta, work: Callable[[], object],
                 first_in_start: bool = False, after_failure: timedelta | None = None):
        self.name, self.period, self.work = name, period, work
        self.first_in_start = first_in_start
        self.after_failure = period if after_failure is None else min(after_failure, period)
        self._failed = False
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sundial-{name}", daemon=True)

    def start(self) -> None:
        if self.first_in_start:
            self._once()
        self._thread.start()

    def halt(self) -> None:
        """No run starts after this one (a run under way goes on: see `join`)."""
        self._stopped.set()

    def stop(self, until: float | None = None) -> None:
        """Halt, and wait for a run under way until time.monotonic() reads `until` (None:
        10 s at most). The thread is a daemon: a run still going then (a watchdog run
        has a budget of its own) ends with the process, which its transactions allow."""
        self.halt()
        self._thread.join(10.0 if until is None else max(until - time.monotonic(), 0.0))

    def _run(self) -> None:
        if self.first_in_start:
            self._stopped.wait(self._wait())
        while not self._stopped.is_set():
            self._once()
            self._stopped.wait(self._wait())

    def _wait(self) -> float:
        return (self.after_failure if self._failed else self.period).total_seconds()

    def _once(self) -> None:
        try:
            self.work()
        except Exception as error:  # a bad moment of storage must not end the loop
            self._failed = True
            log_event(log, f"{self.name} failed", error=repr(error))
        else:
            self._failed = False
