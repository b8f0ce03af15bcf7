"""A queue a stage of the dispatcher's pipeline (pipeline.py) drains in batches."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Generic, TypeVar

Item = TypeVar("Item")

MAX_BATCH = 64  # tasks per transaction: enough to spread its fixed cost, short enough to start sending soon


class Inbox(Generic[Item]):
    """A queue a stage drains in batches; `close` ends its stage once it is empty.

    With `linger`, a take that finds fewer than `most` items waits up to that long
    for more: one transaction then carries several results where a steady trickle
    would have given each its own (BEGIN, COMMIT, the write lock and a wakeup of the
    stage's thread per result). Only the record stage lingers; nothing waits for it
    to be sent."""

    def __init__(self, linger: float = 0.0, most: int = MAX_BATCH) -> None:
        self._items: deque[Item] = deque()
        self._ready = threading.Condition()
        self._closed = False
        self._linger, self._most = linger, most

    def put(self, item: Item) -> None:
        with self._ready:
            self._items.append(item)
            # A lingering taker needs waking only for the first item and a full batch.
            if not self._linger or len(self._items) in (1, self._most):
                self._ready.notify()

    def take(self) -> list[Item] | None:
        """Wait for at least one item (and, lingering, for a full batch a while);
        None once closed and empty."""
        with self._ready:
            while not self._items and not self._closed:
                self._ready.wait()
            if self._linger and not self._closed and len(self._items) < self._most:
                deadline = time.monotonic() + self._linger
                while len(self._items) < self._most and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._ready.wait(left)
            count = min(self._most, len(self._items))
            return [self._items.popleft() for _ in range(count)] if count else None

    def close(self) -> list[Item]:
        """Stop taking; returns what was never taken."""
        with self._ready:
            self._closed = True
            left, self._items = list(self._items), deque()
            self._ready.notify_all()
            return left

    def finish(self) -> None:
        """Let the stage drain what is there, then end."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()
