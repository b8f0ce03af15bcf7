"""A finish written to its invocation's row alone, applied to the job by its next step.

An invocation of a cron job costs two commits: its tick (the job's record: the next
tick, and the attempt about to be sent) and its result. Written the plain way, the
result touches two entities: the invocation's history row and the job's record, which
only drops the finished invocation from its active list. When the result changes
nothing else about the job (no retry, no waiting occurrence to start, no notification,
the same watchdog time), the job's record is left as it is: the row says how the
invocation ended, and whatever reads the job next (its next tick, the watchdog, an API
call, a page) replays that finish from the row before anything else. One entity write
per result instead of two, one more read (cheap) at the next step.

Three rules keep it exact. A finish is deferred only when replaying it from the row, as
stored, gives exactly the record that applying it now gives (the machine is pure, so
the replay is the same computation); only when no other deferred finish is pending on
the job, so at most one replay is ever outstanding; and only for a row made less than
FRESH_ROW ago. The history clean-up removes rows by their age and keeps at least a day
(SUNDIAL_HISTORY_DAYS >= 1), and the job replays the finish at its next step, by its
watchdog time at the latest (unchanged by the finish, so at most an attempt's lease
away): a young row is still there when its job comes to replay it. A row is final and still
listed as active in its job's record only in this way: every other finish writes both
in one transaction.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Callable

from engine.ports import InvocationRow
from statemachine import actions as act
from statemachine import events as ev
from statemachine.machine import Transition, step
from statemachine.policy import Tuning
from statemachine.record import ActiveInvocation, JobRecord
from statemachine.vocabulary import InvocationStatus

# What a row's finish can be replayed as: the two outcomes of an attempt's answer.
REPLAYABLE = (InvocationStatus.SUCCEEDED, InvocationStatus.FAILED)

FRESH_ROW = timedelta(hours=12)  # well inside the shortest history kept (a day)

ReadRow = Callable[[str], InvocationRow | None]  # an invocation's row by its id


def may_hold_finish(entry: ActiveInvocation) -> bool:
    """One event, its attempt sent: the only invocations whose finish may be deferred."""
    return entry.event_count == 1 and not entry.events_in_rows and entry.has_started


def finish_of(row: InvocationRow) -> ev.InvocationFinished:
    """The attempt's answer as its final row tells it."""
    return ev.InvocationFinished(row.id, row.status == InvocationStatus.SUCCEEDED, row.reason, 0, row.attempt)


def settle_deferred(record: JobRecord, read_row: ReadRow, tuning: Tuning) -> JobRecord:
    """`record` with the finishes that were written only to their rows applied.

    :raises StoreError: a row could not be read.
    """
    for entry in record.active:
        if not may_hold_finish(entry):
            continue
        row = read_row(entry.invocation_id)
        if row is None or row.status not in REPLAYABLE or row.finished_time is None:
            continue
        record = step(record, finish_of(row), row.finished_time, tuning).record
    return record


def may_defer(before: JobRecord, event: object, now: datetime, transition: Transition, row: InvocationRow | None,
              tuning: Tuning) -> bool:
    """Whether the job's record may stay `before` while `row` (as written by this step)
    carries the finish that `transition` applied.

    `before` must have no deferred finish pending (see settle_deferred).
    """
    if not isinstance(event, ev.InvocationFinished) or row is None or row.finished_time is None:
        return False
    if not all(isinstance(action, act.FinishInvocation) for action in transition.actions):
        return False  # a retry, a notification, a trigger, a waiting start: the job must say so
    if not transition.actions or transition.record.watchdog_at != before.watchdog_at:
        return False  # the watchdog would look at the wrong time
    entry = before.find_active(event.invocation_id)
    if entry is None or not may_hold_finish(entry) or row.status not in REPLAYABLE:
        return False
    if row.created_time is None or now - row.created_time > FRESH_ROW:
        return False  # the clean-up could take its row before the job replays it
    replayed = finish_of(row)
    # (The row keeps no epoch: the answer it carries was the current one when it was written.)
    if replayed != replace(event, epoch=None):
        return False  # the row cannot tell this answer exactly (e.g. an async completion report)
    # The same event at the same instant is the same pure step (an entry outside rows is
    # stepped by `machine.step` itself), so only the instant is left to check: stores
    # keep times to the millisecond or better, and the replay must not depend on less.
    return step(before, replayed, _to_millis(now), tuning) == transition


def _to_millis(instant: datetime) -> datetime:
    return instant - timedelta(microseconds=instant.microsecond % 1000)
