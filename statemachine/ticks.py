"""The tick half of the machine: arming a job's next tick, and handling the fire times
a tick finds due.

A tick is named by a nonce (statemachine/chain.py). A tick also records, a batch at a
time, the occurrences that stopped waiting (`JobRecord.dropping`): while any are left,
the job's next tick is armed for now, even when it is paused or disabled. Every function
takes a record and returns (record, actions); none looks at anything but its arguments.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from statemachine import actions as act
from statemachine import admission, fanin, runs, staging, waiting
from statemachine import events as ev
from statemachine import invocations as inv
from statemachine.budget import ROWS_PER_STEP
from statemachine.calendars import excluded_by
from statemachine.catchup import DuePlan, plan_due
from statemachine.chain import arm
from statemachine.invocations import Result
from statemachine.policy import Tuning, exponential_step
from statemachine.record import JobRecord, evolve
from statemachine.schedule import IntervalSchedule, is_clock_driven, next_fire
from statemachine.vocabulary import SkipReason, Trigger

__all__ = ["after_invocations", "arm", "arm_next", "on_tick", "settle_backlog", "stage_pending"]

_MILLISECOND = timedelta(milliseconds=1)


def arm_next(record: JobRecord, now: datetime) -> Result:
    """Arm the tick that follows what the record has handled so far."""
    if record.awaiting and record.policy is not None and not record.policy.after:
        record = evolve(record, awaiting=())  # no longer a fan-in job: its waits go with its `after`
    if record.dropping:
        return arm(record, now)  # a tick records the next batch of them
    # Callers in every state come here (a new policy arrives while paused, too).
    if record.disabled or record.paused:
        return arm(record, None)
    schedule = record.live_policy.schedule
    if isinstance(schedule, IntervalSchedule):
        if record.active or record.has_waiting:
            return arm(record, None)
        at = now + max(schedule.interval, _least_wait(record))
        if record.scheduled_until is not None and at <= record.scheduled_until:
            # Occurrence ids have millisecond resolution: a run shorter than that
            # must not give the next occurrence the same scheduled time.
            at = record.scheduled_until + _MILLISECOND
        return arm(record, at)
    if not is_clock_driven(schedule):
        return arm(record, fanin.next_deadline(record))  # a fan-in job's earliest window end, if any
    return arm(record, next_fire(schedule, record.scheduled_until or now))


def _least_wait(record: JobRecord) -> timedelta:
    """A relative schedule (`continuously`, `with 0s interval`) waits at least
    `min_backoff` after every invocation, a success too: a target that answers at once
    would otherwise be called flat out (tens of times a second, a write each). After
    failures it waits like a retry, doubling per consecutive failure up to
    `max_backoff`. Without jitter, so it never waits less."""
    if record.policy is None:
        return timedelta(0)
    retry = record.live_policy.retry
    failures = record.consecutive_failures
    return exponential_step(retry.min_backoff, retry.max_backoff, failures) if failures else retry.min_backoff


def on_tick(record: JobRecord, event: ev.TickArrived, now: datetime, tuning: Tuning) -> Result:
    tick_at = record.tick_at
    if event.nonce != record.tick_nonce or tick_at is None:
        if event.redelivered:  # its earlier run died: what it delivered inline goes again
            return redeliver_inline(record, event.nonce, now, tuning)
        return record, []  # stale: superseded by a newer tick, or a duplicate
    record, actions = _on_current_tick(record, tick_at, now, tuning)
    return inv.mark_inline(record, actions, event.nonce), actions


def stage_pending(record: JobRecord, now: datetime, tuning: Tuning) -> Result:
    """Stage the job's next occurrence now, if its tick is pending within `stage_ahead`
    and nothing of the job is under way any more: what its tick, queued `lead` early,
    would do when it came (`_on_current_tick`), done by the step that freed the job, so
    that a job every few seconds takes one step per occurrence instead of two. The tick
    it spares is taken off the queue (CancelTick); one already taken is found stale.
    A staged attempt's inline mark (`mark_inline`) is left unset: no tick started it."""
    tick_at, nonce = record.tick_at, record.tick_nonce
    if tick_at is None or not nonce:
        return record, []
    early = tick_at - now
    if early <= tuning.accept_early or early > tuning.stage_ahead or not staging.may_stage_now(record, tuning) \
            or _excluded(record, tick_at):
        return record, []
    record, actions = _on_current_tick(record, tick_at, now, tuning)
    return record, actions + [act.CancelTick(nonce, tick_at)]


