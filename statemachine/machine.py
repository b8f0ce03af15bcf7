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
from datetime import datetime

from statemachine import actions as act
from statemachine import events as ev
from statemachine import ids
from statemachine import invocations as inv
from statemachine.catchup import SCHEDULE, plan_due
from statemachine.policy import DEFAULT_TUNING, Tuning
from statemachine.record import JobRecord, JobState, Occurrence, evolve
from statemachine.schedule import IntervalSchedule, fire_times, is_clock_driven, next_fire


class InvalidTransition(Exception):
    """The event is not allowed in the job's state; `code` is the API error code."""

    def __init__(self, message: str, code: str = "FAILED_PRECONDITION"):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Transition:
    record: JobRecord
    actions: tuple = ()


@dataclass(frozen=True)
class Refusal:
    message: str


IGNORE = "ignore"


def step(record: JobRecord, event, now: datetime, tuning: Tuning = DEFAULT_TUNING) -> Transition:
    outcome = TRANSITIONS[record.state][type(event)]
    if outcome == IGNORE:
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
    if record.tick_at is None and not record.buffered and is_clock_driven(record.policy.schedule):
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

def _arm(record: JobRecord, at: datetime | None, **changes) -> tuple[JobRecord, list]:
    """Point the record at a new tick (fresh nonce), or at none; `changes` are
    other fields to set in the same copy."""
    if at is None:
        return evolve(record, tick_at=None, tick_nonce=None, **changes), []
    counter = record.nonce_counter + 1
    nonce = f"{record.generation}.{counter}"
    record = evolve(record, nonce_counter=counter, tick_at=at, tick_nonce=nonce, **changes)
    return record, [act.ScheduleTick(at, nonce)]


def _arm_next(record: JobRecord, now: datetime) -> tuple[JobRecord, list]:
    """Arm the tick that follows what the record has handled so far."""
    if record.disabled or record.paused:
        return _arm(record, None)
    schedule = record.policy.schedule
    if isinstance(schedule, IntervalSchedule):
        idle = not record.active and not record.buffered
        return _arm(record, now + schedule.interval if idle else None)
    if not is_clock_driven(schedule):
        return _arm(record, None)
    return _arm(record, next_fire(schedule, record.scheduled_until or now))


def _on_tick(record: JobRecord, event: ev.TickArrived, now, tuning) -> tuple[JobRecord, list]:
    if event.nonce != record.tick_nonce:
        return record, []  # stale: superseded by a newer tick, or a duplicate
    early = record.tick_at - now
    if early > tuning.rearm_early:
        return record, [act.ScheduleTick(record.tick_at, record.tick_nonce)]
    if early > tuning.accept_early:
        return record, [act.RetryLater(early)]
    horizon = max(now, record.tick_at)
    schedule = record.policy.schedule
    if isinstance(schedule, IntervalSchedule):
        # A relative schedule arms its next tick when the invocation ends.
        due, missed = [(record.tick_at, SCHEDULE)], ()
        record, actions = _arm(record, None, scheduled_until=horizon)
    else:
        plan = plan_due(schedule, record.scheduled_until, horizon, now, record.policy, tuning)
        if plan.more:
            next_at = now
        elif plan.following is not None:
            next_at = plan.following
        else:
            next_at = next_fire(schedule, plan.handled_until)
        record, actions = _arm(record, next_at, scheduled_until=plan.handled_until)
        due, missed = plan.deliver, plan.missed
    actions += [inv.skipped(_occurrence(record, t, "catchup"), "missed") for t in missed]
    for scheduled_time, trigger in due:
        record, started = inv.admit(record, _occurrence(record, scheduled_time, trigger), now, tuning)
        actions += started
    return record, actions


def _occurrence(record: JobRecord, scheduled_time: datetime, trigger: str) -> Occurrence:
    invocation = ids.invocation_id(record.project, record.job_id, scheduled_time, ids.OCCURRENCE)
    return Occurrence(invocation, scheduled_time, trigger)


# --- definition changes ------------------------------------------------------------

def _on_enabled(record: JobRecord, event: ev.JobEnabled, now, tuning):
    """A disabled (or brand new) job becomes active; it fires from now on."""
    record = evolve(
        record,
        disabled=False,
        policy=event.policy,
        generation=record.generation + 1,
        scheduled_until=now,
    )
    return _arm_next(record, now)


def _on_policy(record: JobRecord, event, now, tuning):
    """A new revision of an enabled job: re-plan only if its timing changed."""
    if record.policy is not None and record.policy.revision == event.policy.revision:
        return record, []
    timing_changed = record.policy is None or record.policy.timing_key() != event.policy.timing_key()
    record = evolve(record, policy=event.policy)
    if not timing_changed:
        return record, []
    # The new generation makes every tick of the old timing stale.
    record = evolve(record, generation=record.generation + 1, scheduled_until=now)
    return _arm_next(record, now)


