"""The job state machine: `step(record, event, now) -> Transition`.

The host's contract, as in LUCI's cron machine: in one transaction, load the
record, call `step` with one event, apply every action, save the new record.
`Deliver` is the one action performed after the commit. Nothing here reads a
clock, touches storage or draws a random number, so a step can be replayed.

`JobState` is a projection of the record's flags, not a second source of truth: after every step
`derive_state` computes it from `disabled`, `paused`, the `active` invocations (and whether one has
started), `tick_at` and what waits. It is stored with the record (and in the SQL `state` column) only
so that it can be shown and queried without the machine; `with_derived_fields` keeps it in step.

Every (state, event) pair has an entry in `TRANSITIONS`: a handler, `IGNORE` (the event is a
duplicate or stale and changes nothing), or a `Refusal` (`step` raises `InvalidTransition` and
the record stays as it was). The state picks the entry; the handler then acts on the flags, and
the state that results is derived again. So the table holds no next states: `NEXT_STATE` writes
them down for the reader, and tests/unit/test_machine_table.py holds it true.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Callable, Final

from statemachine import actions as act
from statemachine import admission, deadlines, fanin, ids, staging
from statemachine import events as ev
from statemachine import invocations as inv
from statemachine.errors import SundialError
from statemachine.invocations import Result
from statemachine.pausing import pause
from statemachine.policy import DEFAULT_TUNING, Tuning
from statemachine.record import JobRecord, JobState, Occurrence, evolve
from statemachine.schedule import IntervalSchedule, is_clock_driven
from statemachine.ticks import after_invocations, arm, arm_next, on_tick, settle_backlog, stage_pending
from statemachine.vocabulary import JOB_PREFIX, SkipReason, Trigger
from statemachine.waiting import stop_waiting


class InvalidTransition(SundialError):
    """The event is not allowed in the job's state. The core names no API error
    code: the shell's one table (web/errors.py) says what a refusal answers."""


@dataclass(frozen=True)
class Transition:
    record: JobRecord
    actions: tuple[act.Action, ...] = ()
    # The event has more to do than one step may write (statemachine/budget.py): the
    # host steps the job with the same event again, in a transaction of its own.
    more: bool = False


# A transition's handler: the record and the event in, the record and its actions out.
Handler = Callable[[JobRecord, Any, datetime, Tuning], Result]


@dataclass(frozen=True)
class Refusal:
    """A refused pair: `step` raises InvalidTransition with `message` (`{job}` names
    the job). `unless` picks out the events of the pair that are not refused after
    all; `handler` takes those."""

    message: str
    unless: Callable[[Any], bool] | None = None
    handler: Handler | None = None

    def __post_init__(self) -> None:
        if (self.unless is None) != (self.handler is None):
            raise ValueError("a Refusal's `unless` needs a `handler`, and a handler an `unless`")

    def handler_for(self, record: JobRecord, event: ev.Event) -> Handler:
        """The handler of an event this refusal lets through; InvalidTransition for the rest."""
        if self.unless is None or self.handler is None or not self.unless(event):
            raise InvalidTransition(self.message.format(job=f"{record.project}/{record.job_id}"))
        return self.handler


class _Ignore(Enum):
    """IGNORE's type: a one-member enum, so that `entry is IGNORE` is all a check needs."""

    IGNORE = "IGNORE"


IGNORE: Final = _Ignore.IGNORE
Entry = Handler | Refusal | _Ignore  # a table entry: what to do, why not, or IGNORE


def step(record: JobRecord, event: ev.Event, now: datetime, tuning: Tuning = DEFAULT_TUNING) -> Transition:
    entry = TRANSITIONS[record.state][type(event)]
    if isinstance(entry, Refusal):
        entry = entry.handler_for(record, event)
    if entry is IGNORE:
        return Transition(record)
    new_record, actions = entry(record, event, now, tuning)
    if isinstance(event, ev.InvocationFinished) and event.stage_next:
        new_record, staged = stage_pending(new_record, now, tuning)
        actions = [*actions, *staged]
    if tuning.stages:  # a backend that never stages pays nothing for it
        new_record, actions = staging.after_step(record, new_record, actions, now, tuning)
    actions = deadlines.arm(record, new_record, actions, tuning)
    return Transition(with_derived_fields(new_record, tuning), tuple(actions))


