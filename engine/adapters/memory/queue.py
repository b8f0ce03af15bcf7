"""The in-memory task queue: the TaskQueue port (engine/ports.py) with Cloud Tasks'
semantics, for one process.

What it models: a task's name makes enqueueing idempotent while the task is in the
queue (pending or leased); a task runs no earlier than its schedule time (its ETA);
delivery is at least once: a leased task that is neither completed nor handed back
before its lease runs out is due again, and a lease carries a fencing count
(`LeasedTask.attempts`) so that a dispatcher whose lease ran out cannot settle a
task another took since; a throttle's queue (`PROJECT/THROTTLE`) never has more
unexpired leases than the throttle's `max_in_flight`, as a Cloud Tasks queue's
max concurrent dispatches. With `marks_retries`, a task leased again after a lease
that did not complete it comes with `Task.retried` set, as Cloud Tasks' retry count
tells its handler.

What it does not: Cloud Tasks keeps a task's name taken for a while after the task
ran (a tombstone); here, as on the embedded queue, a name is free again once its task
is done, which is all the port promises. No dispatch rate, no HTTP, no persistence.
Time comes only from the callers' `now`; task ids are a counter.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Callable

from engine.ports import LeasedTask, Task


@dataclass
class _Queued:
    task: Task
    eta: datetime
    attempts: int = 0  # leases taken so far: each one counts one more
    lease_until: datetime | None = None

    def free_at(self, now: datetime) -> bool:
        return self.lease_until is None or self.lease_until <= now


class MemoryTaskQueue:
    """Tasks by id, each with its ETA, lease and count of leases."""

    def __init__(self, throttle_limit: Callable[[str], int | None] = lambda queue: None,
                 marks_retries: bool = False):
        """`throttle_limit(queue)`: how many leases of a throttle's queue may run at once
        (None: unthrottled). `marks_retries`: set `Task.retried` on a task leased again."""
        self._throttle_limit = throttle_limit
        self._marks_retries = marks_retries
        self._lock = threading.Lock()
        self._tasks: dict[int, _Queued] = {}
        self._ids: dict[str, int] = {}  # name -> id, while the task is in the queue
        self._next_id = 1

    # --- fed by the store's commits ---------------------------------------------------

    def add(self, task: Task) -> bool:
        """Queue the task, unless one of its name is in the queue; True if queued."""
        with self._lock:
            if task.name in self._ids:
                return False
            task_id, self._next_id = self._next_id, self._next_id + 1
            self._tasks[task_id] = _Queued(task, task.eta)
            self._ids[task.name] = task_id
            return True

    def remove(self, name: str) -> bool:
        """Take the named task off the queue unless a lease holds it; True if removed."""
        with self._lock:
            task_id = self._ids.get(name)
            if task_id is None or self._tasks[task_id].lease_until is not None:
                return False
            self._drop(task_id)
            return True

    def names(self) -> list[str]:
        """The names of the tasks in the queue, leased or not, sorted."""
        with self._lock:
            return sorted(self._ids)

    def clear(self) -> None:
        """Lose every task: a fault to simulate (what the watchdog repairs)."""
        with self._lock:
            self._tasks.clear()
            self._ids.clear()

    def shift_etas(self, by: timedelta) -> None:
        """Move every task's ETA by `by`: a fault to simulate (a negative `by` is a
        queue handing tasks over early, as Cloud Tasks' inexact ETA or another
        machine's clock would)."""
        with self._lock:
            for queued in self._tasks.values():
                queued.eta += by

    def _drop(self, task_id: int) -> None:
        queued = self._tasks.pop(task_id, None)
        if queued is not None:
            del self._ids[queued.task.name]

    # --- the TaskQueue port -------------------------------------------------------------

    def lease_due(
        self, now: datetime, limit: int, lease: timedelta, done: list[int] | None = None
    ) -> list[LeasedTask]:
        limits = self._limits()
        with self._lock:
            for task_id in done or []:
                self._drop(task_id)
            rooms = self._rooms(now, limits)
            due = sorted((queued.eta, task_id) for task_id, queued in self._tasks.items()
                         if queued.eta <= now and queued.free_at(now))
            leased: list[LeasedTask] = []
            for _, task_id in due:
                if len(leased) >= limit:
                    break
                queued = self._tasks[task_id]
                room = rooms.get(queued.task.queue)
                if room is not None and room <= 0:
                    continue
                if room is not None:
                    rooms[queued.task.queue] = room - 1
                leased.append(self._lease(task_id, queued, now + lease))
            return leased

    def _lease(self, task_id: int, queued: _Queued, until: datetime) -> LeasedTask:
        queued.attempts += 1
        queued.lease_until = until
        task = replace(queued.task, eta=queued.eta)
        if self._marks_retries and queued.attempts > 1:
            task = replace(task, retried=True)
        return LeasedTask(task_id, task, queued.attempts)

    def _limits(self) -> dict[str, int | None]:
        """The limit of each throttle's queue holding tasks; read outside the queue's
        lock, since the tables' lock is taken before it by a committing store."""
        with self._lock:
            queues = {queued.task.queue for queued in self._tasks.values() if queued.task.queue}
        return {queue: self._throttle_limit(queue) for queue in queues}

    def _rooms(self, now: datetime, limits: dict[str, int | None]) -> dict[str, int]:
        """How many more leases each throttled queue may hand out at `now`."""
        rooms = {queue: limit for queue, limit in limits.items() if limit is not None}
        for queued in self._tasks.values():
            if queued.task.queue in rooms and not queued.free_at(now):
                rooms[queued.task.queue] -= 1
        return rooms

    def complete(self, task_ids: list[int]) -> None:
        with self._lock:
            for task_id in task_ids:
                self._drop(task_id)

    def retry(self, task_id: int, eta: datetime, attempts: int | None = None) -> None:
        with self._lock:
            queued = self._tasks.get(task_id)
            if queued is not None and attempts in (None, queued.attempts):
                queued.eta, queued.lease_until = eta, None

    def renew(self, tasks: list[LeasedTask], until: datetime) -> list[int]:
        renewed = []
        with self._lock:
            for item in tasks:
                queued = self._tasks.get(item.id)
                if queued is not None and queued.attempts == item.attempts:
                    queued.lease_until = until
                    renewed.append(item.id)
        return renewed

    def next_wake(self, now: datetime) -> datetime | None:
        """The earliest ETA of a task no lease holds, or the earliest lease to run out."""
        with self._lock:
            times = [queued.eta if queued.free_at(now) else queued.lease_until
                     for queued in self._tasks.values()]
        return min((time for time in times if time is not None), default=None)

    def pending(self) -> int:
        with self._lock:
            return len(self._tasks)
