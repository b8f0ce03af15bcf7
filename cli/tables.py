"""How the operator's commands show the API's Job and Invocation to people: aligned
columns for lists, `field: value` lines for one item. Scripts use --output json instead, so
these shapes may change for readability; the JSON is the API's own."""

from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

NONE = "-"


def when(value: str | None) -> str:
    """An RFC 3339 time of the API, shorter: milliseconds only when there are some."""
    if not value:
        return NONE
    return value.replace(".000Z", "Z")


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Columns as wide as their widest cell, two spaces apart; the last is not padded."""
    rows = [list(headers), *([str(cell) for cell in row] for row in rows)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def fields(pairs: Iterable[tuple[str, object]]) -> str:
    """`name: value` lines, values aligned; empty values are left out."""
    shown = [(name, str(value)) for name, value in pairs if value not in (None, "", [], {})]
    width = max((len(name) for name, _ in shown), default=0) + 1
    return "\n".join(f"{name + ':':<{width}} {value}" for name, value in shown)


def schedule(job: dict[str, Any]) -> str:
    if job.get("schedule"):
        return str(job["schedule"])
    at = job.get("at") or []
    if not at:
        return NONE
    return f"at {when(at[0])}" + (f" (+{len(at) - 1})" if len(at) > 1 else "")


def outcome(invocation: dict[str, Any] | None) -> str:
    """An invocation's status with its reason, e.g. `FAILED (http 500)`."""
    if not invocation:
        return NONE
    reason = invocation.get("reason")
    return f"{invocation['status']} ({reason})" if reason else str(invocation["status"])


JOB_COLUMNS = ("ID", "STATE", "SCHEDULE", "NEXT RUN", "LAST RESULT", "LAST RUN")


def job_row(job: dict[str, Any], last_run: dict[str, Any] | None) -> list[str]:
    """LAST RESULT and LAST RUN are of the job's last invocation that has run (started or
    ended; `last_run`): LAST RUN its scheduled time, when it was meant to run. One made
    ready ahead of its time has not run yet: it is the NEXT RUN."""
    return [job["id"], job["state"], schedule(job), when(job.get("next_run_time")), outcome(last_run),
            when(last_run.get("scheduled_time")) if last_run else NONE]


def job_fields(job: dict[str, Any], last_run: dict[str, Any] | None) -> str:
    last = job.get("last_invocation")
    upcoming = last if last and last.get("id") != (last_run or {}).get("id") else None  # not run yet
    shown = ("overlap", "max_concurrent", "catchup", "timeout", "retry", "fanout", "throttle", "triggers")
    return fields([
        ("job", f"{job['project']}/{job['id']}"), ("source", job.get("source")), ("state", job["state"]),
        ("pause reason", job.get("pause_reason") if job.get("paused") else None),
        ("schedule", schedule(job)), ("timezone", job.get("timezone")),
        ("labels", ", ".join(f"{key}={value}" for key, value in (job.get("labels") or {}).items())),
        ("next run", when(job.get("next_run_time"))),
        ("upcoming", f"{upcoming['id']} due {when(upcoming.get('scheduled_time'))}" if upcoming else None),
        ("last run", f"{last_run['id']} {outcome(last_run)} scheduled {when(last_run.get('scheduled_time'))}"
         if last_run else NONE),
        ("last success", when(job.get("last_success_time"))),
        ("active", ", ".join(job.get("active_invocations") or [])),
        *((name, _compact(job[name])) for name in shown if name in job),
        ("target", _compact(job.get("target"))), ("config error", job.get("config_error")),
    ])


INVOCATION_COLUMNS = ("ID", "STATUS", "SCHEDULED", "TRIGGER", "ATTEMPTS", "REASON")


def invocation_row(invocation: dict[str, Any]) -> list[str]:
    return [invocation["id"], invocation["status"], when(invocation.get("scheduled_time")),
            invocation.get("trigger") or NONE, str(invocation.get("attempt", 0)), invocation.get("reason") or NONE]


def invocation_fields(invocation: dict[str, Any]) -> str:
    head = fields([
        ("invocation", invocation["id"]), ("job", f"{invocation.get('project')}/{invocation['job']}"),
        ("status", outcome(invocation)), ("trigger", invocation.get("trigger")),
        ("attempts", invocation.get("attempt")), ("scheduled", when(invocation.get("scheduled_time"))),
        ("created", when(invocation.get("created_time"))), ("started", when(invocation.get("started_time"))),
        ("finished", when(invocation.get("finished_time"))),
    ])
    log = invocation.get("log")
    if log is None:
        return head
    lines = [f"  {when(entry.get('time'))}  {entry.get('message', '')}" for entry in log]
    return "\n".join([head, "log:", *(lines or ["  (empty)"])])


def _compact(value: object) -> str | None:
    """Nested values (retry, catchup, target) as one line of JSON; nothing for none."""
    if value in (None, "", [], {}):
        return None
    return value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "))
