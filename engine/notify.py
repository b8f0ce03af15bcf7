"""Telling a job's hook how an invocation ended: `on_failure` that it ended FAILED,
`on_recovery` that it SUCCEEDED after failures (statemachine/hooks.py decides which).

The pure machine (statemachine/notification.py) decides; this module applies,
one task (kind `notify`) at a time, the way every delivery goes:

1. in one transaction, step the invocation's notification with `NotificationDue`
   and write what it decided (recording.record_notification): "attempt N sending"
   (write before call), or nothing at all for a duplicate or late task;
2. after the commit, send the summary to the target (engine/delivery.py);
3. in one transaction, step with the outcome and write the decision: the next
   attempt's task (policy NOTIFY_RETRY), or giving up.

The transaction that finished the invocation asked for the notification and
enqueued its first task (recording.record_action), so a crash after that commit
cannot lose it. Nothing here changes the invocation's status: it stays FAILED
whatever the target says.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from engine.logs import log_event
from engine.ports import Clock, DeliveryResult, StoredJob
from engine.recording import hook_of, record_notification
from engine.staging_ports import RunTransaction
from statemachine import notification as note
from statemachine.vocabulary import DeliveryOutcome

log = logging.getLogger("sundial.notify")

NO_TARGET = "the job no longer has an {hook} target"


# (job, its hook's target, the invocation's summary, attempt) -> the result
NotificationSender = Callable[[StoredJob, dict[str, Any], dict[str, Any], int], DeliveryResult]


class Notifications:
    """Runs the `notify` tasks."""

    def __init__(self, run_transaction: RunTransaction, read_job: Callable[[str, str], StoredJob | None],
                 clock: Clock, deliver: NotificationSender):
        self._run_transaction, self._read_job = run_transaction, read_job
        self._clock, self._deliver = clock, deliver

    def run_task(self, payload: dict[str, Any]) -> None:
        """Run one notification task; returns when it is done or no longer relevant."""
        project, job_id, summary = payload["project"], payload["job"], payload["summary"]
        actions = self._step(project, job_id, summary, note.NotificationDue(payload["attempt"]))
        for action in actions:
            if isinstance(action, note.SendNotification):
                self._send(project, job_id, summary, action.attempt)

    def _send(self, project: str, job_id: str, summary: dict[str, Any], attempt: int) -> None:
        invocation_id = summary["invocation_id"]
        stored = self._read_job(project, job_id)
        hook = hook_of(summary)
        target = getattr(stored.definition, hook) if stored is not None else None
        if stored is None or not target:
            gone = NO_TARGET.format(hook=hook)
            self._step(project, job_id, summary, note.NotificationFailed(invocation_id, attempt, gone, True))
            return
        result = self._deliver(stored, target, summary, attempt)
        log_event(log, "notified", job=f"{project}/{job_id}", invocation=invocation_id, hook=hook,
                  attempt=attempt, outcome=result.outcome, reason=result.reason)
        if result.outcome in (DeliveryOutcome.SUCCEEDED, DeliveryOutcome.ACCEPTED):
            outcome: note.Event = note.NotificationSent(attempt)
        else:
            outcome = note.NotificationFailed(invocation_id, attempt, result.reason)
        self._step(project, job_id, summary, outcome, result.detail)

    def _step(self, project: str, job_id: str, summary: dict[str, Any], event: note.Event,
              detail: str = "") -> list[note.Action]:
        now = self._clock.now()
        return self._run_transaction(
            lambda tx: record_notification(tx, project, job_id, summary, event, now, detail))
