"""The REST API's use cases: API-managed jobs, operator actions, async completion.

Every change to a job still goes through `engine.changes.apply` (load -> step -> save +
enqueue in one transaction); this module decides which events a request means and
what it may not do. Entries arrive here already validated (config.loader checks a
PUT body the way it checks a config file's entry); the checks that need the store
(config-managed ids, triggers, the number of jobs) happen here.

Deleting an API job is three steps, each safe to stop after:
1. `JobDisabled`, with the stored job marked `deleted`: no new occurrences, buffered
   ones dropped, pending ticks stale; from here on the API shows no such job.
2. `Aborted("deleted")`: invocations not yet delivered never will be.
3. The row goes, unless something revived the job meanwhile.
A crash between steps leaves a hidden, disabled "tombstone" that a new PUT revives.

Every use case that changes a job takes the `actor` asking for it, and records the
action in the audit log (engine/audit.py) in the transaction of its change.
"""

from __future__ import annotations

import hmac
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable

from engine.audit import UNKNOWN_ACTOR, Audit, described, write_audit
from engine.changes import Applied, Change, Note
from engine.delivery import target_credentials
from engine.errors import NotFound, Refused
from engine.inbox import INLINE_FOLD_ROWS, Pending
from engine.ports import InvocationRow, JobSource, ProjectRow, StoredJob, Transaction
from engine.queries import visible
from engine.service import Engine
from statemachine import events as ev
from statemachine import ids
from statemachine.backfill import rerun_time
from statemachine.definition import JobDefinition
from statemachine.durations import UTC, rfc3339_millis
from statemachine.machine import InvalidTransition, manual_invocation_id, step
from statemachine.policy import JobPolicy
from statemachine.safety import redact_echoes
from statemachine.vocabulary import TERMINAL_STATUSES, AbortReason, AuditAction, InvocationStatus, Trigger

TERMINAL = TERMINAL_STATUSES
# How many of a job's newest invocations a retried trigger request is looked for in.
REQUEST_LOOKBACK = 100
# The reason of a triggered invocation the API answers before the job's inbox was
# folded (engine/inbox.py): accepted, and to be started under the overlap policy.
ACCEPTED = "accepted"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Unread:
    """No row read yet: the use case reads it (None would say there is none)."""


UNREAD = Unread()


@dataclass(frozen=True)
class Put:
    job: StoredJob
    created: bool  # a new API job (201), not a replacement (200)


def config_defines(row: ProjectRow, stored: StoredJob | None, job_id: str) -> bool:
    """Does the project's config file define this job (now, not in the past)?"""
    listed = row.settings.get("config_jobs")
    if listed is not None:
        return job_id in listed
    # A project imported before config_jobs was recorded: a config job that is
    # disabled although its definition is not was removed from the file.
    return (stored is not None and stored.source == JobSource.CONFIG
            and not (stored.record.disabled and not stored.definition.disabled))


# --- API-managed jobs --------------------------------------------------------------------

def put_job(engine: Engine, project: str, job_id: str, policy: JobPolicy, definition: JobDefinition,
            disabled: bool, max_jobs: int, actor: str = UNKNOWN_ACTOR, *, row: ProjectRow | None = None,
            read: StoredJob | None | Unread = UNREAD) -> Put:
    """Create or replace an API job. The same definition again changes nothing.

    `row`, `read`: the project's row and the job's (None: no job row) as the caller read
    them just before (each spares a read; the transaction reads the job again anyway).
    """
    row = row if row is not None else engine.queries.project(project)
    stored = engine.queries.stored_job(project, job_id) if isinstance(read, Unread) else read
    room = stored is not None or engine.queries.job_count(project) < max_jobs
    change, created = put_change(row, stored, job_id, PutEntry(policy, definition, disabled), actor, room,
                                 stored_triggers(engine, project), max_jobs)
    if stored is not None and not created and changes_nothing(engine, stored, change):
        return Put(stored, created=False)
    with engine.writers.admit(project, job_id):
        applied = engine.changes.apply(project, job_id, change.event, definition=definition, source=JobSource.API,
                                       audit=change.audit)
    return Put(applied.job, created)


@dataclass(frozen=True)
class PutEntry:
    """A PUT body, validated (config.loader.parse_job_entry)."""

    policy: JobPolicy
    definition: JobDefinition
    disabled: bool


