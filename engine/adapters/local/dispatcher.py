"""The embedded dispatcher: runs due tasks from the queue on threads of its own.

It sleeps until the earliest task is due (or a transaction of this process
enqueues an earlier one), leases what is due, and runs each task: tick and start
tasks through the batched pipeline (pipeline.py), every other kind through the
engine's task handler, the one the HTTP task endpoints call. Tasks enqueued by
another process are noticed within `max_sleep` at worst: it looks at least that
often, and a look finds what another process committed. With the database's change
counter (`version`, SQLite's PRAGMA data_version), a look that `max_sleep` brings
while no other connection has committed anything and the earliest task is not due
yet is skipped: an idle server then reads one counter a second instead of taking
the write lock to lease nothing.

`InlineDispatcher` (inline.py) runs due tasks one by one on the caller's thread, through
one handler, for tests and tools that step a fake clock.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Callable

from engine.adapters.local.early_ticks import released_at
from engine.adapters.local.inline import LEASE, InlineDispatcher, hand_back
from engine.adapters.local.pipeline import TaskPipeline
from engine.adapters.local.sqlite_queue import Share, SqliteTaskQueue, in_share
from engine.adapters.local.staged_sends import StagingParts
from engine.adapters.local.tuning import DEFAULT_LOCAL_TUNING, LocalTuning
from engine.adapters.local.wakeup import Wakeup
from engine.collector import BulkPause
from engine.leases import NEVER, Monotonic, give_up, held_until
from engine.logs import log_event
from engine.metrics import Metrics
from engine.ports import Clock, LeasedTask, Task
from engine.tasks import CHAIN_KINDS, TaskRunner

log = logging.getLogger("sundial.dispatcher")

_NEVER = datetime.max.replace(tzinfo=timezone.utc)

# Wakeup: where app/bootstrap.py finds it; InlineDispatcher, hand_back: where tests and tools do.
__all__ = ["Dispatcher", "InlineDispatcher", "Wakeup", "hand_back"]


class Dispatcher:
    def __init__(
        self,
        queue: SqliteTaskQueue,
        runner: TaskRunner,
        clock: Clock,
        wakeup: Wakeup,
        workers: int = 32,
        lease: timedelta = LEASE,
        max_sleep: timedelta = timedelta(seconds=1),
        metrics: Metrics | None = None,
        version: Callable[[], int] | None = None,
        share: Callable[[], Share | None] = lambda: None,
        staging: StagingParts | None = None, monotonic: Monotonic = time.monotonic,
        tuning: LocalTuning = DEFAULT_LOCAL_TUNING,
    ):
        """`version`: changes whenever another connection commits to the queue's database
        (None: every look leases). `share`: the part of the chain queue this process takes
        first (sqlite_queue.Share; None: all). `staging`: the staged requests' parts (None:
        none written ahead); `monotonic`: leases' clock; `tuning`: its knobs (tuning.py)."""
        self.queue, self.clock, self.wakeup, self._tuning = queue, clock, wakeup, tuning
        self._version, self._share = version, share
        # Leased chain tasks not due yet: (eta, id, task), handed to the pipeline at their time.
        self._ahead: list[tuple[datetime, int, LeasedTask]] = []
        self._look_by = 0.0  # time.monotonic() of the next planned look
        self._starved = False  # the last look filled every free slot: finishing tasks wake the loop
        # What the last look saw: the counter before it (None: look again), and when
        # its earliest task becomes takeable (nothing can be due before, unless the
        # counter moves or this process enqueues something, which rings the wakeup).
        self._seen: int | None = None
        self._quiet_until = _NEVER
        self._handle: Callable[[Task], object] = runner.handle  # every kind but tick and start
        self.workers, self.lease, self.max_sleep = workers, lease, max_sleep
        self._stopped = threading.Event()
        self._inflight: dict[int, LeasedTask] = {}
        self._done: list[int] = []  # finished tasks, deleted with the next lease
        # Task id -> the monotonic instant up to which this process holds its lease
        # (engine/leases.py): past it, another process may have taken the task.
        self._until: dict[int, float] = {}
        self._monotonic = monotonic
        self._last_round: float | None = None  # self._monotonic() at the end of the loop's latest round
        self._metrics = metrics if metrics is not None else Metrics()  # counts the leases it gives up
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._running: set[futures.Future[None]] = set()  # the pool's tasks not yet done
        self._released = False  # stopped: every lease was handed back (_release_unstarted)
        self._threads: list[threading.Thread] = []
        self._pipeline = TaskPipeline(runner, workers, self._settle, self._task_until, self._room_freed,
                                      owns=lambda project, job_id: in_share(self._share(), project, job_id),
                                      staging=staging or StagingParts(clock), tuning=tuning)
        self._collector = BulkPause()

    def start(self) -> None:
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="sundial-task")
        self._pipeline.start()
        for target, name in ((self._loop, "sundial-dispatch"), (self._renew_loop, "sundial-lease")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, until: float | None = None) -> None:
        """Take nothing more, send nothing more (pipeline.py), and wait for what is out
        until time.monotonic() reads `until` (None: as long as the targets' timeouts
        take); then hand back every task still leased. A task whose work is still out
        then is handed back too: its run again finds its step done, and the attempt
        it sent is settled by whoever starts next (engine/interruptions.py)."""
        self._stopped.set()
        self.wakeup.ring()
        for thread in self._threads:
            thread.join(10.0 if until is None else max(until - time.monotonic(), 0.0))
        if self._pool is not None:  # started
            self._pool.shutdown(wait=False, cancel_futures=True)  # (a cancelled task is still in _inflight)
            self._pipeline.stop(until)
            with self._lock:
                running = list(self._running)
            futures.wait(running, None if until is None else max(until - time.monotonic(), 0.0))
        self._release_unstarted()
        if self._pool is not None:
            self._pipeline.give_back_unsent()  # after the tasks that began them are gone
        self._collector.update(False, self._monotonic())

    def _release_unstarted(self) -> None:
        """Hand back the leased tasks no worker started (or finished), so that another
        process (or the next start) takes them now instead of when their leases run out.
        From here on this process holds none: what still finishes is given up."""
        with self._lock:
            now = self._monotonic()
            self._ahead = []  # (in _inflight too)
            unstarted, self._inflight = [i for i in self._inflight.values() if self._held(i.id, now)], {}
            done, self._done = [i for i in self._done if self._held(i, now)], []
            self._until, self._released = {}, True
        try:
            for item in unstarted:
                self.queue.retry(item.id, item.task.eta, item.attempts)
            self.queue.complete(done)
        except Exception as error:  # their leases run out anyway
            log_event(log, "releasing leases failed", error=repr(error))

    def _loop(self) -> None:
        rung = True
        while not self._stopped.is_set():
            try:
                # A wake only to hand held tasks over keeps the plan (and the wakeup's
                # event): clearing it there would have every enqueue ring the loop.
                if rung or time.monotonic() >= self._look_by:
                    self.wakeup.looking()
                    self._look(rung)
                timeout = min(self._release_due(), max(self._look_by - time.monotonic(), 0.0))
            except Exception as error:  # storage trouble: log, back off, keep going
                log_event(log, "dispatcher error", logging.ERROR, error=repr(error))
                self._seen, timeout = None, self.max_sleep.total_seconds()
                self._look_by = time.monotonic() + timeout
                self.wakeup.plan(None)
            else:
                self._last_round = self._monotonic()
            rung = self.wakeup.sleep(timeout)

    def seconds_since_round(self) -> float | None:
        """Since the dispatch loop last went round without a storage error (None: not yet)."""
        last = self._last_round
        return None if last is None else self._monotonic() - last

    def _look(self, rung: bool) -> None:
        """Lease what is due (unless nothing can have changed) and plan the next look."""
        if rung or not self._unchanged():
            self._seen = self._version() if self._version is not None else None
            # A ring is this process's own news (a task it enqueued for sooner than the
            # plan, a full batch half done): its look takes due tasks of any share, or a
            # job run from the API would wait for the takeover when another process's.
            self._dispatch_due(None if rung else self._share())
            timeout = self._sleep_seconds()
        else:  # neither the lease nor the reads of next_wake: they would find the same
            timeout = self._sleep_until(self.clock.now())
        self._look_by = time.monotonic() + timeout

    def _release_due(self) -> float:
        """Hand the held tasks that are due to the pipeline; the seconds until the next is."""
        now = self.clock.now()
        due = []
        with self._lock:
            while self._ahead and self._ahead[0][0] <= now:
                due.append(heapq.heappop(self._ahead)[2])
            first = self._ahead[0][0] if self._ahead else None
        for item in due:
            self._submit(item)
        if first is None:
            return self.max_sleep.total_seconds()
        wait = (first - now).total_seconds()
        grain = self._tuning.handover_grain.total_seconds()
        return min(wait + (-first.timestamp()) % grain, self.max_sleep.total_seconds())

    def _unchanged(self) -> bool:
        """Whether a look now would find what the last one found: no other connection
        committed since, nothing of this process's is pending, no task is due yet.
        (A ring that `looking()` cleared right after a timeout is not lost: it follows
        the commit of the enqueue, which moved the counter first.)"""
        if self._seen is None or self._version is None:
            return False
        with self._lock:
            pending = bool(self._inflight or self._done)
        if pending or self.clock.now() >= self._quiet_until:
            return False
        return self._version() == self._seen

    def _dispatch_due(self, share: Share | None) -> None:
        """Delete what finished and lease what is due, in one transaction, then submit.

        It leases a few tasks per worker ahead, so that workers find the next task
        waiting in memory; whatever is left waits for a worker to finish, which
        wakes the loop.
        """
        assert self._pool is not None, "start() first"
        with self._lock:
            room = self.workers * self._tuning.leased_per_worker - self._working()
            self._starved = room <= 0
            taken = self._monotonic()
            # A finished task whose lease ran out since is not ours to delete any more.
            done, self._done = [i for i in self._done if self._held(i, taken)], []
        try:
            now = self.clock.now()
            leased = self.queue.lease_due(now, room, self.lease, done, self._tuning.lease_lookahead, share)
        except Exception:
            with self._lock:
                self._done = done + self._done  # try deleting them again next round
            raise
        with self._lock:
            for task_id in done:
                self._until.pop(task_id, None)
            self._inflight.update((item.id, item) for item in leased)
            self._collector.update(len(self._inflight) >= self._tuning.burst_tasks, taken)
            self._until.update((item.id, held_until(taken, self.lease)) for item in leased)
            self._starved = self._starved or len(leased) >= room
            due = []
            for item in leased:
                release = released_at(item.task, self._tuning.early_grain)
                if release > now:  # leased ahead: held until its time
                    heapq.heappush(self._ahead, (release, item.id, item))
                else:
                    due.append(item)
        for item in due:
            self._submit(item)

    def _submit(self, item: LeasedTask) -> None:
        assert self._pool is not None, "start() first"
        if item.task.kind in CHAIN_KINDS:
            self._pipeline.submit(item)
            return
        future = self._pool.submit(self._run, item)
        with self._lock:
            self._running.add(future)
        future.add_done_callback(self._ran)

    def _ran(self, future: futures.Future[None]) -> None:
        with self._lock:
            self._running.discard(future)

    def _sleep_seconds(self) -> float:
        with self._lock:
            busy = self._working() >= self.workers * self._tuning.leased_per_worker
        now = self.clock.now()
        if busy:  # it could take nothing new anyway: a worker wakes it when half are done
            self._quiet_until = now
            self.wakeup.plan(_NEVER)
            return self.max_sleep.total_seconds()
        wake = self.queue.next_wake(now, self._share())
        # A chain task is leased up to lease_lookahead early: look when the earliest is
        # half that from due, so that each look takes at least half a window's worth.
        self._quiet_until = _NEVER if wake is None else wake - self._tuning.lease_lookahead / 2
        return self._sleep_until(now)

    def _sleep_until(self, now: datetime) -> float:
        """Until the earliest task becomes takeable, `max_sleep` at most."""
        seconds = min(max((self._quiet_until - now).total_seconds(), 0.0), self.max_sleep.total_seconds())
        self.wakeup.plan(now + timedelta(seconds=seconds))
        return seconds

    def _run(self, item: LeasedTask) -> None:
        outcome: BaseException | None = RuntimeError("the task's handler did not return")
        try:
            self._handle(item.task)
            outcome = None
        except Exception as error:
            outcome = error
        finally:
            self._settle(item, outcome)

    def _settle(self, item: LeasedTask, error: BaseException | None) -> None:
        """The task is done (error None: deleted with the next lease) or is to run again;
        or, its lease having run out, it is given up: neither deleted nor handed back, it
        belongs to whoever leased it since (or to the next lease)."""
        with self._lock:
            held = self._held(item.id, self._monotonic())
        try:
            if not held:
                give_up(log, self._metrics, "task", "task", task=item.task.name, error=repr(error))
            elif error is not None:
                hand_back(self.queue, self.clock, item, error)
        finally:
            with self._lock:
                self._inflight.pop(item.id, None)
                if error is None and held:
                    self._done.append(item.id)
                else:
                    self._until.pop(item.id, None)
                left = self._working()
                if len(self._inflight) < self._tuning.burst_tasks and self._collector.paused:
                    self._collector.update(False, self._monotonic())
        # Lease again once half the leased tasks are done, and only if the last look
        # left some due tasks for want of room: every lease is a write transaction, and
        # otherwise the next planned look deletes what finished. A throttled task's slot
        # is freed only when its task is deleted (by the next lease), so it wakes the
        # loop at once.
        if self._may_lease_more(left) or item.task.queue:
            self.wakeup.ring()

    def _room_freed(self) -> None:
        """A leased task's request went on hold until its time: a look that found more
        due than it had room for may take more now (else a burst staged ahead would be
        leased a room's worth per `max_sleep`)."""
        with self._lock:
            left = self._working()
        if self._may_lease_more(left):
            self.wakeup.ring()

    def _may_lease_more(self, working: int) -> bool:
        """Whether the last look left due tasks for want of room, and half of it is free."""
        return self._starved and working <= self.workers * self._tuning.leased_per_worker // 2

    def _working(self) -> int:
        """The leased tasks that keep a worker busy (under self._lock): a staged request
        waiting for its time (pipeline.py) does not, or a thousand occurrences due at one
        instant could not all be staged ahead of it; past `most_held` they count again, so
        that a process never holds more requests than that in memory."""
        return len(self._inflight) - min(self._pipeline.staged(), self._tuning.most_held)

    def _task_until(self, item: LeasedTask) -> float:
        with self._lock:
            return self._until.get(item.id, NEVER)

    def _held(self, task_id: int, now: float) -> bool:
        """Whether this process still holds the task's lease (under self._lock)."""
        return not self._released and now < self._until.get(task_id, NEVER)

    def _renew_loop(self) -> None:
        period = self.lease.total_seconds() / 3
        while not self._stopped.wait(period):
            taken = self._monotonic()
            with self._lock:
                # A lease that ran out (this process stalled) is not renewed: it may be another's now.
                held = [item for item in self._inflight.values() if self._held(item.id, taken)]
            try:
                renewed = set(self.queue.renew(held, self.clock.now() + self.lease))
            except Exception as error:
                log_event(log, "lease renewal failed", error=repr(error))
                continue
            with self._lock:
                for item in held:
                    if item.id in self._until:  # (not settled meanwhile)
                        # One that another dispatcher leased since is lost, whatever the clock says.
                        self._until[item.id] = held_until(taken, self.lease) if item.id in renewed else -NEVER