def _on_policy_while_disabled(record: JobRecord, event: ev.ScheduleChanged, now, tuning):
    return evolve(record, policy=event.policy), []


def _on_disabled(record: JobRecord, event: ev.JobDisabled, now, tuning):
    """Stop new occurrences; running invocations finish on their own."""
    dropped = [inv.skipped(o, "disabled") for o in record.buffered]
    record, _ = _arm(evolve(record, disabled=True, buffered=()), None)
    return record, dropped


# --- operator actions ----------------------------------------------------------------

def _on_manual(record: JobRecord, event: ev.ManualTrigger, now, tuning):
    kind = ids.MANUAL if event.trigger == "manual" else ids.JOB
    invocation = ids.invocation_id(record.project, record.job_id, now, kind, event.request_id)
    known = {e.invocation_id for e in record.active} | {o.invocation_id for o in record.buffered}
    if invocation in known:
        return record, []  # the same request again
    return inv.admit(record, Occurrence(invocation, now, event.trigger), now, tuning)


def _on_paused(record: JobRecord, event: ev.Paused, now, tuning):
    if record.paused:
        return evolve(record, pause_reason=event.reason), []
    dropped = [inv.skipped(o, "paused") for o in record.buffered]
    record = evolve(record, paused=True, pause_reason=event.reason, paused_at=now, buffered=())
    record, _ = _arm(record, None)
    return record, dropped


def _on_resumed(record: JobRecord, event: ev.Resumed, now, tuning):
    """Resume from now; what fell due during the pause is recorded, not caught up."""
    if not record.paused:
        return record, []
    since = max(t for t in (record.paused_at, record.scheduled_until) if t is not None)
    schedule = record.policy.schedule
    during = list(fire_times(schedule, since, now, limit=tuning.scan_limit))
    skipped = [inv.skipped(_occurrence(record, t, SCHEDULE), "paused") for t in during]
    record = evolve(record, paused=False, pause_reason="", paused_at=None, scheduled_until=now)
    record, armed = _arm_next(record, now)
    return record, skipped + armed


def _on_aborted(record: JobRecord, event: ev.Aborted, now, tuning):
    actions: list = []
    for entry in record.active:
        if record.find_active(entry.invocation_id) is not None:
            record, finished = inv.finish(record, entry, inv.ABORTED, event.reason, now, tuning)
            actions += finished
    return _after_invocations(record, now, actions)


def _on_watchdog(record: JobRecord, event: ev.WatchdogFired, now, tuning):
    """Repair whatever should have happened by `watchdog_at` and did not."""
    if record.watchdog_at is None or now < record.watchdog_at:
        return record, []
    actions: list = []
    if record.tick_at is not None and now >= record.tick_at + tuning.tick_grace:
        record, rearmed = _arm(record, record.tick_at)  # a new nonce: the lost tick stays stale
        actions += rearmed
    for entry in record.active:
        current = record.find_active(entry.invocation_id)
        if current is not None:
            record, repaired = inv.repair(record, current, now, tuning)
            actions += repaired
    return _after_invocations(record, now, actions)


def _with_invocations(handler):
    """Run an invocation handler, then re-arm a relative schedule if it went idle."""

    def run(record, event, now, tuning):
        record, actions = handler(record, event, now, tuning)
        return _after_invocations(record, now, actions)

    return run


def _after_invocations(record: JobRecord, now, actions: list):
    """A relative schedule's next tick counts from the end of its last invocation."""
    if (
        isinstance(record.policy.schedule, IntervalSchedule)
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


def _table() -> dict:
    S = JobState
    paused_refusal = Refusal("job {job} is paused; resume it first")
    disabled_refusal = Refusal("job {job} is disabled")
    invocation_events = {
        ev.InvocationStarting: _starting,
        ev.InvocationStarted: _started,
        ev.InvocationFinished: _finished,
    }
    no_invocations = dict.fromkeys(invocation_events, IGNORE)
    common = {
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
    idle = {**common, **no_invocations, ev.Aborted: IGNORE}
    return {
        S.SCHEDULED: idle,
        S.DONE: {**idle, ev.TickArrived: IGNORE},
        S.QUEUED: common,
        S.RUNNING: common,
        S.PAUSED: {
            **common,
            ev.TickArrived: IGNORE,
            ev.ManualTrigger: paused_refusal,
            ev.Resumed: _on_resumed,
        },
        S.DISABLED: {
            **common,
            ev.JobEnabled: _on_enabled,
            ev.JobDisabled: IGNORE,
            ev.ScheduleChanged: _on_policy_while_disabled,
            ev.TickArrived: IGNORE,
            ev.ManualTrigger: disabled_refusal,
            ev.Paused: disabled_refusal,
            ev.Resumed: disabled_refusal,
        },
    }


TRANSITIONS = _table()
