"""Fan-in (`after: [a, b]`): a job that runs once for a scheduled time T when every
upstream job it lists has an invocation for T that SUCCEEDED.

Each upstream job's invocation, when it ends, is reported to the fan-in job through the
same path as a `triggers` start (the shell's trigger task and the job's inbox): a
`ManualTrigger` with trigger `after` carrying the upstream job, its status and its
scheduled time T. The fan-in job keeps, per T, the upstream jobs that succeeded so far
(`JobRecord.awaiting`, oldest first):
- the last one of them to succeed starts the invocation for T (trigger `after`, one
  invocation id per T, under the job's overlap policy);
- an upstream invocation that ends otherwise (FAILED, ABORTED, SKIPPED) decides T at
  once: SKIPPED, reason `upstream`, its log naming the job and its status;
- `after_window` after T's first report, a T still waiting is SKIPPED/upstream, naming
  the jobs that did not succeed; the job's tick is armed at the earliest such time;
- at most MOST_AWAITED times wait: a new one beyond drops the oldest (SKIPPED/upstream
  if it was still waiting).
A decided T stays in the map until its window ends, so that a late or repeated report
for it (a re-run of an upstream occurrence) starts nothing a second time.

A paused or disabled job keeps counting; a T completed meanwhile is recorded SKIPPED
(paused/disabled), as another job's trigger is. Nothing here reads a clock.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from statemachine import actions as act
from statemachine import admission, ids
from statemachine import events as ev
from statemachine.chain import arm
from statemachine.durations import format_duration
from statemachine.invocations import Result
from statemachine.policy import Tuning
from statemachine.record import Awaited, JobRecord, Occurrence, evolve
from statemachine.vocabulary import InvocationStatus, SkipReason, Trigger

__all__ = ["MOST_AWAITED", "next_deadline", "on_report", "on_tick", "reports_or", "is_report"]

# Scheduled times one fan-in job waits on at once: bounds its record (an upstream job
# every second with a 1h window would otherwise keep 3,600).
MOST_AWAITED = 100

Handler = Callable[[JobRecord, Any, datetime, Tuning], Result]


def is_report(event: ev.ManualTrigger) -> bool:
    return event.upstream is not None


def reports_or(handler: Handler) -> Handler:
    """`handler` for a ManualTrigger, `on_report` for a fan-in report."""

    def route(record: JobRecord, event: ev.ManualTrigger, now: datetime, tuning: Tuning) -> Result:
        return on_report(record, event, now, tuning) if is_report(event) else handler(record, event, now, tuning)

    return route


def occurrence(record: JobRecord, scheduled_time: datetime) -> Occurrence:
    """The fan-in job's one occurrence for `scheduled_time`."""
    invocation = ids.invocation_id(record.project, record.job_id, scheduled_time, ids.AFTER)
    return Occurrence(invocation, scheduled_time, Trigger.AFTER)


def on_report(record: JobRecord, event: ev.ManualTrigger, now: datetime, tuning: Tuning) -> Result:
    """Count upstream job `event.upstream`'s invocation for `event.at`, which ended
    `event.upstream_status`; start or skip that time when this decides it."""
    policy, at = record.live_policy, event.at
    if at is None or event.upstream not in policy.after:
        return record, []  # not (any more) one of this job's upstream jobs
    record, actions = _expire(record, now)
    if _find(record, at) is None:
        record, dropped = _add(record, Awaited(at, now + policy.after_window))
        actions += dropped
    entry = _find(record, at)  # None: older than every time kept, it went at once
    if entry is not None and not entry.decided:
        record, decided = _count(record, entry, event, now, tuning)
        actions += decided
    return _rearm(record, actions)


def on_tick(record: JobRecord, now: datetime) -> Result:
    """The job's tick, armed at the earliest window's end: skip every time whose window
    has passed, and arm the next."""
    record, actions = _expire(record, now)
    return _rearm(record, actions)


def next_deadline(record: JobRecord) -> datetime | None:
    """When the earliest waiting time's window ends (the job's tick then); None when none waits."""
    return min((entry.until for entry in record.awaiting if not entry.decided), default=None)


def _count(record: JobRecord, entry: Awaited, event: ev.ManualTrigger, now: datetime, tuning: Tuning) -> Result:
    upstream = event.upstream or ""
    if event.upstream_status != InvocationStatus.SUCCEEDED:
        detail = f"upstream job {upstream} ended {event.upstream_status}"
        return _decide(record, entry), [act.RecordSkipped.of(occurrence(record, entry.scheduled_time),
                                                             SkipReason.UPSTREAM, detail)]
    succeeded = tuple(dict.fromkeys((*entry.succeeded, upstream)))
    if not set(record.live_policy.after) <= set(succeeded):
        return _replace(record, entry, evolve(entry, succeeded=succeeded)), []
    record = _decide(record, entry)
    due = occurrence(record, entry.scheduled_time)
    if record.disabled or record.paused:
        reason = SkipReason.DISABLED if record.disabled else SkipReason.PAUSED
        return record, [act.RecordSkipped.of(due, reason)]
    return admission.admit(record, due, now, tuning)


def _expire(record: JobRecord, now: datetime) -> Result:
    """Drop the times whose window has passed: a waiting one is SKIPPED/upstream."""
    if not any(entry.until <= now for entry in record.awaiting):
        return record, []
    actions: list[act.Action] = [_missing(record, entry) for entry in record.awaiting
                                 if entry.until <= now and not entry.decided]
    return evolve(record, awaiting=tuple(entry for entry in record.awaiting if entry.until > now)), actions


def _add(record: JobRecord, entry: Awaited) -> Result:
    """Keep `entry` in time order; beyond MOST_AWAITED the oldest times go."""
    kept = sorted((*record.awaiting, entry), key=lambda each: each.scheduled_time)
    gone, kept = kept[:-MOST_AWAITED], kept[-MOST_AWAITED:]
    actions: list[act.Action] = [_missing(record, old, "too many scheduled times waiting")
                                 for old in gone if not old.decided]
    return evolve(record, awaiting=tuple(kept)), actions


def _missing(record: JobRecord, entry: Awaited, why: str = "") -> act.RecordSkipped:
    """T skipped for the upstream jobs that did not succeed for it (named in its log)."""
    missing = [name for name in record.live_policy.after if name not in entry.succeeded]
    detail = f"no success of {', '.join(missing)} within {_window(record)}" if not why else \
        f"{why}; no success of {', '.join(missing)}"
    return act.RecordSkipped.of(occurrence(record, entry.scheduled_time), SkipReason.UPSTREAM, detail)


def _window(record: JobRecord) -> str:
    return format_duration(record.live_policy.after_window)


def _find(record: JobRecord, at: datetime) -> Awaited | None:
    return next((entry for entry in record.awaiting if entry.scheduled_time == at), None)


def _replace(record: JobRecord, old: Awaited, new: Awaited) -> JobRecord:
    return evolve(record, awaiting=tuple(new if entry is old else entry for entry in record.awaiting))


def _decide(record: JobRecord, entry: Awaited) -> JobRecord:
    return _replace(record, entry, evolve(entry, decided=True))


def _rearm(record: JobRecord, actions: list[act.Action]) -> Result:
    """Point the job's tick at the earliest window's end (none while stopped: resuming arms it)."""
    due = None if record.paused or record.disabled else next_deadline(record)
    if due == record.tick_at or record.dropping:  # rows to record: their tick (now) comes first
        return record, actions
    record, armed = arm(record, due)
    return record, actions + armed
