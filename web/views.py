"""JSON shapes of the API (docs/REFERENCE.md section 5): Job, Invocation and AuditEntry."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engine.masking import masked_definition
from engine.ports import AuditEntry, InvocationRow, StoredJob
from engine.sent import shown_log
from statemachine.durations import rfc3339_millis
from statemachine.shown import next_run, shown_state


def time_or_none(value: datetime | None) -> str | None:
    return None if value is None else rfc3339_millis(value)


# The definition's fields a Job shows after the record's, in this order (docs/REFERENCE.md section 5).
JOB_DEFINITION_FIELDS = ("schedule", "at", "overlap", "max_concurrent", "catchup", "timeout", "retry", "fanout",
                         "throttle", "triggers", "disabled", "description", "labels", "jitter", "start", "end",
                         "exclude", "after", "after_window")


def job_view(job: StoredJob, last: InvocationRow | None, now: datetime) -> dict[str, Any]:
    """The Job as a reader sees it at `now` (the engine's clock): an occurrence committed
    ahead of its time counts as not started, and as the next run (statemachine/shown.py)."""
    # Credentials are masked for every reader, owners too (engine/masking.py); a PUT of what
    # this shows keeps the stored values for the masks on the same host.
    record, definition = job.record, masked_definition(job.definition)
    view: dict[str, Any] = {
        "id": record.job_id,
        "project": record.project,
        "source": job.source,
        "timezone": definition.timezone,
        "state": shown_state(record, now).value,
        "paused": record.paused,
        "pause_reason": record.pause_reason,
        "next_run_time": time_or_none(next_run(record, now)),
        "last_invocation": None if last is None else invocation_view(last),
        "last_success_time": time_or_none(record.last_succeeded_at),  # as the UI's and /metrics' last success
        "target": definition.target,
        "active_invocations": [entry.invocation_id for entry in record.active],
        "config_error": job.config_error,
    }
    if record.paused:  # who paused it applies only while it is paused
        view["paused_by"] = record.paused_by
    shown = definition.to_dict()  # their JSON spelling, as stored
    view.update((key, shown[key]) for key in JOB_DEFINITION_FIELDS if key in shown)
    return view


def invocation_view(row: InvocationRow, with_log: bool = False) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": row.id,
        "job": row.job_id,
        "project": row.project,
        "status": row.status,
        "reason": row.reason,
        "scheduled_time": time_or_none(row.scheduled_time),
        "created_time": time_or_none(row.created_time),
        "started_time": time_or_none(row.started_time),
        "finished_time": time_or_none(row.finished_time),
        "attempt": row.attempt,
        "event_count": row.event_count,
        "trigger": row.trigger,
    }
    if with_log:
        view["log"] = shown_log(row.log)  # a request recorded before today's masking rules, masked by them
    return view


def audit_view(entry: AuditEntry) -> dict[str, Any]:
    return {"time": rfc3339_millis(entry.time), "actor": entry.actor, "action": entry.action, "job": entry.job_id,
            "detail": entry.detail}