# A job's triggers by its id; None for a job that does not exist.
TriggersOf = Callable[[str], "tuple[str, ...] | None"]


def stored_triggers(engine: Engine, project: str) -> TriggersOf:
    def triggers_of(name: str) -> tuple[str, ...] | None:
        stored = engine.queries.find_job(project, name)
        return None if stored is None else stored.definition.trigger_targets
    return triggers_of


def put_change(row: ProjectRow, stored: StoredJob | None, job_id: str, entry: PutEntry, actor: str, room: bool,
               triggers_of: TriggersOf, max_jobs: int) -> tuple[Change, bool]:
    """The change a PUT of `entry` makes to the stored job (None: no row), and whether it
    creates an API job; `room`: whether the project may have one more job row.

    :raises Refused: the PUT is not allowed; nothing is to be written.
    """
    project = row.id
    if config_defines(row, stored, job_id):
        raise Refused("ALREADY_EXISTS", f"job {project}/{job_id} is defined in the project's "
                                        "config file; change it there")
    if not room:
        raise Refused("FAILED_PRECONDITION", f"project {project} has {max_jobs:,} jobs, the "
                                             "most a project may have; delete some first")
    _check_triggers(project, job_id, entry.definition.trigger_targets, triggers_of)
    event = ev.JobDisabled() if entry.disabled else ev.JobEnabled(entry.policy)
    created = stored is None or stored.source != JobSource.API or not visible(stored)
    detail = {"created": created, "after": described(entry.definition)}
    if stored is not None and not created:
        detail["before"] = described(stored.definition)
    audit = Audit(actor, AuditAction.PUT, detail)
    return Change(project, job_id, event, audit=audit, definition=entry.definition, source=JobSource.API), created


def delete_job(engine: Engine, project: str, job_id: str, allow_missing: bool = False,
               actor: str = UNKNOWN_ACTOR) -> None:
    """Stop the job for good: nothing pending is delivered afterwards."""
    row = engine.queries.project(project)
    stored = engine.queries.stored_job(project, job_id)
    if stored is None or not visible(stored):
        if allow_missing:
            return
        raise NotFound(f"job {project}/{job_id} not found")
    if config_defines(row, stored, job_id):
        raise Refused("FAILED_PRECONDITION", f"job {project}/{job_id} is defined in the "
                                             "project's config file; remove it there")
    with engine.writers.admit(project, job_id):
        # The entry rides on the first step: from its commit on, the job is gone for readers.
        engine.changes.apply(project, job_id, ev.JobDisabled(), definition=stored.definition, source=stored.source,
                             deleted=True, audit=Audit(actor, AuditAction.DELETE))
        engine.changes.apply(project, job_id, ev.Aborted(AbortReason.DELETED))
        engine.changes.write(lambda tx: _remove_if_still_deleted(tx, project, job_id))


def _remove_if_still_deleted(tx: Transaction, project: str, job_id: str) -> None:
    stored = tx.get_job(project, job_id)
    # A PUT since step 1 revived it; an active invocation would lose its record.
    if stored is not None and not visible(stored) and not stored.record.active:
        tx.delete_job(project, job_id)


def changes_nothing(engine: Engine, stored: StoredJob, change: Change) -> bool:
    """Whether a PUT's `change` of the job as read would write nothing: the same definition
    (and source, not deleted), and a step that neither changes the record nor acts. Then no
    transaction is needed (the same body sent again, as `jobs apply` of a whole directory
    does): the PUT is as of that read, like one that came just before a later change."""
    if (change.definition, change.source) != (stored.definition, stored.source) or stored.deleted \
            or not isinstance(change.event, (ev.JobEnabled, ev.JobDisabled)):
        return False
    try:
        transition = step(stored.record, change.event, engine.clock.now(), engine.changes.tuning)
    except InvalidTransition:
        return False  # (the transaction refuses it, with its words)
    return not transition.actions and transition.record == stored.record


def _check_triggers(project: str, job_id: str, triggers: tuple[str, ...], triggers_of: TriggersOf) -> None:
    for name in triggers:
        if name != job_id and triggers_of(name) is None:
            raise Refused("INVALID_ARGUMENT", f"triggers: unknown job '{name}' in project {project}")
    cycle = _cycle_through(job_id, triggers, triggers_of)
    if cycle:
        raise Refused("INVALID_ARGUMENT", f"triggers: trigger cycle: {' -> '.join(cycle)}")


