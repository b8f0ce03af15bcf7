"""The pipeline's senders: a fixed set of threads, and more when a request waits too long.

Every request handed here belongs to an attempt already committed as starting, and the
watchdog issues such an attempt again once it has not been heard of for its attempt
timeout plus the start grace. A request stuck in a queue behind hung targets could
outlive that, and go out after its copy: so a request may wait at most `longest_wait`
(a fraction of the start grace). When the oldest one has waited longer, an extra thread
starts, and it leaves once nothing is waiting.

Letting requests queue at all is what keeps the burst fast: the step thread commits a
batch while the senders work through the previous one. Bounding the queue to the free
senders instead cost about a fifth of the throughput (docs/PERFORMANCE.md, "The send
pool's unbounded queue").

Stopping (`hurry`), nothing queued may wait behind requests still out: each queued piece
of work, told that the process stops, ends at once without sending, and an extra thread
starts for it as soon as it waits at all. `wait_idle` and `shutdown` take a deadline:
a request whose target is slow to answer is left to the restart's settling.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable


class SendPool:
    def __init__(self, threads: int, longest_wait: float, name: str = "sundial-send"):
        self.longest_wait, self.name = longest_wait, name
        self._queue: deque[tuple[float, Callable[..., object], tuple[Any, ...]]] = deque()
        self._ready = threading.Condition()
        self._running = 0  # pieces of work taken and not yet done
        self._closing = False
        self._closed = threading.Event()  # ends the supervisor, which never waits on _ready
        self._nudge = threading.Event()  # wakes the supervisor before its interval is up
        self.threads = threads
        self._threads: list[threading.Thread] = []
        self.extra_started = 0  # extra threads started so far (tests read it)
        self._supervisor = threading.Thread(target=self._supervise, name=f"{name}-watch", daemon=True)

    def start(self) -> None:
        self._threads = [self._spawn(extra=False, index=i) for i in range(self.threads)]
        self._supervisor.start()

    def submit(self, work: Callable[..., object], *args: Any) -> None:
        """Run `work(*args)` on a sender; `work` handles its own errors."""
        with self._ready:
            self._queue.append((time.monotonic(), work, args))
            self._ready.notify()

    def hurry(self) -> None:
        """Stopping: from now on an extra thread starts for work as soon as it waits at all."""
        self.longest_wait = 0.0
        self._nudge.set()

    def idle(self) -> bool:
        """Nothing waiting, nothing running."""
        with self._ready:
            return not self._queue and not self._running

    def wait_idle(self, until: float) -> bool:
        """Wait until nothing waits or runs, or time.monotonic() reaches `until`; whether idle."""
        while not self.idle():
            if time.monotonic() >= until:
                return False
            time.sleep(0.01)
        return True

    def shutdown(self, until: float | None = None) -> None:
        """Run everything submitted, then stop every thread; with `until` (a time.monotonic()
        instant) wait no longer than that: the threads left working are daemons."""
        with self._ready:
            self._closing = True
            self._ready.notify_all()
        self._closed.set()
        self._nudge.set()
        for thread in [self._supervisor, *self._threads]:
            thread.join(None if until is None else max(until - time.monotonic(), 0.0))

    def _spawn(self, extra: bool, index: int) -> threading.Thread:
        thread = threading.Thread(target=self._work, args=(extra,), daemon=True,
                                  name=f"{self.name}-{'extra-' if extra else ''}{index}")
        thread.start()
        return thread

    def _work(self, extra: bool) -> None:
        while True:
            with self._ready:
                while not self._queue:
                    if self._closing or extra:
                        return
                    self._ready.wait()
                _, work, args = self._queue.popleft()
                self._running += 1
            try:
                work(*args)
            finally:
                with self._ready:
                    self._running -= 1

    def _supervise(self) -> None:
        # It must not wait on _ready: a submit's notify() could wake it instead of a sender.
        while not self._closed.is_set():
            self._nudge.wait(max(self.longest_wait / 4, 0.01))
            self._nudge.clear()
            with self._ready:
                oldest = self._queue[0][0] if self._queue else None
            if oldest is not None and time.monotonic() - oldest > self.longest_wait:
                self.extra_started += 1
                thread = self._spawn(extra=True, index=self.extra_started)
                self._threads = [t for t in self._threads if t.is_alive()] + [thread]
