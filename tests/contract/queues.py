"""Cloud Tasks behind the Datastore store, in the contract suite: the product's
in-memory queue (engine/adapters/memory/queue.py), fed after each commit as the Cloud
Tasks adapter is (`enqueue_now`), and run by a test with its fake clock.

`sent` keeps every task the store handed over, duplicates included, so that a test
can tell "enqueued once" from "enqueued twice and deduplicated"; `fail_next` makes
that many `enqueue_now` calls raise, to test what a failing queue does.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Callable

from engine.adapters.local.dispatcher import InlineDispatcher
from engine.adapters.memory import MemoryTaskQueue
from engine.ports import Task

# As "now" for next_wake: only tasks no lease holds count, as when nothing runs.
EPOCH = datetime.fromtimestamp(0, timezone.utc)


class _At:
    def __init__(self, now: datetime):
        self.current = now

    def now(self) -> datetime:
        return self.current


class EtaQueue(MemoryTaskQueue):
    def __init__(self):
        super().__init__()
        self.sent: list[Task] = []
        self.fail_next = 0

    def enqueue_now(self, tasks: list[Task]) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise ConnectionError("injected: queue unavailable")
        for task in tasks:
            self.sent.append(task)
            self.add(task)

    def pending_names(self) -> list[str]:
        return self.names()

    def next_wake(self, now: datetime = EPOCH) -> datetime | None:
        return super().next_wake(now)

    def run_due(self, now: datetime, handle: Callable[[Task], object]) -> int:
        """Run every task due at `now`, in ETA order, the way a queue would: a task
        whose handler raises is handed back as the dispatcher hands it back."""
        return InlineDispatcher(self, handle, _At(now)).run_due_now()
