"""Telling a job's `on_failure` target that an invocation ended FAILED.

The transaction that finished the invocation enqueued the first attempt's task
(recording.notify_task), so a crash after that commit cannot lose the notification.
Each attempt then goes the way every delivery goes:

1. commit "on_failure attempt N sending" on the invocation's log (write before call),
   unless the log shows this attempt, or the notification, already settled (a
   duplicate or late task: nothing is sent);
2. send the summary to the target;
3. commit the outcome and, after a failure, the next attempt's task (statemachine
   policy NOTIFY_RETRY), or give up after the last one.

Nothing here changes the invocation's status: it stays FAILED whatever the target says.
"""

from __future__ import annotations

import json
import logging

from engine.changes import JobChanges
from engine.deliveries import Deliveries
from engine.logs import log_event
from engine.ports import Clock, DeliveryRequest, DeliveryResult, InvocationRow, JobStore, StoredJob
from engine.recording import append_log, notify_task
from engine.rendering import render_target, secret_backed_headers
from engine.secrets import SecretError
from statemachine.durations import parse_instant
from statemachine.policy import NOTIFY_RETRY, compute_backoff
from statemachine.template import TemplateContext
from statemachine.vocabulary import TargetKind

log = logging.getLogger("sundial.notify")

SENT, FAILED = "sent", "failed"
# The field that marks a notification's log entries, and the field of their attempt.
MARK, ATTEMPT = "on_failure", "notification_attempt"
# The field of a target that carries the payload, per kind; empty means "the summary".
_PAYLOAD_FIELD = {TargetKind.HTTP: "body", TargetKind.PUBSUB: "data", TargetKind.CLOUD_TASKS: "body"}


class Notifications:
    """Runs notification tasks (kind `notify`)."""

    def __init__(self, changes: JobChanges, store: JobStore, clock: Clock, deliveries: Deliveries):
        self.changes, self.store, self.clock, self.deliveries = changes, store, clock, deliveries

    def run(self, payload: dict) -> None:
        """Run one notification task.

        :raises StoreError: nothing was sent; the queue retries the task.
        """
        project, job_id, attempt = payload["project"], payload["job"], payload["attempt"]
        summary = payload["summary"]
        invocation_id = summary["invocation_id"]
        if not self.changes.write(lambda tx: _begin(tx, project, job_id, invocation_id, attempt, self.clock.now())):
            return
        stored = self.store.get_job(project, job_id)
        target = stored.definition.get("on_failure") if stored is not None else None
        if stored is None or not target:
            result = DeliveryResult("failed", "the job no longer has an on_failure target")
            _settle(self, project, job_id, invocation_id, summary, attempt, result, final=True)
            return
        result = _deliver(self.deliveries, stored, target, summary, attempt)
        log_event(log, "notified", job=f"{project}/{job_id}", invocation=invocation_id,
                  attempt=attempt, outcome=result.outcome, reason=result.reason)
        _settle(self, project, job_id, invocation_id, summary, attempt, result)


def _begin(tx, project: str, job_id: str, invocation_id: str, attempt: int, now) -> bool:
    row = tx.get_invocation(project, job_id, invocation_id)
    if row is None or _settled(row, attempt):
        return False
    append_log(row, now, f"on_failure attempt {attempt} sending", **{MARK: "sending", ATTEMPT: attempt})
    tx.put_invocation(row)
    return True


def _settled(row: InvocationRow, attempt: int) -> bool:
    """The notification got through, or this attempt (or a later one) already ended."""
    for entry in row.log:
        outcome = entry.get(MARK)
        if outcome == SENT or (outcome == FAILED and entry.get(ATTEMPT, 0) >= attempt):
            return True
    return False


def _deliver(deliveries: Deliveries, stored: StoredJob, target: dict, summary: dict,
             attempt: int) -> DeliveryResult:
    project, job_id = stored.record.project, stored.record.job_id
    context = TemplateContext(
        scheduled_time=parse_instant(summary["scheduled_time"]),
        timezone=stored.definition.get("timezone", "UTC"),
        project=project, job_id=job_id, invocation_id=summary["invocation_id"],
        attempt=attempt, event_index=0, event_count=1,
    )
    try:
        rendered = _with_summary(render_target(target, context, deliveries.secrets), summary)
    except SecretError as error:
        return DeliveryResult("failed", str(error))
    except ValueError as error:
        return DeliveryResult("failed", f"bad request: {error}")
    kind = next(iter(rendered))
    sender = deliveries.targets.get(kind)
    if sender is None:
        return DeliveryResult("failed", f"target {kind} is not available on this backend")
    request = DeliveryRequest(
        project=project, job_id=job_id, invocation_id=summary["invocation_id"],
        scheduled_time=context.scheduled_time, attempt=attempt, event_index=0, event_count=1,
        target=rendered, allowed_hosts=deliveries.allowed_hosts(project),
        secret_headers=secret_backed_headers(target),
    )
    return sender.deliver(request)


def _with_summary(target: dict, summary: dict) -> dict:
    """The summary as the payload, unless the target gives a payload of its own."""
    kind, spec = next(iter(target.items()))
    field = _PAYLOAD_FIELD.get(kind)
    if field is None or spec.get(field):
        return target
    spec = {**spec, field: json.dumps(summary, separators=(",", ":"))}
    headers = spec.get("headers")
    if isinstance(headers, dict) and not any(name.lower() == "content-type" for name in headers):
        spec["headers"] = {**headers, "Content-Type": "application/json"}
    return {kind: spec}


def _settle(notifications: Notifications, project: str, job_id: str, invocation_id: str, summary: dict,
            attempt: int, result: DeliveryResult, final: bool = False) -> None:
    now = notifications.clock.now()
    sent = result.outcome in ("succeeded", "accepted")
    more = not sent and not final and attempt < NOTIFY_RETRY.max_attempts
    retry_at = now + compute_backoff(NOTIFY_RETRY, attempt, f"notify/{invocation_id}") if more else None

    def change(tx) -> None:
        row = tx.get_invocation(project, job_id, invocation_id)
        if row is None:
            return
        if sent:
            message = f"on_failure attempt {attempt}: notified"
        else:
            then = f"; retry at {retry_at.isoformat()}" if retry_at else "; giving up"
            message = f"on_failure attempt {attempt} failed: {result.reason}{then}"
        append_log(row, now, message, **{MARK: SENT if sent else FAILED, ATTEMPT: attempt},
                   **({"detail": result.detail} if result.detail else {}))
        tx.put_invocation(row)
        if retry_at is not None:
            tx.enqueue(notify_task(project, job_id, summary, attempt + 1, retry_at))

    notifications.changes.write(change)
