"""How each action of a transition is written into the transaction.

Nothing here calls out of the process: `Deliver` is recorded (attempt N is
starting) and handed back, to be performed after the commit; so is a hook's
(`on_failure`, `on_recovery`) notification's `SendNotification`.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Callable

from engine.ports import InvocationRow, Task, Transaction
from engine.sent import prune_requests
from statemachine import actions as act
from statemachine import notification as note
from statemachine.durations import rfc3339_millis
from statemachine.policy import MAX_INTERRUPTIONS
from statemachine.record import ActiveInvocation
from statemachine.vocabulary import InvocationStatus, NotificationStatus, SkipReason, TaskKind, Trigger

LOG_LIMIT = 200  # entries kept per invocation: the head and the tail of a long story
LOG_HEAD = 50


def millis(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


def task_name(kind: str, *parts: object) -> str:
    """A task's name; `/` appears in no project or job id, so names cannot collide."""
    return "/".join((kind, *map(str, parts)))


def tick_name(project: str, job_id: str, nonce: str, at: datetime) -> str:
    """The name of a job's tick for `at` (what takes it off the queue names it so too)."""
    return task_name(TaskKind.TICK, project, job_id, nonce, millis(at))


def tick_task(project: str, job_id: str, action: act.ScheduleTick) -> Task:
    payload: dict[str, Any] = {"project": project, "job": job_id, "nonce": action.nonce}
    # A staged occurrence's tick runs `lead` early (statemachine/staging.py); its name and
    # its payload keep the occurrence's time (the embedded dispatcher groups early ticks).
    if action.lead:
        payload["at_ms"] = millis(action.at)
    return Task(tick_name(project, job_id, action.nonce, action.at), TaskKind.TICK, payload, action.at - action.lead)


def check_task(project: str, job_id: str, action: act.CheckEvents) -> Task:
    """The check of a fan-out's events; its name holds its due time, so the outcomes of
    one period ask for one check between them."""
    payload = {"project": project, "job": job_id, "invocation": action.invocation_id}
    return Task(task_name(TaskKind.CHECK, project, job_id, action.invocation_id, millis(action.at)), TaskKind.CHECK,
                payload, action.at)


def deadline_task(project: str, job_id: str, action: act.ArmDeadline) -> Task:
    """An invocation's deadline timer, on the chain's queue (never a throttle's: it must
    not wait behind the deliveries it may have to cut short); named by the invocation
    and its deadline, so that arming it again makes no second task."""
    payload = {"project": project, "job": job_id, "invocation": action.invocation_id}
    return Task(task_name(TaskKind.DEADLINE, project, job_id, action.invocation_id, millis(action.at)),
                TaskKind.DEADLINE, payload, action.at)


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


def notify_task(project: str, job_id: str, summary: dict[str, Any], attempt: int, at: datetime) -> Task:
    """One attempt to notify the job's hook (`hook_of(summary)`) of how an invocation
    ended; one name per (invocation, attempt), so a replayed enqueue makes no second task
    (an invocation ends once, so it has at most one hook to tell)."""
    payload = {"project": project, "job": job_id, "attempt": attempt, "summary": summary}
    return Task(task_name(TaskKind.NOTIFY, project, job_id, summary["invocation_id"], attempt), TaskKind.NOTIFY,
                payload, at)


def failure_summary(project: str, job_id: str, action: act.NotifyFailure | act.NotifyRecovery) -> dict[str, Any]:
    """What the hook (`on_failure` or `on_recovery`) is told about the invocation; its
    `status` says which hook it is for (`hook_of`)."""
    reason = action.reason if isinstance(action, act.NotifyFailure) else ""
    return {
        "project": project,
        "job": job_id,
        "invocation_id": action.invocation_id,
        "scheduled_time": rfc3339_millis(action.scheduled_time),
        "trigger": action.trigger,
        "status": InvocationStatus.SUCCEEDED if isinstance(action, act.NotifyRecovery) else InvocationStatus.FAILED,
        "reason": reason,
        "attempts": action.attempts,
        "failures": action.failures,
    }


def hook_of(summary: dict[str, Any]) -> str:
    """The hook a notification's summary is for: a success is only ever told to `on_recovery`."""
    return "on_recovery" if summary.get("status") == InvocationStatus.SUCCEEDED else "on_failure"


