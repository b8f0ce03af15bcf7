"""The job state machine: `step(record, event, now) -> Transition`.

The host's contract, as in LUCI's cron machine: in one transaction, load the
record, call `step` with one event, apply every action, save the new record.
`Deliver` is the one action performed after the commit. Nothing here reads a
clock, touches storage or draws a random number, so a step can be replayed.

Every (state, event) pair has an entry in `TRANSITIONS`: a handler, `IGNORE`
(the event is a duplicate or stale and changes nothing), or a `Refusal` that
raises `InvalidTransition` and leaves the record as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable

from statemachine import actions as act
from statemachine import events as ev
from statemachine import ids
from statemachine import invocations as inv
from statemachine.catchup import DuePlan, plan_due
from statemachine.pausing import pause
from statemachine.policy import DEFAULT_TUNING, Tuning
from statemachine.record import JobRecord, JobState, Occurrence, evolve
from statemachine.schedule import IntervalSchedule, is_clock_driven, next_fire
from statemachine.vocabulary import SkipReason, Trigger


class InvalidTransition(Exception):
    """The event is not allowed in the job's state. The core names no API error
    code: the shell's one table (web/errors.py) says what a refusal answers."""


@dataclass(frozen=True)
class Transition:
    record: JobRecord
    actions: tuple[act.Action, ...] = ()


@dataclass(frozen=True)
class Refusal:
    message: str


IGNORE = "ignore"
_MILLISECOND = timedelta(milliseconds=1)
Result = tuple[JobRecord, list[act.Action]]
# A transition's handler: the record and the event in, the record and its actions out.
Handler = Callable[[JobRecord, Any, datetime, Tuning], Result]
Entry = Handler | Refusal | str  # a table entry: what to do, why not, or IGNORE


def step(record: JobRecord, event: ev.Event, now: datetime, tuning: Tuning = DEFAULT_TUNING) -> Transition:
    outcome = TRANSITIONS[record.state][type(event)]
    if isinstance(outcome, str):  # IGNORE
        return Transition(record)
    if isinstance(outcome, Refusal):
        raise InvalidTransition(outcome.message.format(job=f"{record.project}/{record.job_id}"))
    new_record, actions = outcome(record, event, now, tuning)
    return Transition(_settle(new_record, tuning), tuple(actions))


def derive_state(record: JobRecord) -> JobState:
    if record.disabled:
        return JobState.DISABLED
    if record.paused:
        return JobState.PAUSED
    if any(entry.has_started for entry in record.active):
        return JobState.RUNNING
    if record.active:
        return JobState.QUEUED
    if record.tick_at is None and not record.buffered and is_clock_driven(record.live_policy.schedule):
        return JobState.DONE
    return JobState.SCHEDULED


def _settle(record: JobRecord, tuning: Tuning) -> JobRecord:
    """Derive the state and the watchdog time from the record's contents."""
    deadlines = [entry.deadline for entry in record.active]
    deadlines += [entry.expect_by for entry in record.active if entry.expect_by]
    if record.tick_at is not None:
        deadlines.append(record.tick_at + tuning.tick_grace)
    state, watchdog_at = derive_state(record), min(deadlines) if deadlines else None
    if state is record.state and watchdog_at == record.watchdog_at:
        return record
    return evolve(record, state=state, watchdog_at=watchdog_at)


# --- ticks -------------------------------------------------------------------------

def _arm(record: JobRecord, at: datetime | None, **changes: Any) -> Result:
    """Point the record at a new tick (fresh nonce), or at none; `changes` are
    other fields to set in the same copy."""
    if at is None:
        return evolve(record, tick_at=None, tick_nonce=None, **changes), []
    counter = record.nonce_counter + 1
    nonce = f"{record.generation}.{counter}"
    record = evolve(record, nonce_counter=counter, tick_at=at, tick_nonce=nonce, **changes)
    return record, [act.ScheduleTick(at, nonce)]


