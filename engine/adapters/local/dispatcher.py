"""The embedded dispatcher: runs due tasks from the SQLite queue on a thread pool.

It sleeps until the earliest task is due (or a transaction of this process
enqueues an earlier one), leases what is due, and runs each task through the
same handler the HTTP task endpoints call. Tasks enqueued by another process
are noticed within `max_sleep` at worst.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Callable

from engine.adapters.local.pipeline import TaskPipeline
from engine.adapters.local.sqlite_queue import LeasedTask, SqliteTaskQueue
from engine.logs import log_event
from engine.ports import Clock, RetryTask, Task
from engine.tasks import CHAIN_KINDS, TaskRunner

log = logging.getLogger("sundial.dispatcher")

LEASE_AHEAD = 4  # tasks leased per worker: the next ones wait in memory, not in SQLite
_NEVER = datetime.max.replace(tzinfo=timezone.utc)


def task_backoff(attempts: int) -> timedelta:
    """Wait before a task that raised runs again: 0.5 s doubling to 60 s."""
    return min(timedelta(milliseconds=500) * 2 ** min(attempts - 1, 10), timedelta(seconds=60))


class Dispatcher:
    def __init__(
        self,
        queue: SqliteTaskQueue,
        handle: Callable[[Task], object],
        clock: Clock,
        workers: int = 32,
        lease: timedelta = timedelta(seconds=30),
        max_sleep: timedelta = timedelta(seconds=1),
        runner: TaskRunner | None = None,
    ):
        """With `runner`, tick and start tasks take the batched path (pipeline.py);
        every other task, and every task without it, runs through `handle`."""
        self.queue, self.handle, self.clock = queue, handle, clock
        self.workers, self.lease, self.max_sleep = workers, lease, max_sleep
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._inflight: dict[int, LeasedTask] = {}
        self._done: list[int] = []  # finished tasks, deleted with the next lease
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._threads: list[threading.Thread] = []
        self._pipeline = None if runner is None else TaskPipeline(runner, workers, self._settle_pipelined)
        self._wake_at: datetime | None = None  # when the loop means to look; None: it is looking
        queue.store.enqueue_listeners.append(self._enqueued)

    def start(self) -> None:
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="sundial-task")
        if self._pipeline is not None:
            self._pipeline.start()
        for target, name in ((self._loop, "sundial-dispatch"), (self._renew_loop, "sundial-lease")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 10.0) -> None:
        self._stopped.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout)
        if self._pool is not None:  # started
            self._pool.shutdown(wait=True, cancel_futures=True)
            if self._pipeline is not None:
                self._pipeline.stop()  # what it never started is still in _inflight
        self._release_unstarted()

    def _release_unstarted(self) -> None:
        """Hand back the leased tasks no worker started, so that another process (or
        the next start) takes them now instead of when their leases run out."""
        with self._lock:
            unstarted, self._inflight = list(self._inflight.values()), {}
            done, self._done = self._done, []
        try:
            for item in unstarted:
                self.queue.retry(item.id, item.task.eta)
            self.queue.complete(done)
        except Exception as error:  # their leases run out anyway
            log_event(log, "releasing leases failed", error=repr(error))

    def _enqueued(self, eta: datetime) -> None:
        """A transaction of this process enqueued a task due at `eta`.

        Wake the loop only if it would otherwise look too late: in the steady state
        every tick enqueues the next one, and waking for each would cost a lease
        transaction per tick for nothing.
        """
        wake_at = self._wake_at
        if wake_at is None or eta < wake_at:
            self._wake.set()

    def _loop(self) -> None:
        while not self._stopped.is_set():
            self._wake.clear()
            self._wake_at = None  # while it works, anything enqueued wakes it again
            try:
                self._dispatch_due()
                timeout = self._sleep_seconds()
            except Exception as error:  # storage trouble: log, back off, keep going
                log_event(log, "dispatcher error", error=repr(error))
                timeout = self.max_sleep.total_seconds()
            self._wake.wait(timeout)

    def _dispatch_due(self) -> None:
        """Delete what finished and lease what is due, in one transaction, then submit.

        It leases a few tasks per worker ahead, so that workers find the next task
        waiting in memory; whatever is left waits for a worker to finish, which
        wakes the loop.
        """
        with self._lock:
            room = self.workers * LEASE_AHEAD - len(self._inflight)
            done, self._done = self._done, []
        try:
            leased = self.queue.lease_due(self.clock.now(), room, self.lease, done)
        except Exception:
            with self._lock:
                self._done = done + self._done  # try deleting them again next round
            raise
        with self._lock:
            self._inflight.update((item.id, item) for item in leased)
        for item in leased:
            if self._pipeline is not None and item.task.kind in CHAIN_KINDS:
                self._pipeline.submit(item)
            else:
                self._pool.submit(self._run, item)

    def _sleep_seconds(self) -> float:
        with self._lock:
            busy = len(self._inflight) >= self.workers * LEASE_AHEAD
        now = self.clock.now()
        wake_at = None if busy else self.queue.next_wake(now)
        longest = self.max_sleep.total_seconds()
        seconds = longest if wake_at is None else min(max((wake_at - now).total_seconds(), 0.0), longest)
        # Busy, it could take nothing new anyway: a worker wakes it when half are done.
        self._wake_at = _NEVER if busy else now + timedelta(seconds=seconds)
        return seconds

    def _run(self, item: LeasedTask) -> None:
        finished = False
        try:
            finished = self.run_task(item)
        finally:
            self._settled(item, finished)

    def _settle_pipelined(self, item: LeasedTask, error: BaseException | None) -> None:
        try:
            if error is not None:
                self._hand_back(item, error)
        finally:
            self._settled(item, error is None)

    def _settled(self, item: LeasedTask, finished: bool) -> None:
        with self._lock:
            self._inflight.pop(item.id, None)
            if finished:
                self._done.append(item.id)
            left = len(self._inflight)
        # Lease again once half the leased tasks are done, not after each one: every
        # lease is a write transaction. A throttled task's slot is freed only when
        # its task is deleted (by the next lease), so it wakes the loop at once.
        if left <= self.workers * LEASE_AHEAD // 2 or item.task.queue:
            self._wake.set()

    def run_task(self, item: LeasedTask) -> bool:
        """Run one leased task; True when it is done (the caller deletes it)."""
        try:
            self.handle(item.task)
        except Exception as error:
            self._hand_back(item, error)
            return False
        return True

    def _hand_back(self, item: LeasedTask, error: BaseException) -> None:
        """The task is to run again: when it asked to, or after a backoff."""
        if isinstance(error, RetryTask):
            self._settle_quietly(lambda: self.queue.retry(item.id, self.clock.now() + error.delay))
            return
        wait = task_backoff(item.attempts)
        log_event(log, "task failed", task=item.task.name, attempts=item.attempts,
                  retry_in_ms=int(wait.total_seconds() * 1000), error=repr(error))
        self._settle_quietly(lambda: self.queue.retry(item.id, self.clock.now() + wait))

    def _settle_quietly(self, settle: Callable[[], None]) -> None:
        # If even settling fails, the lease runs out and the task comes again.
        try:
            settle()
        except Exception as error:
            log_event(log, "task settle failed", error=repr(error))

    def _renew_loop(self) -> None:
        period = self.lease.total_seconds() / 3
        while not self._stopped.wait(period):
            with self._lock:
                ids = list(self._inflight)
            try:
                self.queue.renew(ids, self.clock.now() + self.lease)
            except Exception as error:
                log_event(log, "lease renewal failed", error=repr(error))

    def run_due_now(self) -> int:
        """Run every due task inline, in ETA order (for tests and tools); returns how many."""
        count = 0
        while True:
            leased = self.queue.lease_due(self.clock.now(), 100, self.lease)
            if not leased:
                return count
            for item in leased:
                if self.run_task(item):
                    self.queue.complete([item.id])
                count += 1