def trigger_task(project: str, source_job: str, target_job: str, source_invocation: str,
                 source_time: datetime, now: datetime, source_status: str | None = None) -> Task:
    """Another job's trigger; `source_time` (the source's scheduled time) fixes the
    triggered invocation's id, so a redelivered task cannot start a second one. With
    `source_status`, a fan-in report instead (statemachine/fanin.py): named apart, since
    one invocation may both trigger a job and report to it."""
    payload = {
        "project": project,
        "job": target_job,
        "request": source_invocation,
        "trigger": Trigger.job(source_job) if source_status is None else Trigger.AFTER,
        "at": rfc3339_millis(source_time),
    }
    if source_status is None:
        return Task(task_name(TaskKind.TRIGGER, project, target_job, source_invocation), TaskKind.TRIGGER,
                    payload, now)
    payload.update(upstream=source_job, status=source_status)
    return Task(task_name(TaskKind.TRIGGER, project, target_job, source_invocation, Trigger.AFTER),
                TaskKind.TRIGGER, payload, now)


def append_log(row: InvocationRow, now: datetime, message: str, /, **fields: object) -> None:
    """Add one entry; a field named like an entry's own key is kept as `field_<name>`."""
    entry: dict[str, Any] = {"time": rfc3339_millis(now), "message": message}
    for name, value in fields.items():
        entry[f"field_{name}" if name in entry else name] = value
    row.log.append(entry)
    if "request" in entry:
        prune_requests(row.log)  # what each attempt sent: the newest few keep it (engine/sent.py)
    if len(row.log) > LOG_LIMIT:
        # Keep how it started and how it is going; say what was cut.
        head, rest = row.log[:LOG_HEAD], row.log[LOG_HEAD:]
        earlier = rest.pop(0).get("dropped", 0) if rest and "dropped" in rest[0] else 0
        keep = LOG_LIMIT - LOG_HEAD - 1
        dropped = earlier + len(rest) - keep
        marker = {"time": entry["time"], "message": f"… {dropped} entries omitted", "dropped": dropped}
        row.log[:] = head + [marker] + rest[-keep:]


def record_actions(tx: Transaction, project: str, job_id: str, actions: tuple[act.Action, ...], now: datetime,
                   queue: str = "") -> None:
    """Write a transition's actions, in order (see `record_action`). Whether each
    occurrence to record SKIPPED has its record already is read once for all of them:
    a catch-up lists hundreds, and a read each would be hundreds of round trips."""
    known: set[str] | None = None
    # An invocation this step started in its job's record alone has no history record
    # to tell of its first attempt yet (it gets one when that attempt ends): not read for.
    unwritten = {a.invocation_id for a in actions if isinstance(a, act.StartInvocation) and a.deferred}
    for action in actions:
        if isinstance(action, act.Deliver) and action.invocation_id in unwritten:
            continue
        if isinstance(action, act.RecordSkipped):
            if known is None:
                skipped = [a.invocation_id for a in actions if isinstance(a, act.RecordSkipped)]
                known = tx.existing_invocations(project, job_id, list(dict.fromkeys(skipped)))
            _record_skipped(tx, project, job_id, action, now, known)
        else:
            record_action(tx, project, job_id, action, now, queue)


def record_action(tx: Transaction, project: str, job_id: str, action: act.Action, now: datetime,
                  queue: str = "") -> None:
    """Write one action (other than Deliver and RetryLater, which the caller handles).

    `queue`: where the job's start tasks go (its throttle's queue, or "")."""
    if isinstance(action, act.ScheduleTick):
        tx.enqueue(tick_task(project, job_id, action))
    elif isinstance(action, act.EnqueueAttempt):
        tx.enqueue(start_task(project, job_id, action, queue))
    elif isinstance(action, act.CheckEvents):
        tx.enqueue(check_task(project, job_id, action))
    elif isinstance(action, act.ArmDeadline):
        tx.enqueue(deadline_task(project, job_id, action))
    elif isinstance(action, (act.NotifyFailure, act.NotifyRecovery)):
        summary = failure_summary(project, job_id, action)
        record_notification(tx, project, job_id, summary, note.NotificationRequested(), now)
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
        _record_skipped(tx, project, job_id, action, now, tx.existing_invocations(project, job_id,
                                                                                  [action.invocation_id]))
    elif isinstance(action, act.FinishInvocation):
        _update(tx, project, job_id, action.invocation_id, lambda row: _finish(row, action, now))
    elif isinstance(action, act.RecordAttemptFailed):
        _update(tx, project, job_id, action.invocation_id, lambda row: _attempt_failed(row, action, now))
    elif isinstance(action, act.RecordAttemptInterrupted):
        _update(tx, project, job_id, action.invocation_id, lambda row: _attempt_interrupted(row, action, now))
    elif isinstance(action, act.TriggerJobs):
        source_time = action.source_scheduled_time or now
        for target in action.job_ids:
            tx.enqueue(trigger_task(project, job_id, target, action.source_invocation_id, source_time, now,
                                    action.source_status))
    elif isinstance(action, act.Deliver) and tells_history(action):
        _update(tx, project, job_id, action.invocation_id, lambda row: _delivering(row, action, now))
    elif isinstance(action, act.CancelTick):
        # The embedded store takes the tick off (occurrences are staged only there).
        tx.dequeue(tick_name(project, job_id, action.nonce, action.at))
    elif isinstance(action, act.WithdrawOccurrence):
        # A row only if one was written before its time; none is made for it now.
        _update(tx, project, job_id, action.invocation_id, lambda row: _withdrawn(row, now))


