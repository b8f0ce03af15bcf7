"""Running the chain's tasks: each task kind to the part of the engine that handles it.

Tick and start tasks step their job; many of them can go through storage at once
(`step_many`, then `record_many`), which is how the embedded dispatcher runs them
(engine/adapters/local/pipeline.py). `handle` runs one task by the very same path, so
a job gets exactly the same events, in the same order, whichever runs it: its attempt
is committed as starting before the request leaves, and the result after.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable

from engine.changes import Applied, Change, JobChanges, Refusal
from engine.deliveries import Deliveries, outcome_change
from engine.errors import NotFound, StoreError
from engine.inbox import Inbox, Pending
from engine.interruptions import unsent_change
from engine.leases import NEVER, Monotonic, first_lost, give_up, held_until
from engine.logs import log_event
from engine.ports import DeliveryResult, RetryTask, StoredJob, Task
from engine.recording import millis
from engine.staged import StagedChecks
from engine.targets.fence import LeaseLost, fenced
from statemachine import actions as act
from statemachine import events as ev
from statemachine.deadlines import DeadlineDue
from statemachine.durations import parse_instant
from statemachine.fanout_step import EventsCheckDue, JobEvent
from statemachine.vocabulary import TaskKind

log = logging.getLogger("sundial.engine")

# Tries to record an attempt's result before its task gives up on it (_record_result).
RESULT_TRIES = 3
GIVE_BACK_BATCH = 100  # attempts never sent, given back per transaction at a stop
STOP = "stop"  # the lease that ends when the process stops sending (stop_sending)

# The kinds that step a job's chain, and so may go many at a time.
CHAIN_KINDS = (TaskKind.TICK, TaskKind.START, TaskKind.CHECK, TaskKind.DEADLINE)


@dataclass
class Stepped:
    """What stepping a job with one task's event decided."""

    deliveries: list[tuple[StoredJob, act.Deliver]] = field(default_factory=list)
    retry_in: timedelta | None = None  # hand the task back, to run again after this
    # The monotonic reading taken before the commit that issued the deliveries, and the
    # end of their attempts' lease counted from it (engine/leases.py).
    taken_at: float = 0.0
    attempt_until: float = NEVER

    def retry(self) -> RetryTask | None:
        """What hands the task back, when the tick came before its time."""
        return None if self.retry_in is None else RetryTask(self.retry_in, "tick arrived early")


@dataclass(frozen=True)
class Sent:
    """One attempt's request and its result, waiting to be recorded."""

    job: StoredJob
    action: act.Deliver
    result: DeliveryResult