def _on_current_tick(record: JobRecord, tick_at: datetime, now: datetime, tuning: Tuning) -> Result:
    early = tick_at - now
    if early > tuning.accept_early and staging.stageable(record.policy, tuning):
        # Queued ahead to stage its occurrence (staging.py); when something else of the
        # job is under way it waits for its time instead, as an unstaged tick would.
        if early > tuning.stage_ahead + tuning.early_slack or not staging.may_stage_now(record, tuning) \
                or _excluded(record, tick_at):
            return record, [act.RetryLater(early)]
        record, handled, plan = _handle_due(record, tick_at, now, tuning)
        return _arm_after(record, handled, plan, now)
    if early > tuning.rearm_early:
        # A fresh nonce: the task being processed is acknowledged, and a queue
        # that deduplicates by name must not take the new one for it.
        return arm(record, tick_at)
    if early > tuning.accept_early:
        return record, [act.RetryLater(early)]
    if record.dropping or record.paused or record.disabled:
        # A tick for the dropped occurrences' rows (a stopped job has no other).
        record, recorded = waiting.record_dropped(record)
        record, armed = arm_next(record, now)
        return record, armed + recorded
    if record.live_policy.after:
        return fanin.on_tick(record, now)
    horizon = max(now, tick_at)
    if isinstance(record.live_policy.schedule, IntervalSchedule):
        # A relative schedule arms its next tick when the invocation ends.
        occurrence = waiting.occurrence(record, tick_at, Trigger.SCHEDULE)
        record, actions = arm(record, None, scheduled_until=horizon)
        record, started = admission.admit(record, occurrence, now, tuning, inline=True)
        return after_invocations(record, now, actions + started)
    record, handled, plan = _handle_due(record, horizon, now, tuning)
    return _arm_after(record, handled, plan, now)


def _excluded(record: JobRecord, moment: datetime) -> bool:
    """Whether an exclusion calendar holds the tick's time: its SKIPPED row is written at
    that time, as an unstaged tick would write it, not up to `stage_ahead` before."""
    exclude = record.live_policy.exclude
    return bool(exclude) and excluded_by(exclude, moment) is not None


def _arm_after(record: JobRecord, handled: list[act.Action], plan: DuePlan, now: datetime) -> Result:
    """Arm the tick after the fire times a tick just handled."""
    next_at: datetime | None
    if plan.more or record.dropping:
        next_at = now  # a long backlog continues in the next transaction
    elif plan.following is not None:
        next_at = plan.following
    else:
        next_at = next_fire(record.live_policy.schedule, plan.handled_until)
    record, armed = arm(record, next_at)
    return record, armed + handled


def _handle_due(record: JobRecord, horizon: datetime, now: datetime, tuning: Tuning,
                inline: bool = True) -> tuple[JobRecord, list[act.Action], DuePlan]:
    """Record or admit every fire time in (scheduled_until, horizon], one batch of them.

    `inline`: the first attempts may be delivered right after this commit (ticks);
    other callers enqueue them.
    """
    if record.scheduled_until is None:
        raise ValueError(f"job {record.project}/{record.job_id} has no handled time to plan from")
    plan = plan_due(
        record.live_policy.schedule, record.scheduled_until, horizon, now, record.live_policy, tuning,
        record.paused_through,
    )
    paused_through = record.paused_through
    if paused_through is not None and plan.handled_until >= paused_through:
        paused_through = None
    record = evolve(record, scheduled_until=plan.handled_until, paused_through=paused_through)
    actions: list[act.Action] = [
        act.RecordSkipped.of(waiting.occurrence(record, t, Trigger.SCHEDULE), SkipReason.PAUSED)
        for t in plan.paused]
    actions += [act.RecordSkipped.of(waiting.occurrence(record, t, Trigger.CATCHUP), SkipReason.MISSED)
                for t in plan.missed]
    caught = None if plan.caught is None else runs.of_policy(record.live_policy, *plan.caught, Trigger.CATCHUP)
    if caught is not None:
        record, started = admission.admit_run(record, caught, now, tuning, inline)
        actions += started
    for scheduled_time, trigger in plan.deliver:
        occurrence = waiting.occurrence(record, scheduled_time, trigger)
        record, started = admission.admit(record, occurrence, now, tuning, inline)
        actions += started
    return record, admission.only_active_delivered(record, actions), plan


