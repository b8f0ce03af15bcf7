"""`step_job`: the machine's step for a job whose fan-out invocations keep their events
in rows of their own (statemachine/fanout.py).

An event of such an invocation is stepped on its own row, and the job record changes
only when the whole invocation ends (`InvocationSettled`) or the watchdog repairs it. The rows come
through `EventRows`, which the shell backs with its transaction and the tests with
a dict: this module reads no clock and touches no storage of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Callable, Protocol

from statemachine import actions as act
from statemachine import events as ev
from statemachine import fanout
from statemachine.budget import ROWS_PER_STEP
from statemachine.deadlines import DeadlineDue, early_by
from statemachine.fanout import EventPhase, EventState, EventStep, Tally
from statemachine.machine import Transition, step, with_derived_fields
from statemachine.policy import Tuning
from statemachine.record import ActiveInvocation, JobRecord, evolve
from statemachine.vocabulary import InvocationStatus, SkipReason

EVENT_STEPS = (ev.InvocationStarting, ev.InvocationStarted, ev.InvocationFinished, ev.AttemptInterrupted)


@dataclass(frozen=True)
class EventsCheckDue:
    """A check of a fan-out invocation's events came due (actions.CheckEvents): end
    the invocation if every event has its outcome. Only `step_job` knows this event."""

    invocation_id: str


# Everything `step_job` steps a job with: the machine's events, the check and the
# deadline timer (statemachine/deadlines.py).
JobEvent = ev.Event | EventsCheckDue | DeadlineDue


class EventRows(Protocol):
    """One invocation's event rows, as one transaction sees them."""

    def event(self, index: int) -> EventState:
        """The event's state; `EventState(index)` (attempt 1, waiting) when it has no row."""

    def put_event(self, state: EventState) -> None: ...

    def events(self) -> dict[int, EventState]:
        """Every event that has a row, by index."""


def step_job(record: JobRecord, event: JobEvent, now: datetime, tuning: Tuning,
             rows: Callable[[str], EventRows]) -> Transition:
    """`machine.step`, with the events of invocations in rows stepped on their rows.
    `rows(invocation_id)` opens an invocation's rows; it is called only when needed."""
    if isinstance(event, EventsCheckDue):
        entry = record.find_active(event.invocation_id)
        if entry is None or not entry.events_in_rows:
            return Transition(record)
        return _settle_if_complete(record, entry, rows(entry.invocation_id).events(), now, tuning)
    if isinstance(event, EVENT_STEPS):
        entry = record.find_active(event.invocation_id)
        if entry is not None and entry.events_in_rows:
            return _step_event(record, entry, rows(entry.invocation_id), event, now, tuning)
    if isinstance(event, DeadlineDue):
        early = early_by(record, event, now)
        if early is not None:
            return Transition(record, (early,))
        if record.find_active(event.invocation_id) is None:
            return Transition(record)  # it ended before its deadline: a stale timer
        event = ev.WatchdogFired()  # the deadline passed: repaired as the watchdog would
    if isinstance(event, ev.WatchdogFired):
        # The rows first: events that all have their outcome end as they say, not as
        # a deadline the check was about to beat would have them (timeout).
        record, settled = _settle_overdue(record, rows, now, tuning)
        transition = step(record, event, now, tuning)
        return _repair_events(Transition(transition.record, settled + transition.actions), rows, now, tuning)
    return step(record, event, now, tuning)


def _settle_overdue(record: JobRecord, rows: Callable[[str], EventRows], now: datetime,
                    tuning: Tuning) -> tuple[JobRecord, tuple[act.Action, ...]]:
    """End each invocation in rows that the watchdog is due to look at and whose every
    event has its outcome (its check was lost, or the deadline came first)."""
    actions: tuple[act.Action, ...] = ()
    for entry in record.active:
        due = [t for t in (entry.deadline, entry.expect_by) if t is not None]
        if entry.events_in_rows and now >= min(due):
            settled = _settle_if_complete(record, entry, rows(entry.invocation_id).events(), now, tuning)
            record, actions = settled.record, actions + settled.actions
    return record, actions


def _step_event(record: JobRecord, entry: ActiveInvocation, rows: EventRows,
                event: ev.InvocationStarting | ev.InvocationStarted | ev.InvocationFinished | ev.AttemptInterrupted,
                now: datetime, tuning: Tuning) -> Transition:
    if isinstance(event, ev.InvocationFinished) and event.attempt is None:
        return _complete(record, entry, rows, event, now, tuning)
    attempt = event.attempt or 0  # (not None: a completion report went to _complete)
    if not 0 <= event.event_index < entry.event_count:
        return Transition(record)
    before = rows.event(event.event_index)
    policy = record.live_policy
    if isinstance(event, ev.InvocationStarting):
        stepped = fanout.on_starting(entry, policy, record.paused, before, attempt, now, tuning, event.redelivered)
    elif isinstance(event, ev.InvocationStarted):
        stepped = fanout.on_started(entry, before, attempt, event.epoch)
    elif isinstance(event, ev.AttemptInterrupted):
        stepped = fanout.on_interrupted(entry, policy, before, attempt, now, event.epoch, event.unsent)
    else:
        stepped = fanout.on_finished(entry, policy, before, attempt, event.succeeded, event.reason, now, event.epoch)
    return _conclude(record, entry, rows, [(before, stepped)], now, tuning)