def _cycle_through(job_id: str, triggers: tuple[str, ...], triggers_of: TriggersOf) -> list[str] | None:
    """A path job_id -> ... -> job_id along the known jobs' triggers, or None.

    Breadth first from the new triggers, looking up only the jobs reachable from them,
    so its cost does not grow with the size of the project.
    """
    paths = {name: [job_id, name] for name in triggers}
    frontier = list(paths)
    while frontier:
        name = frontier.pop(0)
        if name == job_id:
            return paths[name]
        for following in triggers_of(name) or ():
            if following not in paths:
                paths[following] = paths[name] + [following]
                frontier.append(following)
    return None


# --- operator actions --------------------------------------------------------------------

def pause(engine: Engine, project: str, job_id: str, reason: str = "", actor: str = UNKNOWN_ACTOR) -> StoredJob:
    engine.queries.job(project, job_id)
    audit = Audit(actor, AuditAction.PAUSE, {"reason": reason})
    with engine.writers.admit(project, job_id):
        return engine.changes.apply(project, job_id, ev.Paused(reason, by=actor), audit=audit).job


def resume(engine: Engine, project: str, job_id: str, actor: str = UNKNOWN_ACTOR, reason: str = "") -> StoredJob:
    engine.queries.job(project, job_id)
    audit = Audit(actor, AuditAction.RESUME, {"reason": reason} if reason else {})
    with engine.writers.admit(project, job_id):
        return engine.changes.apply(project, job_id, ev.Resumed(), audit=audit).job


def abort(engine: Engine, project: str, job_id: str, reason: str = "", actor: str = UNKNOWN_ACTOR) -> StoredJob:
    engine.queries.job(project, job_id)
    reason = reason or "aborted"
    audit = Audit(actor, AuditAction.ABORT, {"reason": reason})
    with engine.writers.admit(project, job_id):
        return engine.changes.apply(project, job_id, ev.Aborted(reason), audit=audit).job


def record_audit(engine: Engine, project: str, job_id: str, actor: str, action: AuditAction,
                 detail: dict[str, Any] | None = None) -> None:
    """Record an action in a transaction of its own, right after the action's last commit
    (engine/audit.py: prefer `engine.changes.apply(..., audit=Audit(...))` where one
    change carries the action). `detail` holds JSON values only.

    :raises StoreError: nothing was recorded.
    """
    write_audit(engine.changes.write, engine.clock.now(), project, job_id, Audit(actor, action, detail or {}))


def trigger(engine: Engine, project: str, job_id: str, request_id: str | None = None,
            scheduled_time: datetime | None = None, actor: str = UNKNOWN_ACTOR,
            history: timedelta | None = None) -> InvocationRow:
    """Start an invocation now, under the job's overlap policy; with `scheduled_time`
    (past, and within `history` of now when given: the job's history window), the
    re-run of that occurrence: its scheduled time and template values.

    The trigger is appended to the job's inbox (engine/inbox.py), which waits for no
    other writer of the job, and folded into the job's record at once when this
    process has no other writer of the job at work (engine/writers.py); otherwise the
    job's `inbox` task folds it within a moment. The answer is then the invocation as
    far as it is known: its id, scheduled time and trigger, with status STARTING and
    reason `accepted` until the fold has made it.

    A job that refuses a person's trigger (paused, disabled) refuses it here, before
    anything is written. The same `request_id` again (a client retrying) returns the
    invocation the first request made, as long as it is pending or among the job's
    newest REQUEST_LOOKBACK ones (a re-run's id follows from its time and request id,
    so the store finds it anyway).
    """
    stored = engine.queries.job(project, job_id)
    if request_id and scheduled_time is None:
        earlier = _earlier_request(engine, stored, request_id)
        if earlier is not None:
            return earlier
    now = engine.clock.now()
    at = now if scheduled_time is None else rerun_time(scheduled_time, now, history)
    pending = Pending(request_id or uuid.uuid4().hex, Trigger.MANUAL, at)
    event = pending.event()
    step(stored.record, event, now, engine.changes.tuning)  # :raises InvalidTransition: refused; nothing written
    invocation_id = manual_invocation_id(stored.record, event, at)
    detail = {"invocation": invocation_id}
    if scheduled_time is not None:  # a re-run: which occurrence it stands for
        detail["scheduled_time"] = rfc3339_millis(at)
    pending = engine.inbox.append(project, job_id, pending, Audit(actor, AuditAction.TRIGGER, detail))
    at = pending.at  # a retried request still pending keeps its first time, and so its id
    invocation_id = manual_invocation_id(stored.record, pending.event(), at)
    with engine.writers.may_write(project, job_id, alone=True) as admitted:
        folded = engine.inbox.fold(project, job_id, INLINE_FOLD_ROWS) if admitted else []
    if not admitted:  # the job's inbox task folds it; nothing more to read now
        return _buffered(project, job_id, invocation_id, at, ACCEPTED)
    row = engine.queries.find_invocation(project, job_id, invocation_id)
    if row is not None:
        return row
    # No row yet: the overlap policy buffered it behind an active invocation, or it
    # was not among the rows this request folded.
    records = [applied.job.record for applied in folded if isinstance(applied, Applied)]
    waiting = bool(records) and any(entry.invocation_id == invocation_id for entry in records[-1].buffered)
    return _buffered(project, job_id, invocation_id, at, "buffered" if waiting else ACCEPTED)