class TaskRunner:
    def __init__(self, changes: JobChanges, deliveries: Deliveries, notify: Callable[[dict[str, Any]], None],
                 task_lease: timedelta | None = None, staged: StagedChecks | None = None,
                 monotonic: Monotonic = time.monotonic, inbox: Inbox | None = None,
                 cancel: Callable[[dict[str, Any]], None] | None = None):
        """`notify` runs one on_failure notification task (engine/notify.py); `task_lease`:
        how long a task handed to `handle` is its handler's (a Cloud Tasks request's
        dispatch deadline; None: unbounded); `staged`: the checks of a staged attempt at
        its time, where the backend stages (None: it never does); `monotonic`: the clock
        leases are counted on (engine/leases.py; a test's may stall); `inbox`: where
        other jobs' triggers go, and what folds them (by default one over `changes`);
        `cancel` runs one task that tells an async target of an abort (engine/cancels.py)."""
        self.changes, self.deliveries, self.notify, self.cancel = changes, deliveries, notify, cancel
        self.inbox = inbox if inbox is not None else Inbox(changes)
        self.task_lease, self.staged = task_lease, staged
        self.monotonic = monotonic
        # The monotonic instant from which no request of this process leaves (stop_sending).
        self._sending_until: float | None = None

    def stop_sending(self) -> None:
        """The process stops: from now on no request leaves. It is one more lease each send
        is made under (`stop`), so a request is refused at its last check, the fence at
        the socket included, never written after this; its attempt stays committed as
        starting, for its sender to give back (`give_back_unsent`) or, failing that, for
        the next start to settle. A notification task taken from here on is handed back
        to the queue unsent (`handle`), for the next start; one already sending is on the
        wire, as a request is."""
        self._sending_until = self.monotonic()

    def start_sending(self) -> None:
        """Send again (a dispatcher started anew in the same process: tests and tools)."""
        self._sending_until = None

    @property
    def sending_stopped(self) -> bool:
        return self._sending_until is not None

    def give_back_unsent(self, unsent: list[tuple[StoredJob, act.Deliver]]) -> int:
        """Attempts this process committed and, stopping, never sent: each back to its start
        task, the same attempt under the same invocation id (interruptions.unsent_change),
        a batch a transaction. Returns how many went back (not those that moved on meanwhile).

        :raises StoreError: storage failed; what was given back before stays so.
        """
        changes = [unsent_change(job, action) for job, action in unsent]
        given = 0
        for start in range(0, len(changes), GIVE_BACK_BATCH):
            results = self.changes.apply_many(changes[start:start + GIVE_BACK_BATCH])
            given += sum(1 for result in results if isinstance(result, Applied) and result.transition.actions)
        return given

    def handle(self, task: Task) -> None:
        """Run one task. Returns when it is done or no longer relevant.

        :raises RetryTask: hand it back to the queue (a tick that came early).
        :raises StoreError: storage failed; the queue retries.
        """
        if task.kind in CHAIN_KINDS:
            began = self.monotonic()
            self._run_chain_task(task, NEVER if self.task_lease is None else held_until(began, self.task_lease))
        elif task.kind == TaskKind.NOTIFY:
            if self.sending_stopped:  # nothing new leaves after the stop's signal
                raise RetryTask(timedelta(0), "stopping: the next start sends this notification")
            self.notify(task.payload)
        elif task.kind == TaskKind.TRIGGER:
            self._run_trigger(task)
        elif task.kind == TaskKind.INBOX:
            self.inbox.fold(task.payload["project"], task.payload["job"], due=task.eta)
        elif task.kind == TaskKind.CANCEL and self.cancel is not None:
            if self.sending_stopped:  # as a notification: nothing new leaves after the stop's signal
                raise RetryTask(timedelta(0), "stopping: the next start sends this cancel")
            self.cancel(task.payload)
        else:
            log_event(log, "unknown task kind", task=task.name, kind=task.kind)

    def step_many(self, tasks: list[Task]) -> list[Stepped]:
        """Step each task's job in one transaction; a task whose job is gone, or whose
        event the job refuses, has nothing left to do.

        :raises StoreError: nothing was committed; every task is to be retried.
        """
        changes = [Change(task.payload["project"], task.payload["job"], task_event(task)) for task in tasks]
        stepped = []
        taken = self.monotonic()  # before the commit: the lease is never counted from later than the store's
        wall = self.changes.clock.now()
        for task, applied in zip(tasks, self.changes.apply_many(changes)):
            if isinstance(applied, Applied):
                stepped.append(self._leased(_stepped_from(task, applied), taken, wall))
            else:
                log_refused(task, applied)
                stepped.append(Stepped())
        return stepped

    def record_many(self, sent: list[Sent], task: Task | None = None,
                    stage_next: Callable[[StoredJob], bool] | None = None) -> list[Stepped]:
        """Record every attempt's result in one transaction. A job deleted while its
        request was out has nothing to record it on. `task`: the one task these results
        are of, whose log line a refusal gets (as for a refused step). With `stage_next`
        a result that frees its job may stage the job's next occurrence in the same step
        (ticks.stage_pending), for each job it says yes to: returned for each result,
        what it committed to be sent.

        :raises StoreError: nothing was committed.
        """
        changes = [outcome_change(one.job, one.action, one.result, stage_next is not None and stage_next(one.job))
                   for one in sent]
        taken, wall = self.monotonic(), self.changes.clock.now()  # before the commit, as step_many's
        staged = []
        for one, applied in zip(sent, self.changes.apply_many(changes)):
            if isinstance(applied, Applied):
                deliveries = [(applied.job, a) for a in applied.transition.actions if isinstance(a, act.Deliver)]
                staged.append(self._leased(Stepped(deliveries), taken, wall))
                continue
            staged.append(Stepped())
            if task is not None:
                log_refused(task, applied)
            else:
                log_event(log, "result refused", job=f"{one.job.record.project}/{one.job.record.job_id}",
                          invocation=one.action.invocation_id, attempt=one.action.attempt, reason=str(applied))
        return staged

    def send_held(self, job: StoredJob, action: act.Deliver, stepped: Stepped,
                  task_until: float = NEVER) -> DeliveryResult | None:
        """Send an attempt `stepped` committed, if every lease it is sent under still
        holds: the task's (held until `task_until`), the attempt's, and this process's
        own (AttemptHolds.held_until). Otherwise give it up (None): whoever holds it
        now sends it, under the same invocation id. A staged attempt (its time has come)
        is also given up if the job was paused, deleted or redefined since (engine/staged.py)."""
        leases = self._leases(stepped, task_until)
        lost = first_lost(self.monotonic(), leases)
        if not lost and action.send_at is not None and self.staged is not None \
                and not self.staged.still_wanted(job, action):
            return None
        if not lost:
            try:  # checked again at the socket, right before the request is written (fence.py)
                with fenced(lambda: first_lost(self.monotonic(), leases)):
                    return self.deliveries.send(job, action)
            except LeaseLost as at_socket:
                lost = str(at_socket)
        self.give_up_send(lost, job, action)
        return None

    def lost_lease(self, stepped: Stepped, task_until: float = NEVER) -> str:
        """The first lease an attempt `stepped` issued is sent under that has run out ("":
        all hold): this process's stop, the task's, the attempt's and the process's own."""
        return first_lost(self.monotonic(), self._leases(stepped, task_until))

    def give_up_send(self, lease: str, job: StoredJob, action: act.Deliver) -> None:
        if lease == STOP:
            return  # not a lease lost: the process stops, and its sender says how many it left
        give_up(log, self.changes.metrics, "send", lease, job=f"{job.record.project}/{job.record.job_id}",
                invocation=action.invocation_id, event=action.event_index, attempt=action.attempt)

    def _leases(self, stepped: Stepped, task_until: float) -> dict[str, float | None]:
        holds = self.changes.holds
        return {STOP: self._sending_until, "task": task_until, "attempt": stepped.attempt_until,
                "process": holds.held_until(stepped.taken_at) if holds is not None else None}

    def _leased(self, stepped: Stepped, taken: float, wall: datetime) -> Stepped:
        """`stepped` with the lease of the attempts it issued (every one of one job). A
        staged attempt's counts from its time, as the store's does (`expect_by`):
        `wall` is the clock read with `taken`."""
        if not stepped.deliveries:
            return stepped
        policy = stepped.deliveries[0][0].record.live_policy
        lease = policy.attempt_timeout + self.changes.tuning.start_grace
        send_at = min((action.send_at for _, action in stepped.deliveries if action.send_at), default=None)
        if send_at is not None and send_at > wall:
            lease += send_at - wall
        stepped.taken_at = taken
        stepped.attempt_until = held_until(taken, lease)
        return stepped

    def _run_chain_task(self, task: Task, task_until: float) -> None:
        """A start task's request is sent here, before the task counts as done: a
        throttle is the concurrency of its queue, so the request must be over when
        the task is."""
        stepped = self.step_many([task])[0]
        retry = stepped.retry()
        if retry is not None:
            raise retry
        for job, action in stepped.deliveries:
            if action.send_at is not None and self.staged is not None:
                self.staged.wait_until(self.changes.clock, action.send_at)  # staged: its time first
            result = self.send_held(job, action, stepped, task_until)
            if result is not None:
                self._record_result(Sent(job, action, result), task)

    def hand_back(self, task: Task, delay: timedelta) -> Task:
        """Enqueue a fresh copy of `task`, due `delay` from now, under a name of its own:
        how a task handler behind Cloud Tasks says "not yet" (a tick that came early)
        and still answers 2xx, since Cloud Tasks reads a 503 or 429 as an overloaded
        target and slows the whole queue. Returns the copy.

        :raises StoreError: nothing was enqueued.
        """
        eta = self.changes.clock.now() + delay
        again = Task(f"{task.name}/again/{millis(eta)}", task.kind, task.payload, eta, task.queue)
        self.changes.write(lambda tx: tx.enqueue(again))
        return again

    def _record_result(self, sent: Sent, task: Task) -> None:
        """Record what the target answered, trying again at once when storage fails.
        If it keeps failing the task still counts as done: a queue that ran it again
        would take the attempt, still in flight in storage, for one whose process died
        and settle it as interrupted though the target answered. Left so, the attempt
        is re-issued under its invocation id once its lease runs out (the watchdog)."""
        for attempt in range(1, RESULT_TRIES + 1):
            try:
                self.record_many([sent], task)
                return
            except StoreError as error:
                if attempt == RESULT_TRIES:
                    log_event(log, "result not recorded", task=task.name, invocation=sent.action.invocation_id,
                              error=str(error))

    def _run_trigger(self, task: Task) -> None:
        """Another job's trigger goes to this job's inbox (engine/inbox.py), keyed by the
        source invocation: the 50 upstream jobs of one downstream job that finish together
        append 50 rows rather than wait for its record one after another."""
        payload = task.payload
        at = parse_instant(payload["at"]) if payload.get("at") else self.changes.clock.now()
        pending = Pending(payload["request"], payload["trigger"], at,
                          payload.get("upstream"), payload.get("status", ""))  # a fan-in report's
        self.inbox.append(payload["project"], payload["job"], pending)


