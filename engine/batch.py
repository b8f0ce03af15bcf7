"""Tick and start tasks many at a time: the embedded dispatcher's fast path.

Run one by one (`Engine.handle_task`), every delivery costs two transactions of
its own. At a burst their fixed costs (the write lock, BEGIN and COMMIT, and 32
threads handing the GIL over to take the lock) were a fifth of the CPU per
delivery. `step_tasks` steps many jobs in one transaction and `record_results`
records many attempts' results in one; between them each request is still sent
on a thread of its own. Every job gets exactly the events, in the same order,
that `handle_task` gives it: its attempt is committed as starting before the
request leaves, and the result is committed after.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from engine.logs import log_event
from engine.ports import DeliveryResult, RetryTask, StoredJob, Task
from statemachine import actions as act
from statemachine import events as ev
from statemachine.vocabulary import TaskKind

log = logging.getLogger("sundial.engine")

BATCHED_KINDS = (TaskKind.TICK, TaskKind.START)


@dataclass
class Stepped:
    """What stepping a job with one task's event decided."""

    deliveries: list[tuple[StoredJob, act.Deliver]] = field(default_factory=list)
    retry_in: timedelta | None = None  # hand the task back, to run again after this

    def retry(self) -> RetryTask | None:
        """What hands the task back, when the tick came before its time."""
        return None if self.retry_in is None else RetryTask(self.retry_in, "tick arrived early")


@dataclass(frozen=True)
class Sent:
    """One attempt's request and its result, waiting to be recorded."""

    job: StoredJob
    action: act.Deliver
    result: DeliveryResult


def task_event(task: Task):
    """The machine event a tick or start task carries."""
    payload = task.payload
    if task.kind == TaskKind.TICK:
        return ev.TickArrived(payload["nonce"])
    if task.kind == TaskKind.START:
        return ev.InvocationStarting(payload["invocation"], payload["event"], payload["attempt"])
    raise ValueError(f"task kind {task.kind!r} is not a step of a job's chain")


def stepped_from(task: Task, applied) -> Stepped:
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


def step_tasks(engine, tasks: list[Task]) -> list[Stepped]:
    """Step each task's job in one transaction; a task whose job is gone, or whose
    event the job refuses, has nothing left to do (as in `handle_task`).

    :raises StoreError: nothing was committed; every task is to be retried.
    """
    changes = [(task.payload["project"], task.payload["job"], task_event(task), None) for task in tasks]
    stepped = []
    for task, applied in zip(tasks, engine.apply_many(changes)):
        if isinstance(applied, Exception):
            engine.log_refused(task, applied)  # as handle_task logs it
            stepped.append(Stepped())
        else:
            stepped.append(stepped_from(task, applied))
    return stepped


def record_results(engine, sent: list[Sent]) -> None:
    """Record every attempt's result in one transaction. A job deleted while its
    request was out has nothing to record it on.

    :raises StoreError: nothing was committed.
    """
    changes = []
    for one in sent:
        record = one.job.record
        changes.append((record.project, record.job_id, *engine.outcome_change(one.action, one.result)))
    for one, applied in zip(sent, engine.apply_many(changes)):
        if isinstance(applied, Exception):
            log_event(log, "result refused", job=f"{one.job.record.project}/{one.job.record.job_id}",
                      invocation=one.action.invocation_id, attempt=one.action.attempt, reason=str(applied))
