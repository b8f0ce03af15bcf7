"""How each action of a transition is written into the transaction.

Nothing here calls out of the process: `Deliver` is recorded (attempt N is
starting) and handed back, to be performed after the commit.
"""

from __future__ import annotations

from datetime import datetime

from engine.ports import InvocationRow, Task, Transaction
from statemachine import actions as act
from statemachine.durations import rfc3339_millis
from statemachine.record import ActiveInvocation
from statemachine.vocabulary import InvocationStatus, TaskKind, Trigger

LOG_LIMIT = 200  # entries kept per invocation: the head and the tail of a long story
LOG_HEAD = 50


def millis(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


def task_name(kind: str, *parts) -> str:
    """A task's name; `/` appears in no project or job id, so names cannot collide."""
    return "/".join((kind, *map(str, parts)))


def tick_task(project: str, job_id: str, action: act.ScheduleTick) -> Task:
    payload = {"project": project, "job": job_id, "nonce": action.nonce}
    return Task(task_name(TaskKind.TICK, project, job_id, action.nonce, millis(action.at)), TaskKind.TICK,
                payload, action.at)


def throttle_queue(project: str, throttle: str) -> str:
    """The logical queue of a throttle's start tasks ("" without one). Neither part can
    hold a `/`, so the name is unambiguous; each queue adapter maps it to its own."""
    return f"{project}/{throttle}" if throttle else ""


def start_task(project: str, job_id: str, action: act.EnqueueAttempt, queue: str = "") -> Task:
    payload = {
        "project": project,
        "job": job_id,
        "invocation": action.invocation_id,
        "event": action.event_index,
        "attempt": action.attempt,
    }
    # The ETA is in the name so that a watchdog re-issue of a lost start is a new task.
    name = task_name(
        TaskKind.START, project, job_id, action.invocation_id, action.event_index, action.attempt,
        millis(action.at)
    )
    return Task(name, TaskKind.START, payload, action.at, queue)


def notify_task(project: str, job_id: str, summary: dict, attempt: int, at: datetime) -> Task:
    """One attempt to notify the job's `on_failure` target of a FAILED invocation;
    one name per (invocation, attempt), so a replayed enqueue makes no second task."""
    payload = {"project": project, "job": job_id, "attempt": attempt, "summary": summary}
    return Task(task_name(TaskKind.NOTIFY, project, job_id, summary["invocation_id"], attempt), TaskKind.NOTIFY,
                payload, at)


def failure_summary(project: str, job_id: str, action: act.NotifyFailure) -> dict:
    """What the `on_failure` target is told about the invocation."""
    return {
        "project": project,
        "job": job_id,
        "invocation_id": action.invocation_id,
        "scheduled_time": rfc3339_millis(action.scheduled_time),
        "trigger": action.trigger,
        "status": InvocationStatus.FAILED,
        "reason": action.reason,
        "attempts": action.attempts,
    }


def trigger_task(project: str, source_job: str, target_job: str, source_invocation: str,
                 source_time: datetime, now: datetime) -> Task:
    """Another job's trigger; `source_time` (the source's scheduled time) fixes the
    triggered invocation's id, so a redelivered task cannot start a second one."""
    payload = {
        "project": project,
        "job": target_job,
        "request": source_invocation,
        "trigger": Trigger.job(source_job),
        "at": rfc3339_millis(source_time),
    }
    return Task(task_name(TaskKind.TRIGGER, project, target_job, source_invocation), TaskKind.TRIGGER, payload, now)


def append_log(row: InvocationRow, now: datetime, message: str, /, **fields) -> None:
    """Add one entry; a field named like an entry's own key is kept as `field_<name>`."""
    entry = {"time": rfc3339_millis(now), "message": message}
    for name, value in fields.items():
        entry[f"field_{name}" if name in entry else name] = value
    row.log.append(entry)
    if len(row.log) > LOG_LIMIT:
        # Keep how it started and how it is going; say what was cut.
        head, rest = row.log[:LOG_HEAD], row.log[LOG_HEAD:]
        earlier = rest.pop(0).get("dropped", 0) if rest and "dropped" in rest[0] else 0
        keep = LOG_LIMIT - LOG_HEAD - 1
        dropped = earlier + len(rest) - keep
        marker = {"time": entry["time"], "message": f"… {dropped} entries omitted", "dropped": dropped}
        row.log[:] = head + [marker] + rest[-keep:]


def record_action(tx: Transaction, project: str, job_id: str, action, now: datetime, queue: str = "") -> None:
    """Write one action (other than Deliver and RetryLater, which the caller handles).

    `queue`: where the job's start tasks go (its throttle's queue, or "")."""
    if isinstance(action, act.ScheduleTick):
        tx.enqueue(tick_task(project, job_id, action))
    elif isinstance(action, act.EnqueueAttempt):
        tx.enqueue(start_task(project, job_id, action, queue))
    elif isinstance(action, act.NotifyFailure):
        tx.enqueue(notify_task(project, job_id, failure_summary(project, job_id, action), 1, now))
        _update(tx, project, job_id, action.invocation_id,
                lambda row: append_log(row, now, "on_failure: notification enqueued"))
    elif isinstance(action, act.StartInvocation) and action.deferred:
        pass  # the job record holds it; its history record comes when its attempt ends
    elif isinstance(action, act.StartInvocation):
        row = InvocationRow(
            project, job_id, action.invocation_id, InvocationStatus.STARTING, action.scheduled_time,
            action.trigger, created_time=now, event_count=action.event_count,
        )
        append_log(row, now, "created", trigger=action.trigger)
        tx.put_invocation(row)
    elif isinstance(action, act.RecordSkipped):
        _record_skipped(tx, project, job_id, action, now)
    elif isinstance(action, act.FinishInvocation):
        _update(tx, project, job_id, action.invocation_id, lambda row: _finish(row, action, now))
    elif isinstance(action, act.RecordAttemptFailed):
        _update(tx, project, job_id, action.invocation_id, lambda row: _attempt_failed(row, action, now))
    elif isinstance(action, act.TriggerJobs):
        source_time = action.source_scheduled_time or now
        for target in action.job_ids:
            tx.enqueue(trigger_task(project, job_id, target, action.source_invocation_id, source_time, now))
    elif isinstance(action, act.Deliver):
        _update(tx, project, job_id, action.invocation_id, lambda row: _delivering(row, action, now))


def _record_skipped(tx: Transaction, project: str, job_id: str, action: act.RecordSkipped, now) -> None:
    if tx.get_invocation(project, job_id, action.invocation_id) is not None:
        return  # one occurrence, one record
    row = InvocationRow(
        project, job_id, action.invocation_id, InvocationStatus.SKIPPED, action.scheduled_time, action.trigger,
        reason=action.reason, created_time=now, finished_time=now,
    )
    append_log(row, now, f"skipped: {action.reason}")
    tx.put_invocation(row)


def materialize(tx: Transaction, project: str, job_id: str, entry: ActiveInvocation) -> None:
    """Write the history record of an invocation that so far lived only in its job's
    record (one started by its own tick), as it stands: created and attempt 1 started."""
    if tx.get_invocation(project, job_id, entry.invocation_id) is not None:
        return
    # A deferred invocation gets its history record once its first attempt started.
    began = entry.started_at or entry.scheduled_time
    row = InvocationRow(
        project, job_id, entry.invocation_id,
        InvocationStatus.RUNNING if entry.has_started else InvocationStatus.STARTING,
        entry.scheduled_time, entry.trigger, created_time=began, started_time=began,
        attempt=max(entry.attempts), event_count=entry.event_count,
    )
    append_log(row, began, "created", trigger=entry.trigger)
    append_log(row, began, "attempt 1 starting", event=0)
    tx.put_invocation(row)


def _update(tx: Transaction, project: str, job_id: str, invocation_id: str, change) -> None:
    row = tx.get_invocation(project, job_id, invocation_id)
    if row is not None:
        change(row)
        tx.put_invocation(row)


def _finish(row: InvocationRow, action: act.FinishInvocation, now: datetime) -> None:
    row.status, row.reason, row.finished_time = action.status, action.reason, now
    append_log(row, now, f"finished: {action.status}" + (f" ({action.reason})" if action.reason else ""))


def _attempt_failed(row: InvocationRow, action: act.RecordAttemptFailed, now: datetime) -> None:
    retry = f"; retry at {rfc3339_millis(action.retry_at)}" if action.retry_at else "; no attempts left"
    append_log(row, now, f"attempt {action.attempt} failed: {action.reason}{retry}", event=action.event_index)


def _delivering(row: InvocationRow, action: act.Deliver, now: datetime) -> None:
    row.status = InvocationStatus.RUNNING
    row.attempt = max(row.attempt, action.attempt)
    row.started_time = row.started_time or now
    append_log(row, now, f"attempt {action.attempt} starting", event=action.event_index)
