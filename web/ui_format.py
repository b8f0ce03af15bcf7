"""What the web UI's pages show, computed from the store's rows: no Flask, no I/O.

Times are shown in UTC with a relative reading ("in 4m", "3m ago") and the job's own
zone where the job's schedule lives in it (its next fire times).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import yaml

from engine.masking import masked_target
from engine.ports import InvocationRow, StoredJob
from engine.rendering import render_target, secret_backed_headers
from engine.secrets import REDACTED
from engine.sent import masked_headers, shown_request
from statemachine.calendars import next_included
from statemachine.definition import JobDefinition
from statemachine.describe import describe_at, describe_schedule
from statemachine.record import ActiveInvocation
from statemachine.safety import masked_url
from statemachine.schedule import ScheduleError, is_clock_driven, load_zone, next_fire
from statemachine.shown import next_run as shown_next_run
from statemachine.staging import staged
from statemachine.template import TemplateContext
from statemachine.vocabulary import ACTIVE_STATUSES, TERMINAL_STATUSES, SkipReason

# The history filters: a name in the query string -> the statuses it shows.
STATUS_FILTERS = {
    "active": tuple(status.value for status in ACTIVE_STATUSES),
    **{status.value.lower(): (status.value,) for status in TERMINAL_STATUSES},
}
TERMINAL = TERMINAL_STATUSES
# The definition's policy fields, in the order a reader looks for them.
POLICY_FIELDS = ("overlap", "max_concurrent", "catchup", "timeout", "retry", "fanout", "throttle",
                 "triggers", "pause_after_failures", "on_failure", "on_recovery", "exclude", "after", "after_window")
# What a SKIPPED invocation's reason means, shown beside the word on its page.
SKIP_REASON_TEXT: dict[str, str] = {
    SkipReason.OVERLAP: "another invocation of the job was active, and its overlap policy skips",
    SkipReason.MISSED: "its time passed while nothing ran, or a newer occurrence superseded it",
    SkipReason.PAUSED: "the job was paused",
    SkipReason.DISABLED: "the job was disabled or removed from its file",
    SkipReason.RESCHEDULED: "the job's new schedule does not fire at this time",
    SkipReason.EXCLUDED: "its time falls in one of the job's exclusion calendars",
    SkipReason.UPSTREAM: "an upstream job of this fan-in job (after) did not succeed for this scheduled time: "
                         "it failed, or the window passed first (the log below names which)",
}


def reason_text(status: str, reason: str) -> str:
    """The meaning of a SKIPPED invocation's reason; "" for any other."""
    return SKIP_REASON_TEXT.get(reason, "") if status == "SKIPPED" else ""
_ATTEMPT = re.compile(r"attempt (\d+)(.*)", re.DOTALL)


# --- times ----------------------------------------------------------------------------------

def utc_text(value: datetime | None) -> str:
    if value is None:
        return ""
    return value.astimezone(load_zone("UTC")).strftime("%Y-%m-%d %H:%M:%S UTC")


def relative(value: datetime | None, now: datetime) -> str:
    """ "in 4m 10s", "3h 2m ago", "now"; the two largest units only."""
    if value is None:
        return ""
    seconds = round((value - now).total_seconds())
    if abs(seconds) < 1:
        return "now"
    parts, rest = [], abs(seconds)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m"), (1, "s")):
        amount, rest = divmod(rest, size)
        if amount:
            parts.append(f"{amount}{unit}")
    text = " ".join(parts[:2])
    return f"in {text}" if seconds > 0 else f"{text} ago"


def local_text(value: datetime, timezone: str) -> str:
    local = value.astimezone(load_zone(timezone))
    return local.strftime("%a %Y-%m-%d %H:%M:%S %Z (%z)")


# --- jobs -----------------------------------------------------------------------------------

def schedule_text(definition: JobDefinition) -> str:
    if definition.at is not None:
        times = definition.at
        return "at " + ", ".join(times[:3]) + (f" and {len(times) - 3} more" if len(times) > 3 else "")
    return str(definition.schedule)


def plain_schedule(definition: JobDefinition) -> str:
    """The schedule in words, or "" where the expression says it best."""
    if definition.at is not None:
        return describe_at(list(definition.at), definition.timezone) if definition.at else ""
    if definition.after:
        return f"once {', '.join(definition.after)} all succeeded for the same scheduled time"
    return describe_schedule(str(definition.schedule), definition.timezone) or ""


def next_run(job: StoredJob, now: datetime) -> datetime | None:
    """The Job's `next_run_time` (statemachine/shown.py): a staged occurrence's time until it comes."""
    return shown_next_run(job.record, now)


def active_since(entry: ActiveInvocation, now: datetime) -> tuple[str, datetime]:
    """How the job page dates an active invocation: ("due", its time) while it is staged
    and nothing is sent, else ("since", when its latest attempt started or it was due)."""
    if staged(entry, now) and entry.started_at is not None:
        return "due", entry.started_at
    return "since", entry.started_at or entry.scheduled_time


def next_fire_times(job: StoredJob, now: datetime, count: int = 5) -> list[datetime]:
    """The schedule's next `count` fire times after now (what a resume would follow),
    without those the job's exclusion calendars hold."""
    policy = job.record.policy
    if policy is None or job.record.disabled:
        return []
    try:
        schedule = policy.schedule
    except ScheduleError:
        return []
    if not is_clock_driven(schedule):
        return []
    times: list[datetime] = []
    moment: datetime | None = now
    while moment is not None and len(times) < count:
        moment = next_included(schedule, policy.exclude, next_fire(schedule, moment))
        if moment is not None:
            times.append(moment)
    return times