def derive_state(record: JobRecord) -> JobState:
    if record.disabled:
        return JobState.DISABLED
    if record.paused:
        return JobState.PAUSED
    if any(entry.has_started for entry in record.active):
        return JobState.RUNNING
    if record.active:
        return JobState.QUEUED
    if record.tick_at is None and not record.has_waiting and is_clock_driven(record.live_policy.schedule):
        return JobState.DONE
    return JobState.SCHEDULED


def with_derived_fields(record: JobRecord, tuning: Tuning) -> JobRecord:
    """Derive the state and the watchdog time from the record's contents."""
    deadlines = [entry.deadline for entry in record.active]
    deadlines += [entry.expect_by for entry in record.active if entry.expect_by]
    if record.tick_at is not None:
        deadlines.append(record.tick_at + tuning.tick_grace)
    state, watchdog_at = derive_state(record), min(deadlines) if deadlines else None
    if state is record.state and watchdog_at == record.watchdog_at:
        return record
    return evolve(record, state=state, watchdog_at=watchdog_at)


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
    return arm_next(record, now)


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
    # What fell due under the old timing is settled under it first; what an early tick
    # committed for a time the new timing does not fire at is withdrawn.
    record, settled = settle_backlog(record, now, tuning)
    record, withdrawn = staging.withdraw_rescheduled(record, event.policy, now)
    # The new generation makes every tick of the old timing stale.
    record = evolve(
        record,
        policy=event.policy,
        generation=record.generation + 1,
        scheduled_until=_not_before(record.scheduled_until, now),
    )
    record, started = inv.drain_buffer(record, now, tuning) if withdrawn else (record, [])
    record, armed = arm_next(record, now)
    return record, settled + withdrawn + started + armed


def _on_policy_while_disabled(record: JobRecord, event: ev.ScheduleChanged, now: datetime,
                              tuning: Tuning) -> Result:
    return evolve(record, policy=event.policy), []


def _on_disabled(record: JobRecord, event: ev.JobDisabled, now: datetime, tuning: Tuning) -> Result:
    """Stop new occurrences; running invocations finish on their own."""
    return stop_waiting(evolve(record, disabled=True), SkipReason.DISABLED, now)


# --- operator actions ----------------------------------------------------------------

def manual_invocation_id(record: JobRecord, event: ev.ManualTrigger, now: datetime) -> str:
    """The invocation a manual or job trigger names (a backfill's first); the shell
    refuses a second one."""
    if event.backfill is not None:
        first = event.backfill.first()
        return ids.invocation_id(record.project, record.job_id, first or now, ids.BACKFILL, event.backfill.key)
    kind = ids.MANUAL if event.trigger == Trigger.MANUAL else ids.JOB
    return ids.invocation_id(record.project, record.job_id, event.at or now, kind, event.request_id)


def _on_manual(record: JobRecord, event: ev.ManualTrigger, now: datetime, tuning: Tuning) -> Result:
    invocation = manual_invocation_id(record, event, now)
    known = {e.invocation_id for e in record.active} | {o.invocation_id for o in record.buffered}
    if invocation in known:
        return record, []  # the same request again
    if event.backfill is not None:
        if any(run.key == event.backfill.key for run in record.runs):
            return record, []  # the same backfill again, some of it still waiting
        return admission.admit_run(record, event.backfill, now, tuning)
    return admission.admit(record, Occurrence(invocation, event.at or now, event.trigger), now, tuning)


def _triggered_by_another_job(event: ev.ManualTrigger) -> bool:  # not a person's trigger or backfill
    return event.trigger.startswith(JOB_PREFIX) or fanin.is_report(event)


def _trigger_while_stopped(reason: SkipReason) -> Refusal:
    """A person's trigger of a stopped job is refused; another job's trigger is not
    anyone's to refuse, so it is recorded SKIPPED, and the job's history says why."""

    def skip(record: JobRecord, event: ev.ManualTrigger, now: datetime, tuning: Tuning) -> Result:
        occurrence = Occurrence(manual_invocation_id(record, event, now), event.at or now, event.trigger)
        return record, [act.RecordSkipped.of(occurrence, reason)]

    hint = "; resume it first" if reason is SkipReason.PAUSED else ""
    return Refusal(f"job {{job}} is {reason}{hint}", unless=_triggered_by_another_job, handler=fanin.reports_or(skip))


def _on_paused(record: JobRecord, event: ev.Paused, now: datetime, tuning: Tuning) -> Result:
    return pause(record, event.reason, now, event.by)