def _arm_next(record: JobRecord, now: datetime) -> Result:
    """Arm the tick that follows what the record has handled so far."""
    if record.disabled or record.paused:
        return _arm(record, None)
    schedule = record.live_policy.schedule
    if isinstance(schedule, IntervalSchedule):
        if record.active or record.buffered:
            return _arm(record, None)
        at = now + max(schedule.interval, _failure_backoff(record))
        if record.scheduled_until is not None and at <= record.scheduled_until:
            # Occurrence ids have millisecond resolution: a run shorter than that
            # must not give the next occurrence the same scheduled time.
            at = record.scheduled_until + _MILLISECOND
        return _arm(record, at)
    if not is_clock_driven(schedule):
        return _arm(record, None)
    return _arm(record, next_fire(schedule, record.scheduled_until or now))


def _failure_backoff(record: JobRecord) -> timedelta:
    """After failed invocations a relative schedule (`continuously`) waits like a retry:
    `min_backoff`, doubling per consecutive failure up to `max_backoff`, so a failing
    target is not called flat out. Without jitter, so it never waits less."""
    failures = record.consecutive_failures
    if not failures or record.policy is None:
        return timedelta(0)
    retry = record.live_policy.retry
    backoff: timedelta = retry.min_backoff * (2 ** min(failures - 1, 40))
    return min(backoff, retry.max_backoff)


def _on_tick(record: JobRecord, event: ev.TickArrived, now: datetime, tuning: Tuning) -> Result:
    tick_at = record.tick_at
    if event.nonce != record.tick_nonce or tick_at is None:
        return record, []  # stale: superseded by a newer tick, or a duplicate
    early = tick_at - now
    if early > tuning.rearm_early:
        # A fresh nonce: the task being processed is acknowledged, and a queue
        # that deduplicates by name must not take the new one for it.
        return _arm(record, tick_at)
    if early > tuning.accept_early:
        return record, [act.RetryLater(early)]
    horizon = max(now, tick_at)
    if isinstance(record.live_policy.schedule, IntervalSchedule):
        # A relative schedule arms its next tick when the invocation ends.
        occurrence = _occurrence(record, tick_at, Trigger.SCHEDULE)
        record, actions = _arm(record, None, scheduled_until=horizon)
        record, started = inv.admit(record, occurrence, now, tuning, inline=True)
        return record, actions + started
    record, handled, plan = _handle_due(record, horizon, now, tuning)
    next_at: datetime | None
    if plan.more:
        next_at = now  # a long backlog continues in the next transaction
    elif plan.following is not None:
        next_at = plan.following
    else:
        next_at = next_fire(record.live_policy.schedule, plan.handled_until)
    record, armed = _arm(record, next_at)
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
        act.RecordSkipped.of(_occurrence(record, t, Trigger.SCHEDULE), SkipReason.PAUSED) for t in plan.paused]
    actions += [act.RecordSkipped.of(_occurrence(record, t, Trigger.CATCHUP), SkipReason.MISSED) for t in plan.missed]
    for scheduled_time, trigger in plan.deliver:
        occurrence = _occurrence(record, scheduled_time, trigger)
        record, started = inv.admit(record, occurrence, now, tuning, inline)
        actions += started
    return record, actions, plan


def _occurrence(record: JobRecord, scheduled_time: datetime, trigger: str) -> Occurrence:
    invocation = ids.invocation_id(record.project, record.job_id, scheduled_time, ids.OCCURRENCE)
    return Occurrence(invocation, scheduled_time, trigger)


# --- definition changes ------------------------------------------------------------

def _on_enabled(record: JobRecord, event: ev.JobEnabled, now: datetime, tuning: Tuning) -> Result:
    """A disabled (or brand new) job becomes active; it fires from now on."""
    record = evolve(
        record,
        disabled=False,
        policy=event.policy,
        generation=record.generation + 1,
        scheduled_until=_not_before(record.scheduled_until, now),
    )
    return _arm_next(record, now)


def _not_before(handled: datetime | None, now: datetime) -> datetime:
    """Fire times already handled stay handled: scheduled_until never moves back."""
    return now if handled is None else max(handled, now)