def last_result(recent: list[InvocationRow]) -> InvocationRow | None:
    return next((row for row in recent if row.status in TERMINAL), None)


def definition_yaml(definition: JobDefinition) -> str:
    text: str = yaml.safe_dump(definition.to_dict(), sort_keys=False, allow_unicode=True, default_flow_style=False)
    return text


def policies(definition: JobDefinition) -> list[tuple[str, str]]:
    """(name, value) of every policy the definition sets, as it spells them."""
    shown = definition.to_dict()
    if "exclude" in shown:  # a calendar's dates would fill the page: its name and zone say which it is
        shown["exclude"] = [f"{calendar['name']} ({calendar['timezone']})" for calendar in shown["exclude"]]
    shown["triggers"] = [edge if isinstance(edge, str) else f"{edge['job']} (on {edge['on']})"
                         for edge in shown["triggers"]]
    return [(name, _short(shown[name])) for name in POLICY_FIELDS if name in shown]


def _short(value: object) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{key}: {_short(item)}" for key, item in value.items()) or "—"
    if isinstance(value, (list, tuple)):
        return ", ".join(_short(item) for item in value) or "—"
    return "—" if value is None else str(value)


# --- invocations ----------------------------------------------------------------------------

@dataclass
class Attempt:
    event: int
    number: int
    started: str = ""
    finished: str = ""
    outcome: str = ""
    detail: str = ""
    duration_ms: int | None = None
    notes: list[str] = field(default_factory=list)


def attempts(log: list[dict[str, Any]]) -> list[Attempt]:
    """The attempts a log tells of: when each started, how it ended, what the target answered."""
    found: dict[tuple[int, int], Attempt] = {}
    for entry in log:
        match = _ATTEMPT.match(str(entry.get("message", "")))
        if not match:
            continue
        event, number = int(entry.get("event", 0) or 0), int(match.group(1))
        attempt = found.setdefault((event, number), Attempt(event, number))
        rest = match.group(2).strip()
        if rest == "starting":
            attempt.started = entry.get("time", "")
        elif rest.startswith(":") and not attempt.outcome:
            attempt.outcome, attempt.finished = rest[1:].strip(), entry.get("time", "")
            attempt.detail = str(entry.get("detail", "") or "")
            attempt.duration_ms = entry.get("duration_ms")
        else:
            attempt.notes.append(rest)  # e.g. "failed: http 500; retry at ..."
    return sorted(found.values(), key=lambda a: (a.number, a.event))


def request_sent(job: StoredJob, row: InvocationRow, service_host: str = "") -> dict[str, Any]:
    """The request of the invocation's latest recorded attempt as it was sent
    (engine/sent.py); for an invocation older than that record, its latest attempt
    (event 0) as the job's current definition renders it (without `recorded`).
    `service_host`: `${serviceHost}`, as deliveries render it."""
    recorded = next((entry["request"] for entry in reversed(row.log) if isinstance(entry.get("request"), dict)), None)
    if recorded is not None:
        return _recorded_request(recorded)
    return _rendered_request(job, row, service_host)


def _recorded_request(record: dict[str, Any]) -> dict[str, Any]:
    kind = str(record.get("kind", ""))
    if kind != "http":
        shown = {key: value for key, value in shown_request(record).items() if key != "kind"}
        return {"kind": kind, "text": json.dumps(shown, indent=2, ensure_ascii=False), "recorded": True}
    record = shown_request(record)  # one stored before today's masking rules is masked by them
    headers = {str(name): ("•••" if value == REDACTED else str(value))
               for name, value in (record.get("headers") or {}).items()}
    return {"kind": kind, "method": record.get("method", "POST"), "url": record.get("url", ""),
            "headers": headers, "body": record.get("body", ""), "body_bytes": record.get("body_bytes"),
            "async": record.get("async", False), "recorded": True}


def _rendered_request(job: StoredJob, row: InvocationRow, service_host: str) -> dict[str, Any]:
    target = job.definition.target
    context = TemplateContext(
        scheduled_time=row.scheduled_time, timezone=job.definition.timezone,
        project=row.project, job_id=row.job_id, invocation_id=row.id,
        attempt=max(row.attempt, 1), event_index=0, event_count=row.event_count, service_host=service_host,
    )
    try:
        # A secret is never read for a page: its header shows which secret it names.
        rendered = render_target(target, context, lambda _project, name: f"<secret {name}>")
    except ValueError as error:
        return {"kind": job.definition.target_kind.value, "error": str(error)}
    kind, spec = next(iter(rendered.items()))
    if kind != "http" or not isinstance(spec, dict):
        shown = masked_target({kind: spec})[kind]  # a cloud_tasks target has headers and a URL too
        return {"kind": kind, "text": json.dumps(shown, indent=2, ensure_ascii=False)}
    # Every header value but a harmless few's, and every secret-backed one (engine/sent.py).
    headers = {name: ("•••" if value == REDACTED else value)
               for name, value in masked_headers(spec.get("headers") or {}, secret_backed_headers(target)).items()}
    if spec.get("auth"):  # a token minted at each attempt, never kept: shown masked
        headers["Authorization"] = "•••"
    return {"kind": kind, "method": spec.get("method", "POST"), "url": masked_url(str(spec.get("url", ""))),
            "headers": headers, "body": spec.get("body", ""), "async": spec.get("async", False)}


def log_extras(entry: dict[str, Any]) -> list[tuple[str, str]]:
    """An entry's fields besides its time, message and detail."""
    return [(key, _short(value)) for key, value in entry.items() if key not in ("time", "message", "detail", "request")]