def tells_history(action: act.Deliver) -> bool:
    """Whether an attempt's start and result are written into its invocation's history
    record. Of a fan-out's events only the first one's first attempt is (the
    invocation is RUNNING from then on): the rest, starting and answering together,
    must not all write that one record; each event's own row tells its progress."""
    return action.event_count == 1 or (action.event_index, action.attempt) == (0, 1)


def _record_skipped(tx: Transaction, project: str, job_id: str, action: act.RecordSkipped, now: datetime,
                    known: set[str]) -> None:
    """`known`: the invocations that have a record; this one joins them."""
    if action.invocation_id in known:
        return  # one occurrence, one record
    known.add(action.invocation_id)
    row = InvocationRow(
        project, job_id, action.invocation_id, InvocationStatus.SKIPPED, action.scheduled_time, action.trigger,
        reason=action.reason, created_time=now, finished_time=now,
    )
    append_log(row, now, f"skipped: {action.reason}" + (f" ({action.detail})" if action.detail else ""))
    tx.put_invocation(row)


def materialize(tx: Transaction, project: str, job_id: str, entry: ActiveInvocation) -> None:
    """Write the history record of an invocation that so far lived only in its job's
    record (one started by its own tick), as it stands: created and attempt 1 started."""
    if tx.get_invocation(project, job_id, entry.invocation_id) is None:
        tx.put_invocation(row_of_active(project, job_id, entry))


def row_of_active(project: str, job_id: str, entry: ActiveInvocation, sent: bool = True) -> InvocationRow:
    """The history record an invocation living only in its job's record would have now;
    readers are shown it until the real one is written. `sent` False: its attempt,
    staged, has not started yet (STARTING, no `started_time`, its log only "created")."""
    began = entry.started_at or entry.scheduled_time
    row = InvocationRow(
        project, job_id, entry.invocation_id,
        InvocationStatus.RUNNING if entry.has_started and sent else InvocationStatus.STARTING,
        entry.scheduled_time, entry.trigger, created_time=began, started_time=began if sent else None,
        attempt=max(entry.attempts, default=1), event_count=entry.event_count,
    )
    append_log(row, began, "created", trigger=entry.trigger)
    if sent:
        append_log(row, began, "attempt 1 starting", event=0)
    return row


def _withdrawn(row: InvocationRow, now: datetime) -> None:
    row.status, row.reason, row.finished_time = InvocationStatus.SKIPPED, SkipReason.RESCHEDULED, now
    append_log(row, now, f"skipped: {SkipReason.RESCHEDULED}: the job's new timing does not fire at its"
                         " time, and nothing of it had been sent")


def _update(tx: Transaction, project: str, job_id: str, invocation_id: str,
            change: Callable[[InvocationRow], None]) -> None:
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


def _attempt_interrupted(row: InvocationRow, action: act.RecordAttemptInterrupted, now: datetime) -> None:
    append_log(row, now, f"attempt {action.attempt} interrupted; sent again as attempt {action.attempt + 1}"
               f" at {rfc3339_millis(action.resend_at)}, not counted against max_attempts"
               f" (interruption {action.interruption} of {MAX_INTERRUPTIONS})", event=action.event_index)


def _delivering(row: InvocationRow, action: act.Deliver, now: datetime) -> None:
    row.status = InvocationStatus.RUNNING
    row.attempt = max(row.attempt, action.attempt)
    row.started_time = row.started_time or now
    append_log(row, now, f"attempt {action.attempt} starting", event=action.event_index)


# --- the hooks' notification -------------------------------------------------------------