def _on_policy(record: JobRecord, event: ev.JobEnabled | ev.ScheduleChanged, now: datetime,
               tuning: Tuning) -> Result:
    """A new revision of an enabled job: re-plan only if its timing changed."""
    # Equal policies, not only equal revisions: a record saved before a policy field
    # existed (e.g. `throttle`) takes it up with the next import.
    if record.policy == event.policy:
        return record, []
    timing_changed = record.policy is None or record.live_policy.timing_key() != event.policy.timing_key()
    if not timing_changed:
        return evolve(record, policy=event.policy), []
    # What fell due under the old timing is settled under it first.
    record, settled = _settle_backlog(record, now, tuning)
    # The new generation makes every tick of the old timing stale.
    record = evolve(
        record,
        policy=event.policy,
        generation=record.generation + 1,
        scheduled_until=_not_before(record.scheduled_until, now),
    )
    record, armed = _arm_next(record, now)
    return record, settled + armed


_BACKLOG_BATCHES = 50


def _settle_backlog(record: JobRecord, now: datetime, tuning: Tuning) -> Result:
    """Handle the fire times of the current timing that are due but not yet handled."""
    if (
        record.policy is None
        or record.disabled
        or record.paused
        or record.scheduled_until is None
        or not is_clock_driven(record.live_policy.schedule)
    ):
        return record, []
    actions: list[act.Action] = []
    for _ in range(_BACKLOG_BATCHES):
        record, handled, plan = _handle_due(record, now, now, tuning, inline=False)
        actions += handled
        if not plan.more:
            break
    return record, actions


def _on_policy_while_disabled(record: JobRecord, event: ev.ScheduleChanged, now: datetime,
                              tuning: Tuning) -> Result:
    return evolve(record, policy=event.policy), []


def _on_disabled(record: JobRecord, event: ev.JobDisabled, now: datetime, tuning: Tuning) -> Result:
    """Stop new occurrences; running invocations finish on their own."""
    dropped: list[act.Action] = [act.RecordSkipped.of(o, SkipReason.DISABLED) for o in record.buffered]
    record, _ = _arm(evolve(record, disabled=True, buffered=()), None)
    return record, dropped


# --- operator actions ----------------------------------------------------------------

def manual_invocation_id(record: JobRecord, event: ev.ManualTrigger, now: datetime) -> str:
    """The invocation a manual or job trigger names; the shell refuses a second one."""
    kind = ids.MANUAL if event.trigger == Trigger.MANUAL else ids.JOB
    return ids.invocation_id(record.project, record.job_id, event.at or now, kind, event.request_id)


def _on_manual(record: JobRecord, event: ev.ManualTrigger, now: datetime, tuning: Tuning) -> Result:
    invocation = manual_invocation_id(record, event, now)
    known = {e.invocation_id for e in record.active} | {o.invocation_id for o in record.buffered}
    if invocation in known:
        return record, []  # the same request again
    return inv.admit(record, Occurrence(invocation, event.at or now, event.trigger), now, tuning)


def _manual_while_stopped(reason: str) -> Handler:
    """A person's trigger is refused (409); another job's trigger is recorded as skipped."""

    def handle(record: JobRecord, event: ev.ManualTrigger, now: datetime, tuning: Tuning) -> Result:
        if event.trigger == Trigger.MANUAL:
            hint = "; resume it first" if reason == SkipReason.PAUSED else ""
            raise InvalidTransition(f"job {record.project}/{record.job_id} is {reason}{hint}")
        occurrence = Occurrence(manual_invocation_id(record, event, now), event.at or now, event.trigger)
        return record, [act.RecordSkipped.of(occurrence, reason)]

    return handle


def _on_paused(record: JobRecord, event: ev.Paused, now: datetime, tuning: Tuning) -> Result:
    return pause(record, event.reason, now)


def _on_resumed(record: JobRecord, event: ev.Resumed, now: datetime, tuning: Tuning) -> Result:
    """Resume from now: what fell due meanwhile is recorded SKIPPED/paused, not caught up.

    An immediate tick records it, in batches as long as it needs.
    """
    if not record.paused:
        return record, []
    # The count starts again: a job paused for its failures gets its full
    # `pause_after_failures` again once someone resumes it.
    record = evolve(record, paused=False, pause_reason="", paused_at=None, consecutive_failures=0)
    schedule = record.live_policy.schedule
    if isinstance(schedule, IntervalSchedule) or not is_clock_driven(schedule):
        return _arm_next(record, now)
    return _arm(evolve(record, paused_through=now), now)


