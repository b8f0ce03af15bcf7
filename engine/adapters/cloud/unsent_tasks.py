"""Cloud Tasks tasks whose creation failed, kept to be created again (cloud_tasks_queue.py).

An enqueue that fails leaves its job's chain broken (the commit before it stands). The
watchdog repairs such a chain, but only once its tick is late by the tick grace and the
watchdog runs (every minute from cron): a queue back after a 15 s outage left its chains
broken for about 30 s more. Kept here, the task itself is created again, under its own
name, by `serve`'s requeue loop within a second of the queue answering again: nothing
doubles (the name is the same; a copy that ran meanwhile is stale by its nonce).

Bounded: past `limit` tasks the oldest is dropped (logged), and the watchdog repairs its
chain as before; a process that stops loses what it kept the same way.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from google.cloud import tasks_v2

UNSENT_LIMIT = 10_000  # about 10 MB of tasks: an outage of minutes for thousands of jobs


class UnsentTasks:
    def __init__(self, limit: int = UNSENT_LIMIT) -> None:
        self.limit = limit
        self._tasks: OrderedDict[str, tasks_v2.Task] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, task: tasks_v2.Task) -> str | None:
        """Keep `task` (by its name); returns the name of one dropped to stay in bound."""
        with self._lock:
            self._tasks[task.name] = task
            self._tasks.move_to_end(task.name)
            if len(self._tasks) <= self.limit:
                return None
            dropped, _ = self._tasks.popitem(last=False)
            return dropped

    def oldest_first(self) -> list[tasks_v2.Task]:
        with self._lock:
            return list(self._tasks.values())

    def created(self, task: tasks_v2.Task) -> None:
        with self._lock:
            if self._tasks.get(task.name) is task:
                del self._tasks[task.name]

    def __len__(self) -> int:
        with self._lock:
            return len(self._tasks)
