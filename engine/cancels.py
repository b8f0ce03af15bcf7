"""Telling an async target that an invocation it was working on was aborted: an `http`
target with `async: true` and a `cancel_url` is POSTed to once when an invocation of it
ends ABORTED (`overlap: replace`, a user's `:abort`; a deletion's abort finds the job gone
when its task runs, and is only noted on the invocation's log).

The transaction that aborts the invocation enqueues one `cancel` task (`cancel_task`), so
nothing is sent before the abort is committed and a process that dies after the commit
does not lose it. The task (`Cancels.run_task`) sends once, best effort: a JSON body
(`invocation_id`, `job`, `scheduled_time`, `reason`) to the rendered `cancel_url`, with
the target's headers, `auth` and timeout and the same address rules as the target, and
writes the outcome on the invocation's log. A failure is logged and not retried: the
invocation is ABORTED whatever the target makes of it, and a target that must not miss a
cancel can ask for the invocation's status.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Callable

from engine.logs import log_event
from engine.ports import Clock, DeliveryResult, StoredJob, Task, Transaction
from engine.recording import append_log, task_name
from statemachine import actions as act
from statemachine.durations import parse_instant, rfc3339_millis
from statemachine.record import JobRecord
from statemachine.template import TemplateContext
from statemachine.vocabulary import DeliveryOutcome, InvocationStatus, TargetKind, TaskKind

log = logging.getLogger("sundial.engine")

CANCEL_FIELD = "cancel_url"

# (job, the cancel request's target, its template context, its JSON body) -> the result
CancelSender = Callable[[StoredJob, dict[str, Any], TemplateContext, dict[str, Any]], DeliveryResult]


def cancel_spec(job: StoredJob) -> dict[str, Any] | None:
    """The job's http target, if it is async and names a `cancel_url`."""
    spec = job.definition.target.get(TargetKind.HTTP)
    if not isinstance(spec, dict) or not spec.get("async") or not spec.get(CANCEL_FIELD):
        return None
    return spec


def cancel_task(job: StoredJob, before: JobRecord, action: act.FinishInvocation, now: datetime) -> Task | None:
    """The `cancel` task of an invocation this step aborted, where its target asks to be
    told; None otherwise. `before`: the record before the step (the invocation still active)."""
    if action.status != InvocationStatus.ABORTED or cancel_spec(job) is None:
        return None
    entry = before.find_active(action.invocation_id)
    if entry is None:
        return None
    project, job_id = job.record.project, job.record.job_id
    payload = {"project": project, "job": job_id, "invocation": action.invocation_id,
               "scheduled_time": rfc3339_millis(entry.scheduled_time), "reason": action.reason}
    return Task(task_name(TaskKind.CANCEL, project, job_id, action.invocation_id), TaskKind.CANCEL, payload, now)


def cancel_target(spec: dict[str, Any]) -> dict[str, Any]:
    """The request that tells the target: a POST to its `cancel_url`, with its headers,
    `auth` and timeout (the body is the cancel's JSON, put in when it is sent)."""
    request = {"url": spec[CANCEL_FIELD], "method": "POST", "headers": dict(spec.get("headers") or {}),
               "body": "", "timeout": spec.get("timeout") or "60s", "async": False}
    if spec.get("auth"):
        request["auth"] = spec["auth"]
    return {TargetKind.HTTP.value: request}


class Cancels:
    """Runs the `cancel` tasks."""

    def __init__(self, read_job: Callable[[str, str], StoredJob | None],
                 write: Callable[[Callable[[Transaction], None]], None], clock: Clock, send: CancelSender,
                 service_host: str = ""):
        self._read_job, self._write, self._clock, self._send = read_job, write, clock, send
        self._service_host = service_host

    def run_task(self, payload: dict[str, Any]) -> None:
        """Send the cancel once and log its outcome on the invocation; never raises for the target's failures."""
        project, job_id, invocation = payload["project"], payload["job"], payload["invocation"]
        stored = self._read_job(project, job_id)
        spec = cancel_spec(stored) if stored is not None else None
        if stored is None or spec is None:
            self._note(project, job_id, invocation, "cancel not sent: the job no longer has a cancel_url", {})
            return
        body = {"invocation_id": invocation, "job": job_id, "scheduled_time": payload["scheduled_time"],
                "reason": payload["reason"]}
        context = TemplateContext(scheduled_time=parse_instant(payload["scheduled_time"]),
                                  timezone=stored.definition.timezone, project=project, job_id=job_id,
                                  invocation_id=invocation, attempt=1, event_index=0, event_count=1,
                                  service_host=self._service_host)
        result = self._send(stored, cancel_target(spec), context, body)
        told = result.outcome in (DeliveryOutcome.SUCCEEDED, DeliveryOutcome.ACCEPTED)
        log_event(log, "cancel sent", level=logging.INFO if told else logging.WARNING, job=f"{project}/{job_id}",
                  invocation=invocation, outcome=result.outcome, reason=result.reason)
        fields: dict[str, Any] = {"detail": result.detail}
        if result.sent is not None:
            fields["request"] = result.sent
        message = "cancel sent" if told else f"cancel failed: {result.reason}"
        self._note(project, job_id, invocation, message, fields)

    def _note(self, project: str, job_id: str, invocation: str, message: str, fields: dict[str, Any]) -> None:
        now = self._clock.now()

        def body(tx: Transaction) -> None:
            row = tx.get_invocation(project, job_id, invocation)
            if row is not None:
                append_log(row, now, message, **fields)
                tx.put_invocation(row)
        self._write(body)
