"""Running due tasks one by one on the caller's thread (`InlineDispatcher`, for tests and
tools that step a fake clock), and handing a task back to run again (`hand_back`, the
threaded dispatcher's way too, dispatcher.py)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Callable

from engine.logs import log_event
from engine.ports import Clock, LeasedTask, RetryTask, StoreError, Task, TaskQueue
from engine.retry import STORAGE_BACKOFF, TASK_BACKOFF

log = logging.getLogger("sundial.dispatcher")

LEASE = timedelta(seconds=30)


def hand_back(queue: TaskQueue, clock: Clock, item: LeasedTask, error: BaseException) -> None:
    """The task is to run again: when it asked to (RetryTask), after STORAGE_BACKOFF when
    storage failed it, or else after TASK_BACKOFF. If even that fails, the lease runs out
    and the task comes again."""
    if isinstance(error, RetryTask):
        wait = error.delay
    else:
        backoff = STORAGE_BACKOFF if isinstance(error, StoreError) else TASK_BACKOFF
        wait = backoff.after(item.attempts)
        log_event(log, "task failed", task=item.task.name, attempts=item.attempts,
                  retry_in_ms=int(wait.total_seconds() * 1000), error=repr(error))
    try:
        queue.retry(item.id, clock.now() + wait, item.attempts)
    except Exception as settle_error:
        log_event(log, "task settle failed", error=repr(settle_error))


class InlineDispatcher:
    """Runs due tasks on the caller's thread, one by one, through `handle` (for tests
    and tools that step a fake clock). A task whose handler raises is handed back
    as the threaded dispatcher hands it back."""

    def __init__(self, queue: TaskQueue, handle: Callable[[Task], object], clock: Clock,
                 lease: timedelta = LEASE):
        self.queue, self.handle, self.clock, self.lease = queue, handle, clock, lease

    def run_task(self, item: LeasedTask) -> bool:
        """Run one leased task; True when it is done (the caller deletes it)."""
        try:
            self.handle(item.task)
        except Exception as error:
            hand_back(self.queue, self.clock, item, error)
            return False
        return True

    def run_due_now(self) -> int:
        """Run every due task, in ETA order; returns how many ran."""
        count = 0
        while True:
            leased = self.queue.lease_due(self.clock.now(), 100, self.lease)
            if not leased:
                return count
            for item in leased:
                if self.run_task(item):
                    self.queue.complete([item.id])
                count += 1
