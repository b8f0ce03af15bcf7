"""Occurrences staged before their time (`Tuning.stage_ahead`; the embedded backend).

When many occurrences share one instant T, committing each one's attempt at T puts
every storage write in front of the requests, and the last request leaves as late as
the commits take. Staging moves the commits ahead: a job whose timing allows it has its
tick queued `stage_ahead` before T (`ScheduleTick.lead`), and that tick, run early,
does what the tick at T would: it commits the invocation and its first attempt as
starting. The attempt's time is T plus the occurrence's jitter (`Deliver.send_at`,
the entry's `started_at`, and the watchdog's `expect_by` counted from it); the shell
holds the request until then and, just before sending, reads the job to check that the
attempt is still the one to send (engine/staged.py).

While its time has not come the attempt is *staged*, and every step of the job that
stops or changes the job gives it up in the same commit, so the check at T needs no
more than the stored entry:
- paused or disabled (a deleted job is disabled first): the occurrence is recorded
  SKIPPED (reason paused or disabled), as the tick at T would have recorded it;
- a new timing (schedule, timezone, at, start or end) that has no fire time at T:
  the occurrence is withdrawn (`withdraw_rescheduled`), as if its early tick had not
  run: without staging the tick for T would still be waiting, and the new timing's
  tick would supersede it. Only the new timing's fire times are delivered from then on;
- any other new definition (its revision changed: target, templates, jitter, or a
  timing that still fires at T): the attempt goes back to waiting for its start, a
  start task at its time, and is delivered then under the definition of that moment,
  as an occurrence waiting out its jitter is;
- its process gone before its request left (invocations.on_finished, `interrupted`):
  nothing was sent, so the same. Before its time that is certain; after it, the process
  says how far it got: before the stager lets the requests due at T out, it stores a
  mark "released up to T" (engine/adapters/local/release_marks.py), and an attempt due
  after its gone process's mark was never sent (`unsent`). Only an attempt due at or
  before the mark is an interrupted attempt, as one sent at its commit is.
An early tick stages only when nothing else of the job is under way (no invocation
active or waiting, nothing being recorded as dropped): otherwise it goes back to the
queue until T, and the overlap policy judges the occurrence at T, as without staging.

For the machine a staged attempt has started (the job's stored state is RUNNING); for
a reader nothing has happened before T, and statemachine/shown.py shows it so.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from statemachine import actions as act
from statemachine.catchup import delivered_late
from statemachine.policy import JobPolicy, Tuning
from statemachine.record import ActiveInvocation, JobRecord, Occurrence, evolve
from statemachine.runs import before
from statemachine.schedule import IntervalSchedule, is_clock_driven, next_fire
from statemachine.vocabulary import SkipReason, Trigger

Result = tuple[JobRecord, list[act.Action]]

def stageable(policy: JobPolicy | None, tuning: Tuning) -> bool:
    """Whether this job's occurrences may be staged: one event, no throttle (its queue is
    the throttle's concurrency), a clock-driven schedule (a relative one counts from the
    end of the last invocation, which is not known ahead)."""
    return (
        policy is not None
        and tuning.stage_ahead.total_seconds() > 0
        and policy.fanout.count == 1
        and not policy.throttle
        and is_clock_driven(policy.schedule)
        and not isinstance(policy.schedule, IntervalSchedule)
    )


def stages(policy: JobPolicy, tuning: Tuning, wait: timedelta) -> bool:
    """Whether an attempt due `wait` from now is staged. Its tick comes up to
    `stage_ahead` early, and a jitter of up to as much again is held too; a longer one
    waits on a start task, as without staging (a request is not held in memory for long)."""
    return stageable(policy, tuning) and wait <= 2 * tuning.stage_ahead


def may_stage_now(record: JobRecord, tuning: Tuning) -> bool:
    """Whether an early tick may stage its occurrence now, rather than wait for its time."""
    return (
        stageable(record.policy, tuning)
        and not (record.active or record.has_waiting or record.dropping or record.paused or record.disabled)
    )


def staged(entry: ActiveInvocation, now: datetime) -> bool:
    """An attempt committed as starting whose time has not come: not sent yet."""
    return (
        not entry.events_in_rows
        and entry.started_mask == 1
        and not (entry.done_mask or entry.accepted_mask)
        and entry.started_at is not None
        and entry.started_at > now
    )


def ahead_of_time(entry: ActiveInvocation, now: datetime) -> bool:
    """An occurrence of the schedule whose tick ran before its time (an early tick, above)
    and of which nothing was sent: staged, or (a jitter too long to hold the request)
    waiting for its start task. Without staging its tick would not have run yet."""
    return (
        entry.trigger == Trigger.SCHEDULE
        and entry.scheduled_time > now
        and not entry.events_in_rows
        and entry.attempts == (1,)
        and not (entry.done_mask or entry.accepted_mask)
        and (staged(entry, now) or not entry.started_mask)
    )


def withdraw_rescheduled(record: JobRecord, policy: JobPolicy, now: datetime) -> Result:
    """Before a new timing re-plans the job (machine._on_policy): withdraw what early
    ticks committed for times that `policy` does not fire at, as if those ticks had not
    run. The entry goes (no attempt is held for it any more: a staged request finds it
    gone at its check and is dropped, a start task finds nothing to start), and the job
    has handled fire times up to now again, so the new timing's tick comes at its first
    fire time after now, and no fire time of it is lost or handled twice.

    What of it is written (`WithdrawOccurrence`): nothing, when it lived only in its
    job's record (a staged one's invocation row is deferred until its attempt ends);
    that is what the job would show had its tick not run early, and it was never sent
    nor listed as more than starting. A row written already (the commit of a long
    jitter's start task, or a note about a lost process) ends SKIPPED, reason
    `rescheduled`: a reader may have seen it starting, and it must not stay so."""
    withdrawn = [entry for entry in record.active
                 if ahead_of_time(entry, now) and not _fires_at(policy, entry.scheduled_time)]
    if not withdrawn:
        return record, []
    gone = {entry.invocation_id for entry in withdrawn}
    kept = tuple(entry for entry in record.active if entry.invocation_id not in gone)
    ahead = [entry.scheduled_time for entry in kept if ahead_of_time(entry, now)]
    handled = min(record.scheduled_until or now, max([now, *ahead]))
    record = evolve(record, active=kept, scheduled_until=handled)
    return record, [act.WithdrawOccurrence(entry.invocation_id) for entry in withdrawn]


def _fires_at(policy: JobPolicy, moment: datetime) -> bool:
    return next_fire(policy.schedule, before(moment)) == moment


def unsent(entry: ActiveInvocation, released_until: datetime | None) -> bool:
    """A staged attempt its gone process never let out: due after the latest time that
    process had released (`InvocationFinished.released_until`, which is never earlier than
    the commit that held the attempt, so an attempt sent right after its commit never
    counts)."""
    return (
        released_until is not None
        and not entry.events_in_rows
        and entry.started_mask == 1
        and not (entry.done_mask or entry.accepted_mask)
        and entry.started_at is not None
        and entry.started_at > released_until
    )


def missed_meanwhile(record: JobRecord, entry: ActiveInvocation, attempt: int, now: datetime,
                     tuning: Tuning) -> bool:
    """A scheduled occurrence whose first attempt was never sent (its process died, or
    stopped, before letting it out) is judged now as its tick would judge it now: when
    its time has passed long enough, or a newer fire time is already due, the catch-up
    policy may record it missed rather than deliver it late."""
    policy = record.policy
    if policy is None or attempt != 1 or entry.trigger != Trigger.SCHEDULE or entry.scheduled_time > now:
        return False
    return not delivered_late(policy.schedule, entry.scheduled_time, now, policy, tuning)


def after_step(before: JobRecord, after: JobRecord, actions: list[act.Action], now: datetime,
               tuning: Tuning) -> Result:
    """Every step's last word (machine.step): give up the staged attempts a pause, a
    disable or a new definition overtook, and let the queue run the job's tick early."""
    if tuning.stage_ahead.total_seconds() <= 0:
        return after, actions
    after, actions = _give_up_overtaken(before, after, actions, now, tuning)
    if stageable(after.policy, tuning):
        actions = [evolve(action, lead=_lead(after, action.at, tuning))
                   if isinstance(action, act.ScheduleTick) else action for action in actions]
    return after, actions


def _lead(record: JobRecord, at: datetime, tuning: Tuning) -> timedelta:
    """How early the tick for `at` runs: `stage_ahead`, but at most half the time since the
    fire time handled last, so that a job every second has half a second to finish one
    invocation before the next is staged (else its tick waits for its time after all)."""
    handled = record.scheduled_until
    if handled is None or at <= handled:
        return tuning.stage_ahead
    return min(tuning.stage_ahead, (at - handled) / 2)


def _give_up_overtaken(before: JobRecord, after: JobRecord, actions: list[act.Action], now: datetime,
                       tuning: Tuning) -> Result:
    stopped = SkipReason.PAUSED if after.paused else SkipReason.DISABLED if after.disabled else None
    redefined = before.policy is not None and after.policy is not None and \
        before.policy.revision != after.policy.revision
    if stopped is None and not redefined:
        return after, actions
    actions = list(actions)
    for entry in after.active:
        if not staged(entry, now):
            continue
        if stopped is not None:
            after = evolve(after, active=tuple(e for e in after.active if e.invocation_id != entry.invocation_id))
            occurrence = Occurrence(entry.invocation_id, entry.scheduled_time, entry.trigger)
            actions.append(act.RecordSkipped.of(occurrence, stopped))
        else:
            after, waiting = wait_for_start(after, entry, tuning)
            actions += waiting
    return after, actions


def wait_for_start(record: JobRecord, entry: ActiveInvocation, tuning: Tuning) -> Result:
    """The staged attempt goes back to waiting for its start: a start task at its time
    (on_starting sends it then, under the job's definition of that moment). The new
    epoch makes the staged request stale, should it still go out."""
    at = entry.started_at or entry.scheduled_time
    entry = evolve(entry, started_mask=0, started_at=None, started_by="", epoch=entry.epoch + 1,
                   expect_by=at + tuning.start_grace)
    return record.with_active(entry), [act.EnqueueAttempt(entry.invocation_id, 0, entry.attempts[0], at)]