# The fields that mark a notification's log entries, for people reading them. Rows
# written before the state had a field of its own are read back from them (below).
MARK, ATTEMPT = "on_failure", "notification_attempt"
ENQUEUED, GIVING_UP = "on_failure: notification enqueued", "; giving up"
NONE_TEXT = "{}"  # the stored form of NO_NOTIFICATION


def record_notification(tx: Transaction, project: str, job_id: str, summary: dict[str, Any], event: note.Event,
                        now: datetime, detail: str = "") -> list[note.Action]:
    """Step the invocation's notification with `event` and write what it decided: the
    state, a log line, the next attempt's task. Returns the actions; the caller performs
    `SendNotification` after the commit. An event that changes nothing writes nothing."""
    row = tx.get_invocation(project, job_id, summary["invocation_id"])
    if row is None:
        return []  # retention removed it: nothing is left to tell about
    state, actions = note.step(row.notification, event, now)
    if state == row.notification and not actions:
        return []
    for action in actions:
        if isinstance(action, note.ScheduleNotification):
            tx.enqueue(notify_task(project, job_id, summary, action.attempt, action.at))
    message, fields = _notification_entry(event, actions, hook_of(summary))
    append_log(row, now, message, **fields, **({"detail": detail} if detail else {}))
    row.notification = state
    tx.put_invocation(row)
    return actions


def _notification_entry(event: note.Event, actions: list[note.Action], hook: str) -> tuple[str, dict[str, Any]]:
    """The log line that tells people what `event` led to. (The MARK field keeps its
    name for both hooks: rows that have it read it back only for on_failure, see
    legacy_notification.)"""
    if isinstance(event, note.NotificationRequested):
        return ENQUEUED.replace(MARK, hook), {}
    if isinstance(event, note.NotificationDue):
        return f"{hook} attempt {event.attempt} sending", {MARK: "sending", ATTEMPT: event.attempt}
    if isinstance(event, note.NotificationSent):
        return f"{hook} attempt {event.attempt}: notified", {MARK: "sent", ATTEMPT: event.attempt}
    retry = [a.at for a in actions if isinstance(a, note.ScheduleNotification)]
    then = f"; retry at {retry[0].isoformat()}" if retry else GIVING_UP
    return f"{hook} attempt {event.attempt} failed: {event.reason}{then}", {MARK: "failed", ATTEMPT: event.attempt}


def notification_text(state: note.NotificationState) -> str:
    """The stored form of a row's notification (never empty: empty means "older row")."""
    if state == note.NO_NOTIFICATION:
        return NONE_TEXT  # most invocations: not worth a JSON round trip
    return json.dumps(note.state_to_dict(state), separators=(",", ":"))


def stored_notification(text: str | None, log: list[dict[str, Any]]) -> note.NotificationState:
    """A row's notification from its stored form. A row written before the field
    existed has none (NULL, or no property) and gets it from its log instead; the
    next write of the row stores it, so each row is upgraded once."""
    if not text:
        return legacy_notification(log)
    return note.NO_NOTIFICATION if text == NONE_TEXT else note.state_from_dict(json.loads(text))


def legacy_notification(log: list[dict[str, Any]]) -> note.NotificationState:
    """The notification as older versions told it in the log: the enqueued line, then
    entries marked `on_failure: sending | sent | failed` with their `notification_attempt`."""
    S = NotificationStatus
    enqueued, sending, failed, failure = False, 0, 0, ""
    for entry in log:
        mark, attempt = entry.get(MARK), entry.get(ATTEMPT, 0)
        if mark == "sent":
            return note.NotificationState(S.SENT, attempt, _legacy_reason(failure))
        if mark == "sending":
            sending = max(sending, attempt)
        elif mark == "failed" and attempt >= failed:
            failed, failure = attempt, entry.get("message", "")
        elif entry.get("message") == ENQUEUED:
            enqueued = True
    reason = _legacy_reason(failure)
    if failure.endswith(GIVING_UP):
        return note.NotificationState(S.GAVE_UP, failed, reason)
    if sending > failed:
        return note.NotificationState(S.SENDING, sending, reason)
    if failed or enqueued:
        return note.NotificationState(S.PENDING, failed + 1, reason)
    return note.NO_NOTIFICATION


def _legacy_reason(message: str) -> str:
    """"on_failure attempt N failed: REASON; retry at T" (or "; giving up") -> REASON."""
    return message.split(" failed: ", 1)[-1].rsplit("; ", 1)[0] if message else ""