def _complete(record: JobRecord, entry: ActiveInvocation, rows: EventRows, event: ev.InvocationFinished,
              now: datetime, tuning: Tuning) -> Transition:
    """The async completion report settles every event in flight or accepted, up to
    ROWS_PER_STEP of them in one step (`more`: the host steps again for the rest)."""
    steps = []
    for state in sorted(rows.events().values(), key=lambda state: state.index):
        stepped = fanout.on_completion(state, event.succeeded, event.reason)
        if stepped.state != state:
            steps.append((state, stepped))
    concluded = _conclude(record, entry, rows, steps[:ROWS_PER_STEP], now, tuning)
    return replace(concluded, more=len(steps) > ROWS_PER_STEP)


def _conclude(record: JobRecord, entry: ActiveInvocation, rows: EventRows,
              steps: list[tuple[EventState, EventStep]], now: datetime, tuning: Tuning) -> Transition:
    """Write the events' new states; ask for a check when one got its outcome; end the
    invocation at once when a step says so."""
    actions: list[act.Action] = []
    settle = None
    outcome = False
    for before, stepped in steps:
        actions += stepped.actions
        settle = settle or stepped.settle
        if stepped.state != before:
            rows.put_event(stepped.state)
            outcome = outcome or (stepped.state.final and not before.final)
    if settle is not None:
        states = rows.events()
        if settle[1] == SkipReason.PAUSED and any(s.phase is not EventPhase.WAITING or s.attempt > 1
                                                  for s in states.values()):
            settle = (InvocationStatus.ABORTED, SkipReason.PAUSED)  # some event went out
        return _settle(record, entry, settle, Tally.of(states).attempts, actions, now, tuning)
    if outcome:
        actions.append(act.CheckEvents(entry.invocation_id, check_due(now, entry.event_count)))
    return Transition(record, tuple(actions))


# How long after its period a check runs: an outcome decided (its `now` read) within
# the period may commit a little later, and must find the check still to come.
CHECK_MARGIN = timedelta(seconds=2)


def check_due(now: datetime, count: int) -> datetime:
    """When the check asked for at `now` runs: `CHECK_MARGIN` after the end of its
    period, so that every outcome of one period shares one check (its task is named by
    its time). A check reads every event's row, so the period grows with the count: a
    second per thousand events. A check lost all the same is the watchdog's to make
    up for (`_settle_overdue`)."""
    period = max(1, -(-count // 1000))
    seconds = int(now.timestamp()) // period * period + period
    return datetime.fromtimestamp(seconds, now.tzinfo) + CHECK_MARGIN


def _settle_if_complete(record: JobRecord, entry: ActiveInvocation, states: dict[int, EventState],
                        now: datetime, tuning: Tuning) -> Transition:
    tally = Tally.of(states)
    if not tally.complete(entry.event_count):
        return Transition(record)
    return _settle(record, entry, tally.verdict(entry.event_count), tally.attempts, [], now, tuning)


def _settle(record: JobRecord, entry: ActiveInvocation, settle: tuple[str, str], attempts: int,
            actions: list[act.Action], now: datetime, tuning: Tuning) -> Transition:
    status, reason = settle
    ended = step(record, ev.InvocationSettled(entry.invocation_id, status, reason, attempts), now, tuning)
    return Transition(ended.record, tuple(actions) + ended.actions)


def _repair_events(transition: Transition, rows: Callable[[str], EventRows], now: datetime,
                   tuning: Tuning) -> Transition:
    """The watchdog's repair of the invocations in rows whose `expect_by` passed."""
    record, actions = transition.record, list(transition.actions)
    for entry in record.active:
        if not entry.events_in_rows or entry.expect_by is None or now < entry.expect_by:
            continue
        states = rows(entry.invocation_id).events()
        reissued, expect_by = fanout.repair(entry, record.live_policy, states, now, tuning)
        actions += reissued
        record = record.with_active(evolve(entry, expect_by=expect_by))
    if record is transition.record:
        return transition
    return Transition(with_derived_fields(record, tuning), tuple(actions))


class DictRows:
    """`EventRows` over a dict: for tests, and for anything that keeps rows in memory."""

    def __init__(self, store: dict[tuple[str, int], EventState], invocation_id: str):
        self.store, self.invocation_id = store, invocation_id

    def event(self, index: int) -> EventState:
        return self.store.get((self.invocation_id, index)) or EventState(index)

    def put_event(self, state: EventState) -> None:
        self.store[(self.invocation_id, state.index)] = state

    def events(self) -> dict[int, EventState]:
        return {index: state for (invocation, index), state in self.store.items() if invocation == self.invocation_id}


__all__ = ["DeadlineDue", "EventPhase", "EventRows", "EventsCheckDue", "DictRows", "JobEvent", "check_due", "step_job"]