def _buffered(project: str, job_id: str, invocation_id: str, at: datetime, reason: str = "buffered") -> InvocationRow:
    return InvocationRow(project, job_id, invocation_id, InvocationStatus.STARTING, at, Trigger.MANUAL,
                         reason=reason, created_time=at)


def _earlier_request(engine: Engine, stored: StoredJob, request_id: str) -> InvocationRow | None:
    project, job_id = stored.record.project, stored.record.job_id

    def made_by_request(invocation_id: str) -> bool:
        # The id encodes its time to the millisecond; half a millisecond more keeps
        # float rounding from moving the time back across a millisecond.
        at = _EPOCH + timedelta(milliseconds=ids.scheduled_millis(invocation_id), microseconds=500)
        return ids.invocation_id(project, job_id, at, ids.MANUAL, request_id) == invocation_id

    rows, _ = engine.queries.invocations(project, job_id, REQUEST_LOOKBACK, None, read=stored)
    for row in rows:
        if row.trigger == Trigger.MANUAL and made_by_request(row.id):
            return row
    for waiting in stored.record.buffered:
        if waiting.trigger == Trigger.MANUAL and made_by_request(waiting.invocation_id):
            return _buffered(project, job_id, waiting.invocation_id, waiting.scheduled_time)
    return None


# --- async completion --------------------------------------------------------------------

def _masked_report(engine: Engine, project: str, job_id: str, message: str, token: str) -> str:
    """A target's report as readers may see it: the completion token and the literal
    credentials of the job's own target (its headers and URL) masked, should the target
    echo them (secret-backed values are resolved only at a send, and are not known here)."""
    if not message:
        return message
    stored = engine.queries.stored_job(project, job_id)
    return redact_echoes(message, target_credentials(stored.definition.target if stored is not None else {}, token))


def complete(engine: Engine, project: str, job_id: str, invocation_id: str, token: str,
             succeeded: bool, message: str = "") -> InvocationRow:
    """An async target's report. The token is checked before anything is read."""
    if not token:
        raise Refused("UNAUTHENTICATED", "a completion token is required, in "
                                         "X-Sundial-Completion-Token or Authorization: Bearer")
    expected = engine.deliveries.completion_token(invocation_id)
    if not hmac.compare_digest(token.encode("utf-8", "surrogateescape"), expected.encode()):
        raise Refused("PERMISSION_DENIED", f"wrong completion token for invocation {invocation_id}")
    row = engine.queries.invocation(project, job_id, invocation_id)
    status = InvocationStatus.SUCCEEDED if succeeded else InvocationStatus.FAILED
    if row.status in TERMINAL:
        if row.status == status:
            return row  # the target repeating its callback
        reason = f" ({row.reason})" if row.reason else ""
        raise Refused("FAILED_PRECONDITION",
                      f"invocation {invocation_id} has already finished: {row.status}{reason}")
    message = _masked_report(engine, project, job_id, message, expected)
    reason = "" if succeeded else (message or "failed")
    note = Note(invocation_id, f"completion: {status}", {"detail": message} if message else {})
    event = ev.InvocationFinished(invocation_id, succeeded, reason, attempt=None)
    applied = engine.changes.apply(project, job_id, event, note=note)
    while applied.transition.more:  # a big fan-out's events, a commit's worth at a time
        applied = engine.changes.apply(project, job_id, event)
    return engine.queries.find_invocation(project, job_id, invocation_id) or row
