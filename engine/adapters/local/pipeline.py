"""The dispatcher's path for tick and start tasks: through storage many at a time.

    leased tasks -> step thread: one transaction steps them all (engine/tasks.py)
                 -> send pool: one request per thread
                 -> record thread: one transaction records every result that has come back
                 -> the task is settled (deleted, or handed back to run again)

Each stage takes everything waiting for it, up to MAX_BATCH (inbox.py): batches grow with the
load and are a single task when it is quiet, so nothing waits for a batch to fill.
An attempt committed as starting may wait for a sender, but never long enough for the
watchdog to give it up and issue it again (send_pool.py).
A task is settled only after the results of its requests are committed, so a
throttle's lease still covers its request. If a batch's transaction fails, its
tasks go through one at a time, so that one task's trouble is its own. A task
whose step still fails is handed back with the dispatcher's backoff, as any task
is. A result that cannot be committed is kept and committed again later instead
(through storage trouble, every second while its attempt's lease holds): its
request is out, and a handed-back task would not send it again but leave the
attempt to the watchdog, which does, only once the lease has run out.

Stopping (`stop`): nothing new leaves from the first instant (TaskRunner.stop_sending);
what is on the wire gets until a deadline to answer, and its results are recorded; what
was committed and never sent (a request staged ahead, one waiting for a sender, the
requests of the step in hand) goes back to its start task under its invocation id, in
one last commit. A request still unanswered at the deadline is left: its attempt stays
held, and whoever starts next settles it as interrupted (engine/interruptions.py).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from engine.adapters.local.inbox import Inbox, Item
from engine.adapters.local.send_pool import SendPool
from engine.adapters.local.staged_sends import StagedSend, StagedSends, StagingParts
from engine.adapters.local.tuning import DEFAULT_LOCAL_TUNING, LocalTuning
from engine.leases import NEVER
from engine.logs import log_event
from engine.ports import ConflictError, LeasedTask, StoredJob, StoreError
from engine.tasks import Sent, Stepped, TaskRunner
from statemachine.actions import Deliver

log = logging.getLogger("sundial.dispatcher")



@dataclass(eq=False)  # compared and hashed by identity: a member of TaskPipeline._waiting
class _Result:
    item: LeasedTask | None  # (None: a request a result's step issued, ticks.stage_pending)
    sent: Sent
    failures: int = 0
    timer: threading.Timer | None = None  # set while it waits to be committed again
    started: datetime | None = None  # when its request left, while it is still to be counted and logged


Settle = Callable[[LeasedTask, BaseException | None], None]


def _left(until: float | None) -> float | None:
    """Seconds from now to the time.monotonic() instant `until` (None: no bound), for a join."""
    return None if until is None else max(until - time.monotonic(), 0.0)


def wait_for_writes(backlog: Callable[[], int], most: float) -> None:
    """Return once `backlog()` (requests due and not yet written) is 0, or after `most` seconds."""
    until = time.monotonic() + most
    while backlog() and time.monotonic() < until:
        time.sleep(0.002)


class TaskPipeline:
    """`settle(item, error)`: the task is done (error None) or is to run again;
    `task_until(item)`: the monotonic instant up to which the task's lease is held
    (engine/leases.py). A task whose lease ran out is not stepped, and its requests
    are not sent: it is settled at once, and `settle` gives it up."""

    def __init__(self, runner: TaskRunner, senders: int, settle: Settle,
                 task_until: Callable[[LeasedTask], float] = lambda item: NEVER,
                 room_freed: Callable[[], None] = lambda: None,
                 owns: Callable[[str, str], bool] = lambda project, job_id: True, *,
                 staging: StagingParts, tuning: LocalTuning = DEFAULT_LOCAL_TUNING):
        """`owns(project, job_id)`: whether the job is of this process's share of the queue
        (sqlite_queue.Share): a result's step stages the job's next occurrence only then,
        so that each process keeps its share of the jobs. `staging`: the staged path's
        parts (staged_sends.StagingParts).

        The record stage waits `tuning.record_linger` for more results before it commits
        what it has: a result waits that much longer (its request is out already), and a
        spread load of 500 a second records about 25 per transaction, not 5: its BEGIN,
        COMMIT, WAL pages and wakeups are shared five times as widely (docs/PERFORMANCE.md)."""
        self.runner, self.settle, self._owns, self._tuning = runner, settle, owns, tuning
        # A staged request issued by a result's step (ticks.stage_pending) has no task.
        self.task_until: Callable[[LeasedTask | None], float] = (
            lambda item: NEVER if item is None else task_until(item))
        self._steps: Inbox[LeasedTask] = Inbox()
        self._results: Inbox[_Result] = Inbox(linger=tuning.record_linger.total_seconds())
        # A request may wait for a sender a quarter of the start grace at most (and 5 s).
        longest_wait = min(runner.changes.tuning.start_grace.total_seconds() / 4, 5.0)
        self._sends = SendPool(senders, longest_wait)
        # Staged requests: made ready ahead, held until their time, written then by one
        # thread (staged_sends.py, engine/targets/http_batch.py).
        self._writer = staging.batch_writer(self._sends.submit) if staging.batch_writer is not None else None
        self._staged = StagedSends(runner, self._sends, self._writer, staging, send=self._send, deliver=self._deliver,
                                   settle_part=self._settle_part, task_until=self.task_until,
                                   room_freed=room_freed, left_unsent=self._left_unsent, tuning=tuning)
        self._lock = threading.Lock()
        # Stopping: attempts committed and never sent, by (invocation, event, attempt).
        self._unsent: dict[tuple[str, int, int], tuple[StoredJob, Deliver]] = {}
        self._unrecorded: dict[int, int] = {}  # task id -> its requests not yet recorded
        self._waiting: set[_Result] = set()  # results to commit again later
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._step_loop, name="sundial-step", daemon=True),
            threading.Thread(target=self._record_loop, name="sundial-record", daemon=True),
        ]

    def start(self) -> None:
        self.runner.start_sending()
        self._sends.start()
        self._staged.start()
        if self._writer is not None:
            self._writer.start()
        for thread in self._threads:
            thread.start()

    def submit(self, item: LeasedTask) -> None:
        self._steps.put(item)

    def staged(self) -> int:
        """Requests of tasks held until their time (each a task of its own)."""
        return self._staged.held_for_tasks()

    def stop(self, until: float | None = None) -> list[LeasedTask]:
        """Send nothing more; wait for the requests on the wire to answer and their
        results to be committed, until time.monotonic() reads `until` (None: however long
        the targets' timeouts let them take). Returns the tasks never started, for the
        dispatcher to hand back; what was committed and never sent is given back after
        that (`give_back_unsent`)."""
        self.runner.stop_sending()  # first: from here on no request is written
        unstarted = self._steps.close()
        self._threads[0].join(_left(until))  # the step in hand: its requests are left unsent
        self._staged.stop(until)  # what is held is never written
        self._sends.hurry()  # what waits for a sender ends at once (unsent)
        if self._writer is not None:
            self._writer.shutdown(_left(until))  # the answers to what it wrote
        self._sends.wait_idle(until if until is not None else float("inf"))
        self._sends.shutdown(until)
        with self._lock:
            self._stopping = True
            waiting, self._waiting = self._waiting, set()
        for result in waiting:  # handed back; the watchdog has their attempts
            if result.timer is not None:
                result.timer.cancel()
            self._settle_part(result.item, RuntimeError("stopped before its result was committed"))
        self._results.finish()
        self._threads[1].join(_left(None if until is None else until + self._tuning.last_commits.total_seconds()))
        return unstarted

    def _left_unsent(self, job: StoredJob, action: Deliver) -> None:
        with self._lock:
            self._unsent[(action.invocation_id, action.event_index, action.attempt)] = (job, action)

    def give_back_unsent(self) -> None:
        """The attempts committed and never sent go back to their start tasks, in this
        process's last commit; if it fails, the next start settles them (their holds stay).
        After the dispatcher has completed the tasks it stepped: a start task given back
        may bear the name of the one that began the attempt (its time is the attempt's),
        and the queue keeps the first of two tasks of one name."""
        with self._lock:
            unsent, self._unsent = list(self._unsent.values()), {}
        if not unsent:
            return
        try:
            given = self.runner.give_back_unsent(unsent)
        except Exception as error:
            log_event(log, "stopping: requests never sent are left to the next start", level=logging.WARNING,
                      requests=len(unsent), error=repr(error))
            return
        log_event(log, "stopping: requests never sent go back to their start tasks", requests=len(unsent),
                  given_back=given)

    def _step_loop(self) -> None:
        while (batch := self._steps.take()) is not None:
            self._guarded(self._step, batch)

    def _record_loop(self) -> None:
        while (batch := self._results.take()) is not None:
            self._after_writes()
            self._guarded(self._record, batch)

    def _after_writes(self) -> None:
        """Results wait while requests are due and not yet written (up to
        `tuning.writes_first`): when thousands are due at one instant, every request leaves before
        results take the GIL to be recorded. A request sent late is late; a result
        committed a second later is not, as its task's lease and its attempt's are long."""
        if self._writer is not None:
            writer, staged = self._writer, self._staged
            wait_for_writes(lambda: writer.backlog() + staged.unwritten(), self._tuning.writes_first.total_seconds())
            staged.writes_done()

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
        staged: list[StagedSend] = []
        for item, outcome in zip(batch, stepped):
            if not outcome.deliveries:
                self.settle(item, outcome.retry())
                continue
            with self._lock:
                self._unrecorded[item.id] = len(outcome.deliveries)
            self._hand_over(item, outcome, staged)
        self._staged.submit(staged)

    def _hand_over(self, item: LeasedTask | None, stepped: Stepped, staged: list[StagedSend]) -> None:
        """A step's deliveries: sent now on a sender, or, staged, added to `staged` to be
        held until their time."""
        for job, action in stepped.deliveries:
            if action.send_at is not None:
                staged.append(StagedSend(item, job, action, stepped))
            else:
                self._sends.submit(self._send, item, job, action, stepped)

    # --- stage 2: send ---------------------------------------------------------------

    def _send(self, item: LeasedTask | None, job: StoredJob, action: Deliver, stepped: Stepped) -> None:
        try:
            result = self.runner.send_held(job, action, stepped, self.task_until(item))
        except Exception as error:  # not the target's failure (that is a result): ours
            self._settle_part(item, error)
            return
        if result is None:  # a lease ran out while it waited: whoever holds the attempt now sends it
            if self.runner.sending_stopped:  # (or the process stops: it was never written)
                self._left_unsent(job, action)
            self._settle_part(item, None)
            return
        self._results.put(_Result(item, Sent(job, action, result)))

    def _deliver(self, item: LeasedTask | None, sent: Sent, started: datetime) -> None:
        """A staged request's result (staged_sends.py), counted and logged by the record stage."""
        self._results.put(_Result(item, sent, started=started))

    # --- stage 3: record -------------------------------------------------------------

    def _record(self, batch: list[_Result]) -> None:
        for result in batch:
            started, result.started = result.started, None
            if started is not None:
                sent = result.sent
                self.runner.deliveries.account(sent.job, sent.action, started, sent.result)
        try:
            room = self._staged.has_room()
            issued = self.runner.record_many(
                [result.sent for result in batch],
                stage_next=lambda job: room and self._owns(job.record.project, job.record.job_id))
        except Exception as error:
            if len(batch) == 1:
                self._record_later(batch[0], error)
            else:
                for result in batch:
                    self._record([result])
            return
        self._send_issued(issued)
        for result in batch:
            self._settle_part(result.item, None)

    def _send_issued(self, issued: list[Stepped]) -> None:
        """What the results' steps committed to be sent: a job's next occurrence, staged
        as the result freed the job (ticks.stage_pending). It has no task of its own."""
        staged: list[StagedSend] = []
        for stepped in issued:
            self._hand_over(None, stepped, staged)
        self._staged.submit(staged)

    def _record_later(self, result: _Result, error: Exception) -> None:
        result.failures += 1
        storage_trouble = isinstance(error, (StoreError, ConflictError))
        if not storage_trouble or not self._may_record_later(result):
            # Handed back, as the one-task path does: its re-run finds the tick spent,
            # and the watchdog resolves the attempt.
            log_event(log, "recording a result failed; giving up", level=logging.ERROR,
                      invocation=result.sent.action.invocation_id, failures=result.failures, error=repr(error))
            self._settle_part(result.item, error)
            return
        delay = self._tuning.record_backoff.after(result.failures).total_seconds()
        log_event(log, "recording a result failed", invocation=result.sent.action.invocation_id,
                  failures=result.failures, retry_in_ms=int(delay * 1000), error=repr(error))
        with self._lock:
            if not self._stopping:
                result.timer = threading.Timer(delay, self._record_again, (result,))
                result.timer.daemon = True
                self._waiting.add(result)
                result.timer.start()
                return
        self._settle_part(result.item, error)

    def _may_record_later(self, result: _Result) -> bool:
        """Storage trouble is tried `record_tries` times, and then on while the attempt's
        lease holds (its `expect_by`, on the injected clock): a disk full for minutes still
        ends with the result recorded within a backoff of space coming back, and the job
        goes on at once, where a result given up left its attempt held until the watchdog
        issued it again, after the lease. Past the lease the result would be stale."""
        if result.failures < self._tuning.record_tries:
            return True
        entry = result.sent.job.record.find_active(result.sent.action.invocation_id)
        expect_by = None if entry is None else entry.expect_by
        return expect_by is not None and self.runner.changes.clock.now() < expect_by

    def _record_again(self, result: _Result) -> None:
        with self._lock:
            if result not in self._waiting:
                return  # stop() settled it
            self._waiting.remove(result)
        # Through the record stage, never around it: stop() waits for that stage, so
        # nothing is settled after stop() returns.
        self._results.put(result)

    def _settle_part(self, item: LeasedTask | None, error: BaseException | None) -> None:
        """One of the task's requests is recorded (or failed): settle the task with its
        last one, or with its first failure. (A request with no task has none to settle.)"""
        if item is None:
            return
        with self._lock:
            left = self._unrecorded.get(item.id)
            if left is None:
                return  # already settled by an earlier failure
            if error is None and left > 1:
                self._unrecorded[item.id] = left - 1
                return
            del self._unrecorded[item.id]
        self.settle(item, error)