_BACKLOG_BATCHES = 50


def settle_backlog(record: JobRecord, now: datetime, tuning: Tuning) -> Result:
    """Handle the fire times of the current timing that are due but not yet handled.

    The times listed SKIPPED are written by this step up to ROWS_PER_STEP; the rest
    wait in `dropping` (as runs of this timing) for the ticks that follow, as do the
    times of a backlog longer than _BACKLOG_BATCHES scans: missed, or paused."""
    if (
        record.policy is None
        or record.disabled
        or record.paused
        or record.scheduled_until is None
        or not is_clock_driven(record.live_policy.schedule)
    ):
        return record, []
    actions: list[act.Action] = []
    rows = 0
    for _ in range(_BACKLOG_BATCHES):
        record, handled, plan = _handle_due(record, now, now, tuning, inline=False)
        skipped = plan.paused + plan.missed
        if rows + len(skipped) <= ROWS_PER_STEP:
            rows += len(skipped)
            actions += handled
        else:
            record = waiting.defer(record, _listed_runs(record, plan))
            actions += [action for action in handled if not isinstance(action, act.RecordSkipped)]
        if not plan.more:
            return record, actions
    return _defer_rest(record, now), actions


def _listed_runs(record: JobRecord, plan: DuePlan) -> list[waiting.Dropped]:
    """The plan's paused and missed times as runs: each list is consecutive fire times."""
    policy, queue = record.live_policy, list[waiting.Dropped]()
    for times, reason, trigger in ((plan.paused, SkipReason.PAUSED, Trigger.SCHEDULE),
                                   (plan.missed, SkipReason.MISSED, Trigger.CATCHUP)):
        run = runs.of_policy(policy, runs.before(times[0]), times[-1], trigger) if times else None
        if run is not None:
            queue.append((reason, run))
    return queue


def _defer_rest(record: JobRecord, now: datetime) -> JobRecord:
    """Every fire time still due, to be recorded SKIPPED by later ticks: paused up to
    `paused_through`, missed after it."""
    since, paused_through, policy = record.scheduled_until or now, record.paused_through, record.live_policy
    queue: list[waiting.Dropped] = []
    split = min(now, paused_through) if paused_through is not None and paused_through > since else since
    for after, through, reason, trigger in ((since, split, SkipReason.PAUSED, Trigger.SCHEDULE),
                                            (split, now, SkipReason.MISSED, Trigger.CATCHUP)):
        run = runs.of_policy(policy, after, through, trigger) if through > after else None
        if run is not None:
            queue.append((reason, run))
    return waiting.defer(evolve(record, scheduled_until=now, paused_through=None), queue)


def after_invocations(record: JobRecord, now: datetime, actions: list[act.Action]) -> Result:
    """A relative schedule's next tick counts from the end of its last invocation; occurrences
    that stopped waiting (under `buffer_one`, or past the caps) want a tick now for their rows."""
    if record.dropping and (record.tick_at is None or record.tick_at > now):
        record, armed = arm(record, now)
        return record, actions + armed
    if (
        record.policy is not None
        and isinstance(record.live_policy.schedule, IntervalSchedule)
        and record.tick_at is None
        and not record.active
        and not record.has_waiting
    ):
        record, armed = arm_next(record, now)
        actions = actions + armed
    return record, actions


def redeliver_inline(record: JobRecord, nonce: str, now: datetime, tuning: Tuning) -> Result:
    """The queue ran the tick `nonce` again after a run that gave no answer: that run's
    process died, or only its request ended (a platform's request timeout) while the
    attempt it delivered inline is still being sent (or this is a duplicate of that
    run's task). Within the attempt's lease it is left in flight, and its start task is
    enqueued for the lease's end; after it, it is sent again under the same invocation
    id if it is still in flight then (invocations.on_starting)."""
    actions: list[act.Action] = []
    for entry in record.active:
        # Only the attempt that tick delivered: attempt 1, still in flight (a later
        # attempt of the invocation is none of that tick's run).
        if entry.started_by != nonce or entry.attempts != (1,) or entry.started_mask != 1 or entry.done_mask:
            continue
        # As a redelivered start task of it: staged and not let out, back to its start
        # task; within its lease, a start at the lease's end; after it, sent again.
        redelivery = ev.InvocationStarting(entry.invocation_id, 0, entry.attempts[0], redelivered=True)
        record, started = inv.on_starting(record, redelivery, now, tuning)
        actions += started
    return record, actions