def _on_resumed(record: JobRecord, event: ev.Resumed, now: datetime, tuning: Tuning) -> Result:
    """Resume from now: what fell due meanwhile is recorded SKIPPED/paused, not caught up.

    An immediate tick records it, in batches as long as it needs. Only a PAUSED
    job's row sends Resumed here: every other row IGNOREs or refuses it.
    """
    # The count starts again: a job paused for its failures gets its full
    # `pause_after_failures` again once someone resumes it.
    record = evolve(record, paused=False, pause_reason="", paused_by="", paused_at=None, consecutive_failures=0)
    schedule = record.live_policy.schedule
    if isinstance(schedule, IntervalSchedule) or not is_clock_driven(schedule):
        return arm_next(record, now)
    return arm(evolve(record, paused_through=now), now)


def _on_aborted(record: JobRecord, event: ev.Aborted, now: datetime, tuning: Tuning) -> Result:
    actions: list[act.Action] = []
    for entry in record.active:
        if record.find_active(entry.invocation_id) is not None:
            record, finished = inv.finish(record, entry, inv.ABORTED, event.reason, now, tuning)
            actions += finished
    return after_invocations(record, now, actions)


def _on_watchdog(record: JobRecord, event: ev.WatchdogFired, now: datetime, tuning: Tuning) -> Result:
    """Repair whatever should have happened by `watchdog_at` and did not."""
    if event.queue_lost:  # its time again under a new nonce: a copy the queue kept is stale
        return arm(record, max(record.tick_at, now)) if record.tick_at is not None else (record, [])
    if record.watchdog_at is None or now < record.watchdog_at:
        return record, []
    actions: list[act.Action] = []
    if record.tick_at is not None and now >= record.tick_at + tuning.tick_grace:
        # For now, not its old time: the tick handles every fire time since the last
        # one anyway, and an old time would leave watchdog_at in the past.
        record, rearmed = arm(record, now)  # a new nonce: the lost tick stays stale
        actions += rearmed
    for entry in record.active:
        current = record.find_active(entry.invocation_id)
        if current is not None:
            record, repaired = inv.repair(record, current, now, tuning)
            actions += repaired
    return after_invocations(record, now, actions)


def _with_invocations(handler: Handler) -> Handler:
    """Run an invocation handler, then re-arm a relative schedule if it went idle."""

    def run(record: JobRecord, event: Any, now: datetime, tuning: Tuning) -> Result:
        record, actions = handler(record, event, now, tuning)
        return after_invocations(record, now, actions)

    return run


_starting = _with_invocations(inv.on_starting)
_started = _with_invocations(inv.on_started)
_finished = _with_invocations(inv.on_finished)
_interrupted = _with_invocations(inv.on_interrupted)
_settled = _with_invocations(inv.on_settled)
_manual = _with_invocations(fanin.reports_or(_on_manual))


def _table() -> dict[JobState, dict[type, Entry]]:
    S = JobState
    disabled_refusal = Refusal("job {job} is disabled")
    invocation_events: dict[type, Entry] = {
        ev.InvocationStarting: _starting,
        ev.InvocationStarted: _started,
        ev.InvocationFinished: _finished,
        ev.AttemptInterrupted: _interrupted,
        ev.InvocationSettled: _settled,
    }
    no_invocations: dict[type, Entry] = dict.fromkeys(invocation_events, IGNORE)
    common: dict[type, Entry] = {
        ev.JobEnabled: _on_policy,
        ev.JobDisabled: _on_disabled,
        ev.ScheduleChanged: _on_policy,
        ev.TickArrived: on_tick,
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
            **common,  # a tick comes only to record occurrences that stopped waiting (ticks.on_tick)
            ev.ManualTrigger: _trigger_while_stopped(SkipReason.PAUSED),
            ev.Resumed: _on_resumed,
        },
        S.DISABLED: {
            **common,
            ev.JobEnabled: _on_enabled,
            ev.JobDisabled: IGNORE,
            ev.ScheduleChanged: _on_policy_while_disabled,
            ev.ManualTrigger: _trigger_while_stopped(SkipReason.DISABLED),
            ev.Paused: disabled_refusal,
            ev.Resumed: disabled_refusal,
        },
    }


TRANSITIONS = _table()


