"""An in-memory stand-in for Cloud Tasks behind the Datastore store: tasks wait in
ETA order until a test runs the due ones with its fake clock.

Like Cloud Tasks, a name that is still pending is not queued twice. `sent`
keeps every task the store handed over, duplicates included, so that a test
can tell "enqueued once" from "enqueued twice and deduplicated".
"""

from __future__ import annotations

import heapq
import itertools
import threading
from datetime import datetime
from typing import Callable

from engine.ports import RetryTask, Task
from engine.retry import TASK_BACKOFF  # as the embedded dispatcher waits after a handler raised


class EtaQueue:
    def __init__(self):
        self.sent: list[Task] = []
        self.fail_next = 0  # enqueue_now calls that raise, to test what a failing queue does
        self._heap: list[tuple[datetime, int, Task, int]] = []
        self._pending: set[str] = set()
        self._order = itertools.count()
        self._lock = threading.Lock()

    def enqueue_now(self, tasks: list[Task]) -> None:
        with self._lock:
            if self.fail_next:
                self.fail_next -= 1
                raise ConnectionError("injected: queue unavailable")
            for task in tasks:
                self.sent.append(task)
                self._push(task, task.eta, 0)

    def _push(self, task: Task, eta: datetime, attempts: int) -> None:
        if task.name in self._pending:
            return
        self._pending.add(task.name)
        heapq.heappush(self._heap, (eta, next(self._order), task, attempts))

    def pending_names(self) -> list[str]:
        with self._lock:
            return sorted(self._pending)

    def next_wake(self) -> datetime | None:
        with self._lock:
            return self._heap[0][0] if self._heap else None

    def run_due(self, now: datetime, handle: Callable[[Task], object]) -> int:
        """Run every task due at `now`, in ETA order, the way a queue would."""
        ran = 0
        while True:
            with self._lock:
                if not self._heap or self._heap[0][0] > now:
                    return ran
                eta, _, task, attempts = heapq.heappop(self._heap)
                self._pending.discard(task.name)
            ran += 1
            try:
                handle(task)
            except RetryTask as retry:
                with self._lock:
                    self._push(task, now + retry.delay, attempts + 1)
            except Exception:
                with self._lock:
                    self._push(task, now + TASK_BACKOFF.after(attempts + 1), attempts + 1)
