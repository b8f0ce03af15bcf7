"""What readers are shown of a job at `now`: its state and its next run (pure).

The stored `JobRecord.state` is the machine's own projection of the record
(machine.derive_state): it picks the transition table's row, and knows no time. It
counts an occurrence committed ahead of its time (statemachine/staging.py) as
started, since for the machine it is: its attempt is committed. For a user nothing
has happened yet: nothing is sent before the occurrence's time, and without staging
its tick would not even have run. So every read surface (the API's Job, the UI's
pages and filters, /metrics) shows the job through these two functions, which need
`now` and leave the stored record, its layout and the machine as they are:

- an occurrence whose tick ran ahead of its scheduled time and of which nothing was
  sent (`staging.ahead_of_time`) is not active yet for the reader: the job is
  SCHEDULED (when nothing else of it is under way), and its next run is that
  occurrence's scheduled time (when it comes before the next tick's, as it does);
- a staged attempt whose scheduled time has passed but whose jitter has not
  (`staging.staged`) is waiting out its jitter: the job is QUEUED, as an occurrence
  admitted at its time and delayed by jitter is without staging (docs/REFERENCE.md
  section 4.7), and its next run is the following tick's;
- after the attempt's time, the job is RUNNING, as before.

Next runs are nominal times, never plus jitter, as `tick_at` is: the time the
occurrence stands for, which its headers and templates carry too. The jitter delays
only the delivery.
"""

from __future__ import annotations

from datetime import datetime

from statemachine.calendars import next_included
from statemachine.record import JobRecord, JobState
from statemachine.schedule import is_clock_driven, next_fire
from statemachine.staging import ahead_of_time, staged

__all__ = ["shown_state", "next_run", "under_way"]


def under_way(record: JobRecord, now: datetime) -> bool:
    """Whether an invocation of the job is active for a reader at `now` (starting,
    running or waiting out its jitter): one committed ahead of its time is not yet."""
    return any(not ahead_of_time(entry, now) for entry in record.active)


def shown_state(record: JobRecord, now: datetime) -> JobState:
    """The job's state as a reader sees it at `now` (the module's doc): the stored one,
    except that an occurrence committed ahead of its time does not count as started."""
    if record.state not in (JobState.RUNNING, JobState.QUEUED):
        return record.state  # DISABLED, PAUSED, SCHEDULED, DONE: a pause or disable gives staged ones up
    due = [entry for entry in record.active if not ahead_of_time(entry, now)]
    if not due:
        return JobState.SCHEDULED  # not DONE: its next run is the staged occurrence's time
    if any(entry.has_started and not staged(entry, now) for entry in due):
        return JobState.RUNNING
    return JobState.QUEUED


def next_run(record: JobRecord, now: datetime) -> datetime | None:
    """When the job next runs, as a reader sees it at `now`: the earliest nominal
    scheduled time among its occurrences committed ahead of their time, else its next
    tick; None while it is paused or disabled, or has nothing left to run. A tick whose
    time an exclusion calendar holds is not a run: the first fire time after it is; nor
    is the tick a resume arms at its own instant: the first fire time after the pause is."""
    if record.paused or record.disabled:
        return None
    ahead = [entry.scheduled_time for entry in record.active if ahead_of_time(entry, now)]
    tick_at = record.tick_at
    policy = record.policy
    if policy is not None and policy.after:
        tick_at = None  # a fan-in job's tick ends a wait (statemachine/fanin.py); it runs nothing
    if tick_at is not None and policy is not None and is_clock_driven(policy.schedule):
        if record.paused_through is not None and tick_at <= record.paused_through:
            # The tick a resume arms at once records what fell due while paused; the
            # first fire time after the pause is the run.
            tick_at = next_fire(policy.schedule, record.paused_through)
        if policy.exclude and tick_at is not None:
            tick_at = next_included(policy.schedule, policy.exclude, tick_at)
    if tick_at is not None:
        ahead.append(tick_at)
    return min(ahead, default=None)