# Where each pair leads: the state `derive_state` gives the record after the step.
# Documentation, held true for every pair by tests/unit/test_machine_table.py, in its
# situations: SCHEDULED with its 10:15 occurrence due at 10:15; QUEUED with that
# occurrence's start waiting; RUNNING, PAUSED and DISABLED with it in flight; DONE after
# its one `at` time; a person's trigger. Elsewhere a handler may lead elsewhere, as the
# flags say: an early tick changes nothing, a second invocation keeps the job RUNNING,
# another job's trigger of a stopped job is recorded SKIPPED.
# IGNORE: nothing changes. InvalidTransition: the pair is refused.
def _next_states() -> dict[JobState, dict[type, JobState | _Ignore | type[InvalidTransition]]]:
    S, E, REFUSED = JobState, ev, InvalidTransition
    quiet = {E.InvocationStarting: IGNORE, E.InvocationStarted: IGNORE, E.InvocationFinished: IGNORE,
             E.AttemptInterrupted: IGNORE, E.InvocationSettled: IGNORE}
    return {
        S.SCHEDULED: {
            # A timing change first starts what fell due under the old timing (queued);
            # a due tick delivers right after its commit (running).
            E.JobEnabled: S.QUEUED, E.JobDisabled: S.DISABLED, E.ScheduleChanged: S.QUEUED,
            E.TickArrived: S.RUNNING, **quiet, E.ManualTrigger: S.QUEUED, E.Paused: S.PAUSED,
            E.Resumed: IGNORE, E.Aborted: IGNORE, E.WatchdogFired: S.SCHEDULED,
        },
        S.QUEUED: {
            E.JobEnabled: S.QUEUED, E.JobDisabled: S.DISABLED, E.ScheduleChanged: S.QUEUED,
            E.TickArrived: S.QUEUED, E.InvocationStarting: S.RUNNING, E.InvocationStarted: S.RUNNING,
            E.InvocationFinished: S.SCHEDULED, E.AttemptInterrupted: S.QUEUED, E.InvocationSettled: S.SCHEDULED,
            E.ManualTrigger: S.QUEUED, E.Paused: S.PAUSED,
            E.Resumed: IGNORE, E.Aborted: S.SCHEDULED, E.WatchdogFired: S.SCHEDULED,
        },
        S.RUNNING: {
            E.JobEnabled: S.RUNNING, E.JobDisabled: S.DISABLED, E.ScheduleChanged: S.RUNNING,
            E.TickArrived: S.RUNNING, E.InvocationStarting: S.RUNNING, E.InvocationStarted: S.RUNNING,
            E.InvocationFinished: S.SCHEDULED, E.AttemptInterrupted: S.RUNNING, E.InvocationSettled: S.SCHEDULED,
            E.ManualTrigger: S.RUNNING, E.Paused: S.PAUSED,
            E.Resumed: IGNORE, E.Aborted: S.SCHEDULED, E.WatchdogFired: S.SCHEDULED,
        },
        S.PAUSED: {
            # The invocation in flight finishes on its own: resumed, the job is RUNNING.
            E.JobEnabled: S.PAUSED, E.JobDisabled: S.DISABLED, E.ScheduleChanged: S.PAUSED,
            E.TickArrived: S.PAUSED, E.InvocationStarting: S.PAUSED, E.InvocationStarted: S.PAUSED,
            E.InvocationFinished: S.PAUSED, E.AttemptInterrupted: S.PAUSED, E.InvocationSettled: S.PAUSED,
            E.ManualTrigger: REFUSED, E.Paused: S.PAUSED,
            E.Resumed: S.RUNNING, E.Aborted: S.PAUSED, E.WatchdogFired: S.PAUSED,
        },
        S.DISABLED: {
            E.JobEnabled: S.RUNNING, E.JobDisabled: IGNORE, E.ScheduleChanged: S.DISABLED,
            E.TickArrived: S.DISABLED, E.InvocationStarting: S.DISABLED, E.InvocationStarted: S.DISABLED,
            E.InvocationFinished: S.DISABLED, E.AttemptInterrupted: S.DISABLED, E.InvocationSettled: S.DISABLED,
            E.ManualTrigger: REFUSED, E.Paused: REFUSED,
            E.Resumed: REFUSED, E.Aborted: S.DISABLED, E.WatchdogFired: S.DISABLED,
        },
        S.DONE: {
            E.JobEnabled: S.SCHEDULED, E.JobDisabled: S.DISABLED, E.ScheduleChanged: S.SCHEDULED,
            E.TickArrived: IGNORE, **quiet, E.ManualTrigger: S.QUEUED, E.Paused: S.PAUSED,
            E.Resumed: IGNORE, E.Aborted: IGNORE, E.WatchdogFired: S.DONE,
        },
    }


NEXT_STATE = _next_states()