def task_event(task: Task) -> JobEvent:
    """The machine event a task of the job's chain carries."""
    payload = task.payload
    if task.kind == TaskKind.TICK:
        return ev.TickArrived(payload["nonce"], redelivered=task.retried)
    if task.kind == TaskKind.START:
        return ev.InvocationStarting(payload["invocation"], payload["event"], payload["attempt"],
                                     redelivered=task.retried)
    if task.kind == TaskKind.CHECK:
        return EventsCheckDue(payload["invocation"])
    if task.kind == TaskKind.DEADLINE:
        return DeadlineDue(payload["invocation"])
    raise ValueError(f"task kind {task.kind!r} is not a step of a job's chain")


def log_refused(task: Task, error: Refusal) -> None:
    """A task with nothing left to do: its job is gone, or the job refuses its event
    (e.g. another job's trigger of a paused job)."""
    if isinstance(error, NotFound):
        log_event(log, "task for a missing job", task=task.name)
    else:
        log_event(log, "task refused", task=task.name, reason=str(error))


def _stepped_from(task: Task, applied: Applied) -> Stepped:
    """Read an `Applied` for what is left to do: deliveries, or a retry."""
    actions = applied.transition.actions
    for action in actions:
        if isinstance(action, act.RetryLater):
            return Stepped(retry_in=action.delay)
    payload = task.payload
    for action in actions:
        if isinstance(action, act.RecordSkipped):
            log_event(log, "skipped", job=f"{payload['project']}/{payload['job']}",
                      invocation=action.invocation_id, scheduled_time=action.scheduled_time,
                      reason=action.reason)
    # Committed as starting: they are to be sent now.
    return Stepped([(applied.job, action) for action in actions if isinstance(action, act.Deliver)])
