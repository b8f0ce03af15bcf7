"""The dispatcher's path for tick and start tasks: through storage many at a time.

    leased tasks -> step thread: one transaction steps them all (engine/tasks.py)
                 -> send pool: one request per thread
                 -> record thread: one transaction records every result that has come back
                 -> the task is settled (deleted, or handed back to run again)

Each stage takes everything waiting for it, up to MAX_BATCH: batches grow with the
load and are a single task when it is quiet, so nothing waits for a batch to fill.
An attempt committed as starting may wait for a sender, but never long enough for the
watchdog to give it up and issue it again (send_pool.py).
A task is settled only after the results of its requests are committed, so a
throttle's lease still covers its request. If a batch's transaction fails, its
tasks go through one at a time, so that one task's trouble is its own. A task
whose step still fails is handed back with the dispatcher's backoff, as any task
is. A result that cannot be committed is kept and committed again later instead:
its request is out, and a handed-back task would not send it again but leave
the attempt to the watchdog, which does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Callable, Generic, TypeVar

from engine.adapters.local.send_pool import SendPool
from engine.adapters.local.stager import Stager
from engine.clock import SystemClock
from engine.delivery import Staged
from engine.leases import NEVER
from engine.logs import log_event
from engine.ports import ConflictError, LeasedTask, StoredJob, StoreError
from engine.retry import RECORD_BACKOFF
from engine.tasks import Sent, Stepped, TaskRunner
from statemachine.actions import Deliver

log = logging.getLogger("sundial.dispatcher")

MAX_BATCH = 64  # tasks per transaction: enough to spread its fixed cost, short enough to start sending soon
# How long the record stage waits for more results before it commits what it has: a
# result waits that much longer to be committed (its request is out already).
RECORD_LINGER = 0.01
RECORD_TRIES = 12  # about a minute of a store that is down; then the task is handed back


@dataclass(eq=False)  # compared and hashed by identity: a member of TaskPipeline._waiting
class _Result:
    item: LeasedTask
    sent: Sent
    failures: int = 0
    timer: threading.Timer | None = None  # set while it waits to be committed again


Item = TypeVar("Item")
Settle = Callable[[LeasedTask, BaseException | None], None]


class _Inbox(Generic[Item]):
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


class TaskPipeline:
    """`settle(item, error)`: the task is done (error None) or is to run again;
    `task_until(item)`: the monotonic instant up to which the task's lease is held
    (engine/leases.py). A task whose lease ran out is not stepped, and its requests
    are not sent: it is settled at once, and `settle` gives it up."""

    def __init__(self, runner: TaskRunner, senders: int, settle: Settle,
                 task_until: Callable[[LeasedTask], float] = lambda item: NEVER):
        self.runner, self.settle, self.task_until = runner, settle, task_until
        self._steps: _Inbox[LeasedTask] = _Inbox()
        self._results: _Inbox[_Result] = _Inbox(linger=RECORD_LINGER)
        # A request may wait for a sender a quarter of the start grace at most (and 5 s).
        longest_wait = min(runner.changes.tuning.start_grace.total_seconds() / 4, 5.0)
        self._sends = SendPool(senders, longest_wait)
        # Staged requests wait here until their time (a runner without a clock stages nothing).
        holds = getattr(runner.changes, "holds", None)
        self._stager = Stager(getattr(runner.changes, "clock", None) or SystemClock(),
                              release_up_to=holds.release_up_to if holds is not None else None)
        # Staged HTTP requests: made ready on a sender ahead of their time, written at it
        # by one thread (engine/targets/http_batch.py); any other goes the senders' way.
        make_writer = getattr(getattr(runner, "deliveries", None), "batch_writer", None)
        self._writer = make_writer(self._sends.submit) if make_writer is not None else None
        self._preparing = 0  # staged requests being made ready (stop() waits for them)
        self._prepared = threading.Condition()
        self._lock = threading.Lock()
        self._unrecorded: dict[int, int] = {}  # task id -> its requests not yet recorded
        self._waiting: set[_Result] = set()  # results to commit again later
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._step_loop, name="sundial-step", daemon=True),
            threading.Thread(target=self._record_loop, name="sundial-record", daemon=True),
        ]

    def start(self) -> None:
        self._sends.start()
        self._stager.start()
        if self._writer is not None:
            self._writer.start()
        for thread in self._threads:
            thread.start()

    def submit(self, item: LeasedTask) -> None:
        self._steps.put(item)

    def staged(self) -> int:
        """Requests held until their time (each a task of its own)."""
        return self._stager.held()

    def stop(self) -> list[LeasedTask]:
        """Finish what was started (its requests are sent and recorded); returns the
        tasks never started, for the dispatcher to hand back. It waits for the step in
        hand and the requests out, which the targets' timeouts bound."""
        unstarted = self._steps.close()
        self._threads[0].join()  # before the senders go: it may still hand them requests
        with self._prepared:  # (and staged requests being made ready, the stager)
            while self._preparing:
                self._prepared.wait()
        self._stager.shutdown()  # (so may the stager, until the last staged request's time)
        if self._writer is not None:
            self._writer.shutdown()  # (and the writer, its answers)
        self._sends.shutdown()
        with self._lock:
            self._stopping = True
            waiting, self._waiting = self._waiting, set()
        for result in waiting:  # handed back; the watchdog has their attempts
            if result.timer is not None:
                result.timer.cancel()
            self._settle_part(result.item, RuntimeError("stopped before its result was committed"))
        self._results.finish()
        self._threads[1].join()
        return unstarted

    def _step_loop(self) -> None:
        while (batch := self._steps.take()) is not None:
            self._guarded(self._step, batch)

    def _record_loop(self) -> None:
        while (batch := self._results.take()) is not None:
            self._guarded(self._record, batch)

    @staticmethod
    def _guarded(work: Callable[[list[Item]], None], batch: list[Item]) -> None:
        # Storage errors are handled inside; anything else is a bug, which must not
        # end the stage's thread and with it every later delivery.
        try:
            work(batch)
        except Exception as error:
            log_event(log, "pipeline stage failed", level=logging.ERROR, stage=work.__name__,
                      tasks=len(batch), error=repr(error))

    # --- stage 1: step ---------------------------------------------------------------

    def _step(self, batch: list[LeasedTask]) -> None:
        now = self.runner.monotonic()
        held = [item for item in batch if now < self.task_until(item)]
        for item in batch:
            if item not in held:
                self.settle(item, None)  # (it is given up there)
        if not held:
            return
        batch = held
        try:
            stepped = self.runner.step_many([item.task for item in batch])
        except Exception as error:
            if len(batch) == 1:
                self.settle(batch[0], error)
            else:  # one task's trouble must stay its own
                for item in batch:
                    self._step([item])
            return
        for item, outcome in zip(batch, stepped):
            if not outcome.deliveries:
                self.settle(item, outcome.retry())
                continue
            with self._lock:
                self._unrecorded[item.id] = len(outcome.deliveries)
            for job, action in outcome.deliveries:
                if action.send_at is not None and self._writer is not None:  # staged: made ready now
                    with self._prepared:
                        self._preparing += 1
                    self._sends.submit(self._prepare, item, job, action, outcome)
                elif action.send_at is not None:  # staged: sent at its time
                    self._stager.submit(action.send_at, self._sends.submit, self._send, item, job, action, outcome)
                else:
                    self._sends.submit(self._send, item, job, action, outcome)

    # --- stage 2: send ---------------------------------------------------------------

    def _send(self, item: LeasedTask, job: StoredJob, action: Deliver, stepped: Stepped) -> None:
        try:
            result = self.runner.send_held(job, action, stepped, self.task_until(item))
        except Exception as error:  # not the target's failure (that is a result): ours
            self._settle_part(item, error)
            return
        if result is None:  # a lease ran out while it waited: whoever holds the attempt now sends it
            self._settle_part(item, None)
            return
        self._results.put(_Result(item, Sent(job, action, result)))

    def _prepare(self, item: LeasedTask, job: StoredJob, action: Deliver, stepped: Stepped) -> None:
        """Ahead of its time: the request encoded and a connection opened, then held for the
        writer; a request that cannot be made ready goes the senders' way at its time."""
        assert self._writer is not None and action.send_at is not None
        try:
            staged = self.runner.deliveries.stage(job, action)
        except Exception as error:  # a bug of ours: deliver() at the time has its own handling
            log_event(log, "staging a request failed", level=logging.ERROR, error=repr(error))
            staged = None
        try:
            if staged is None:
                self._stager.submit(action.send_at, self._sends.submit, self._send, item, job, action, stepped)
                return
            written: list[float] = []
            outgoing = staged.ready.outgoing(
                ready=lambda: self._ready(item, job, action, stepped, written),
                done=lambda outcome: self._written(item, job, action, staged, written, outcome))
            self._stager.submit(action.send_at, self._writer.submit, [outgoing])
        finally:
            with self._prepared:
                self._preparing -= 1
                self._prepared.notify_all()

    def _ready(self, item: LeasedTask, job: StoredJob, action: Deliver, stepped: Stepped,
               written: list[float]) -> bool:
        """On the writer's thread, right before it writes the request."""
        try:
            go = self.runner.ready_staged(job, action, stepped, self.task_until(item))
        except Exception as error:
            self._settle_part(item, error)
            return False
        if go:
            written.append(time.monotonic())
        return go

    def _written(self, item: LeasedTask, job: StoredJob, action: Deliver, staged: Staged, written: list[float],
                 outcome: object) -> None:  # the writer's Answer, an error, or None
        if outcome is None or not written:  # not sent: given up (or settled with its error)
            self._settle_part(item, None)
            return
        self._sends.submit(self._finish, item, job, action, staged, written[0], outcome)

    def _finish(self, item: LeasedTask, job: StoredJob, action: Deliver, staged: Staged, written_at: float,
                outcome: object) -> None:
        try:
            started = self.runner.changes.clock.now() - timedelta(seconds=time.monotonic() - written_at)
            result = staged.ready.finish(outcome, written_at)
            result = self.runner.deliveries.account(job, action, started, replace(result, sent=staged.sent))
        except Exception as error:
            self._settle_part(item, error)
            return
        self._results.put(_Result(item, Sent(job, action, result)))

    # --- stage 3: record -------------------------------------------------------------

    def _record(self, batch: list[_Result]) -> None:
        try:
            self.runner.record_many([result.sent for result in batch])
        except Exception as error:
            if len(batch) == 1:
                self._record_later(batch[0], error)
            else:
                for result in batch:
                    self._record([result])
            return
        for result in batch:
            self._settle_part(result.item, None)

    def _record_later(self, result: _Result, error: Exception) -> None:
        result.failures += 1
        storage_trouble = isinstance(error, (StoreError, ConflictError))
        if not storage_trouble or result.failures >= RECORD_TRIES:
            # Handed back, as the one-task path does: its re-run finds the tick spent,
            # and the watchdog resolves the attempt.
            log_event(log, "recording a result failed; giving up", level=logging.ERROR,
                      task=result.item.task.name, failures=result.failures, error=repr(error))
            self._settle_part(result.item, error)
            return
        delay = RECORD_BACKOFF.after(result.failures).total_seconds()
        log_event(log, "recording a result failed", task=result.item.task.name, failures=result.failures,
                  retry_in_ms=int(delay * 1000), error=repr(error))
        with self._lock:
            if not self._stopping:
                result.timer = threading.Timer(delay, self._record_again, (result,))
                result.timer.daemon = True
                self._waiting.add(result)
                result.timer.start()
                return
        self._settle_part(result.item, error)

    def _record_again(self, result: _Result) -> None:
        with self._lock:
            if result not in self._waiting:
                return  # stop() settled it
            self._waiting.remove(result)
        # Through the record stage, never around it: stop() waits for that stage, so
        # nothing is settled after stop() returns.
        self._results.put(result)

    def _settle_part(self, item: LeasedTask, error: BaseException | None) -> None:
        """One of the task's requests is recorded (or failed): settle the task with its
        last one, or with its first failure."""
        with self._lock:
            left = self._unrecorded.get(item.id)
            if left is None:
                return  # already settled by an earlier failure
            if error is None and left > 1:
                self._unrecorded[item.id] = left - 1
                return
            del self._unrecorded[item.id]
        self.settle(item, error)