def _on_aborted(record: JobRecord, event: ev.Aborted, now: datetime, tuning: Tuning) -> Result:
    actions: list[act.Action] = []
    for entry in record.active:
        if record.find_active(entry.invocation_id) is not None:
            record, finished = inv.finish(record, entry, inv.ABORTED, event.reason, now, tuning)
            actions += finished
    return _after_invocations(record, now, actions)


def _on_watchdog(record: JobRecord, event: ev.WatchdogFired, now: datetime, tuning: Tuning) -> Result:
    """Repair whatever should have happened by `watchdog_at` and did not."""
    if record.watchdog_at is None or now < record.watchdog_at:
        return record, []
    actions: list[act.Action] = []
    if record.tick_at is not None and now >= record.tick_at + tuning.tick_grace:
        # For now, not its old time: the tick handles every fire time since the last
        # one anyway, and an old time would leave watchdog_at in the past.
        record, rearmed = _arm(record, now)  # a new nonce: the lost tick stays stale
        actions += rearmed
    for entry in record.active:
        current = record.find_active(entry.invocation_id)
        if current is not None:
            record, repaired = inv.repair(record, current, now, tuning)
            actions += repaired
    return _after_invocations(record, now, actions)


def _with_invocations(handler: Handler) -> Handler:
    """Run an invocation handler, then re-arm a relative schedule if it went idle."""

    def run(record: JobRecord, event: Any, now: datetime, tuning: Tuning) -> Result:
        record, actions = handler(record, event, now, tuning)
        return _after_invocations(record, now, actions)

    return run


def _after_invocations(record: JobRecord, now: datetime, actions: list[act.Action]) -> Result:
    """A relative schedule's next tick counts from the end of its last invocation."""
    if (
        record.policy is not None
        and isinstance(record.live_policy.schedule, IntervalSchedule)
        and record.tick_at is None
        and not record.active
        and not record.buffered
    ):
        record, armed = _arm_next(record, now)
        actions = actions + armed
    return record, actions


_starting = _with_invocations(inv.on_starting)
_started = _with_invocations(inv.on_started)
_finished = _with_invocations(inv.on_finished)
_manual = _with_invocations(_on_manual)


def _table() -> dict[JobState, dict[type, Entry]]:
    S = JobState
    disabled_refusal = Refusal("job {job} is disabled")
    invocation_events: dict[type, Entry] = {
        ev.InvocationStarting: _starting,
        ev.InvocationStarted: _started,
        ev.InvocationFinished: _finished,
    }
    no_invocations: dict[type, Entry] = dict.fromkeys(invocation_events, IGNORE)
    common: dict[type, Entry] = {
        ev.JobEnabled: _on_policy,
        ev.JobDisabled: _on_disabled,
        ev.ScheduleChanged: _on_policy,
        ev.TickArrived: _on_tick,
        ev.ManualTrigger: _manual,
        ev.Paused: _on_paused,
        ev.Resumed: IGNORE,  # not paused: nothing to resume
        ev.Aborted: _on_aborted,
        ev.WatchdogFired: _on_watchdog,
        **invocation_events,
    }
    idle: dict[type, Entry] = {**common, **no_invocations, ev.Aborted: IGNORE}
    return {
        S.SCHEDULED: idle,
        S.DONE: {**idle, ev.TickArrived: IGNORE},
        S.QUEUED: common,
        S.RUNNING: common,
        S.PAUSED: {
            **common,
            ev.TickArrived: IGNORE,
            ev.ManualTrigger: _manual_while_stopped(SkipReason.PAUSED),
            ev.Resumed: _on_resumed,
        },
        S.DISABLED: {
            **common,
            ev.JobEnabled: _on_enabled,
            ev.JobDisabled: IGNORE,
            ev.ScheduleChanged: _on_policy_while_disabled,
            ev.TickArrived: IGNORE,
            ev.ManualTrigger: _manual_while_stopped(SkipReason.DISABLED),
            ev.Paused: disabled_refusal,
            ev.Resumed: disabled_refusal,
        },
    }


TRANSITIONS = _table()
