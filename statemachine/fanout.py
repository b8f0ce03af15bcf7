"""The events of a fan-out invocation, each in a row of its own.

An invocation of `fanout.count` > 1 events keeps no per-event state in its job's
record: that would make the record grow with the count, and make every event's
start and result a write of the one job entity, on which all of them would
contend. Each event has an `EventState` row instead, written only by the steps of
that event; the job record's active entry holds what is shared (deadline, count).
An event's start and result read the job record and write only the event's own row.
No row counts the outcomes: one that every event's result updated would be the
point they all contend for. Instead a final outcome asks for a check (`CheckEvents`,
one per period per invocation, the period growing with the count), which reads the
events' rows, and when every one has its outcome (`Tally.complete`) ends the
invocation with the machine's `InvocationSettled`. The watchdog checks the same way
before anything else, should a check be lost or a deadline come first.

Nothing here reads a clock or touches storage: the shell loads the rows, calls
these functions with an explicit `now`, and writes what they return.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from statemachine import actions as act
from statemachine.policy import INTERRUPTED, MAX_INTERRUPTIONS, JobPolicy, Tuning, compute_backoff
from statemachine.record import ActiveInvocation, evolve
from statemachine.stored_form import parse_stored_time, stored_time
from statemachine.vocabulary import InvocationStatus, SkipReason


class EventPhase(StrEnum):
    WAITING = "waiting"  # the current attempt has not started (the first, or a retry)
    STARTED = "started"  # the current attempt is in flight
    ACCEPTED = "accepted"  # the target answered 202: the completion report settles it
    SUCCEEDED = "succeeded"
    FAILED = "failed"


FINAL = frozenset({EventPhase.SUCCEEDED, EventPhase.FAILED})


@dataclass(frozen=True)
class EventState:
    """One event's progress. No row means attempt 1, waiting."""

    index: int
    attempt: int = 1
    phase: EventPhase = EventPhase.WAITING
    started_at: datetime | None = None  # when the current attempt started
    retry_at: datetime | None = None  # when a waiting retry is due
    reason: str = ""  # the last failure
    epoch: int = 0  # issues of the current attempt so far: its fencing token (Deliver.epoch)
    interruptions: int = 0  # attempts interrupted and sent again, not counted (on_interrupted)

    @property
    def final(self) -> bool:
        return self.phase in FINAL


@dataclass(frozen=True)
class Tally:
    """The final outcomes of an invocation's events, counted from their rows."""

    succeeded: int = 0
    failed: int = 0
    first_failure: str = ""  # the reason of the lowest-numbered failed event
    attempts: int = 1  # the highest attempt any event reached

    @classmethod
    def of(cls, states: dict[int, EventState]) -> Tally:
        ordered = [states[index] for index in sorted(states)]
        failures = [state.reason for state in ordered if state.phase is EventPhase.FAILED]
        return cls(
            succeeded=sum(state.phase is EventPhase.SUCCEEDED for state in ordered),
            failed=len(failures),
            first_failure=failures[0] if failures else "",
            attempts=max((state.attempt for state in ordered), default=1),
        )

    def complete(self, count: int) -> bool:
        return self.succeeded + self.failed >= count

    def verdict(self, count: int) -> tuple[InvocationStatus, str]:
        if not self.failed:
            return InvocationStatus.SUCCEEDED, ""
        return InvocationStatus.FAILED, f"{self.failed} of {count} events failed; first: {self.first_failure}"


@dataclass(frozen=True)
class EventStep:
    """What one step of one event decided: its new state, the actions to take, and,
    when the whole invocation ends here, with which status and reason."""

    state: EventState
    actions: tuple[act.Action, ...] = ()
    settle: tuple[InvocationStatus, str] | None = None


def _lease(policy: JobPolicy, tuning: Tuning) -> timedelta:
    return policy.attempt_timeout + tuning.start_grace


def _current(state: EventState, attempt: int | None, epoch: int | None = None) -> bool:
    """Whether `attempt` is the event's attempt in flight, and `epoch` (unless None) its issue."""
    return not state.final and state.attempt == attempt and (epoch is None or epoch == state.epoch)


def _stale(state: EventState, attempt: int, epoch: int | None, entry: ActiveInvocation) -> EventStep:
    """A sender's answer that is not the current issue's: refused, and said so."""
    if epoch is None or state.final:
        return EventStep(state)
    return EventStep(state, (act.RefuseStaleResult(entry.invocation_id, state.index, attempt, epoch),))


def on_starting(entry: ActiveInvocation, policy: JobPolicy, paused: bool, state: EventState, attempt: int,
                now: datetime, tuning: Tuning, redelivered: bool = False) -> EventStep:
    """A start task of the event arrived: commit that its attempt is starting, then deliver."""
    if not _current(state, attempt) or state.phase is EventPhase.ACCEPTED:
        return EventStep(state)  # stale, or the target took it (202) and owes its completion
    if now >= entry.deadline:
        return EventStep(state, settle=(InvocationStatus.FAILED, "timeout"))
    if state.retry_at is not None and now < state.retry_at:
        # A retry's task that came early (a queue may run a task before its ETA): the
        # backoff is a floor, so it goes back to wait for its time.
        return EventStep(state, (act.RetryLater(state.retry_at - now),))
    started_at = state.started_at if state.phase is EventPhase.STARTED else None
    if started_at is not None and now - started_at < _lease(policy, tuning):
        if redelivered:  # its run gave no answer, but may still be sending it: wait out the lease
            return EventStep(state, (act.RetryLater(started_at + _lease(policy, tuning) - now),))
        return EventStep(state)  # a duplicate of a start whose attempt is still in flight
    if paused:
        # Nothing is delivered while a job is paused: the invocation ends here, SKIPPED
        # unless some event went out already (then ABORTED: fanout_step reads the rows).
        return EventStep(state, settle=(InvocationStatus.SKIPPED, SkipReason.PAUSED))
    state = evolve(state, phase=EventPhase.STARTED, started_at=now, retry_at=None, epoch=state.epoch + 1)
    deliver = act.Deliver(entry.invocation_id, entry.scheduled_time, entry.trigger, state.index,
                          entry.event_count, attempt, state.epoch)
    return EventStep(state, (deliver,))


def on_started(entry: ActiveInvocation, state: EventState, attempt: int, epoch: int | None = None) -> EventStep:
    """The target accepted the attempt (202): the event waits for the completion report."""
    if not _current(state, attempt, epoch):
        return _stale(state, attempt, epoch, entry)
    return EventStep(evolve(state, phase=EventPhase.ACCEPTED))


def on_finished(entry: ActiveInvocation, policy: JobPolicy, state: EventState, attempt: int, succeeded: bool,
                reason: str, now: datetime, epoch: int | None = None) -> EventStep:
    """The target answered the attempt: the event succeeded, waits for a retry, or failed."""
    if not _current(state, attempt, epoch):
        return _stale(state, attempt, epoch, entry)
    if succeeded:
        return EventStep(evolve(state, phase=EventPhase.SUCCEEDED))
    reason = reason or "failed"
    retry = policy.retry
    counted = attempt - state.interruptions  # the attempts sent again after an interruption do not count
    if counted < retry.max_attempts:
        retry_at = now + compute_backoff(retry, counted, f"{entry.invocation_id}/{state.index}")
        if retry_at < entry.deadline:
            waiting = EventState(state.index, attempt + 1, EventPhase.WAITING, None, retry_at, reason,
                                 interruptions=state.interruptions)
            return EventStep(waiting, (act.EnqueueAttempt(entry.invocation_id, state.index, attempt + 1, retry_at),))
    return EventStep(evolve(state, phase=EventPhase.FAILED, reason=reason))


def on_interrupted(entry: ActiveInvocation, policy: JobPolicy, state: EventState, attempt: int, now: datetime,
                   epoch: int | None = None, unsent: bool = False) -> EventStep:
    """The event's attempt in flight lost its sender (events.AttemptInterrupted), as
    invocations.on_interrupted has it for an inline event: never sent, back to its start
    task; else sent again as the next attempt after the backoff, not counted, up to
    MAX_INTERRUPTIONS times for the event; then a failed attempt (`interrupted`)."""
    if not _current(state, attempt, epoch) or state.phase is not EventPhase.STARTED:
        return EventStep(state)  # not in flight: answered, issued again, or accepted (202)
    index = state.index
    if unsent:
        waiting = evolve(state, phase=EventPhase.WAITING, started_at=None)
        return EventStep(waiting, (act.EnqueueAttempt(entry.invocation_id, index, attempt, now),))
    if state.interruptions < MAX_INTERRUPTIONS:
        counted = attempt - state.interruptions
        resend_at = now + compute_backoff(policy.retry, counted, f"{entry.invocation_id}/{index}")
        if resend_at < entry.deadline:
            # (Its row tells it, as it tells a failed attempt: no event writes the invocation's record.)
            waiting = EventState(index, attempt + 1, EventPhase.WAITING, None, resend_at, INTERRUPTED,
                                 interruptions=state.interruptions + 1)
            return EventStep(waiting, (act.EnqueueAttempt(entry.invocation_id, index, attempt + 1, resend_at),))
    return on_finished(entry, policy, state, attempt, False, INTERRUPTED, now)


def on_completion(state: EventState, succeeded: bool, reason: str) -> EventStep:
    """The async target's completion report settles an event in flight or accepted;
    an event still waiting to start is not the report's to settle."""
    if state.final or state.phase is EventPhase.WAITING:
        return EventStep(state)
    phase = EventPhase.SUCCEEDED if succeeded else EventPhase.FAILED
    return EventStep(evolve(state, phase=phase, reason="" if succeeded else (reason or "failed")))


def repair(entry: ActiveInvocation, policy: JobPolicy, states: dict[int, EventState], now: datetime,
           tuning: Tuning) -> tuple[list[act.Action], datetime | None]:
    """The watchdog's repair once the entry's `expect_by` passed: re-issue the start of
    every event whose attempt should have started or ended by now and did not.
    Returns the start tasks and the entry's next `expect_by`: while any event has no
    outcome the watchdog comes back, at the latest a lease from now (None: every event
    has its outcome, and the check or the watchdog ends the invocation)."""
    lease = _lease(policy, tuning)
    actions: list[act.Action] = []
    watch: list[datetime] = []
    for index in range(entry.event_count):
        state = states.get(index) or EventState(index)
        if state.final:
            continue
        if state.phase is EventPhase.ACCEPTED:
            watch.append(now + lease)  # its completion report settles it; look again then
            continue
        if state.phase is EventPhase.STARTED and state.started_at is not None:
            due = state.started_at + lease  # by when its attempt should have answered
        elif state.retry_at is not None:
            due = state.retry_at + tuning.start_grace  # by when its retry should have started
        else:
            due = now  # its first start was due by the entry's `expect_by`, which has passed
        if due <= now:
            actions.append(act.EnqueueAttempt(entry.invocation_id, index, state.attempt, now))
            due = now + lease + tuning.start_grace
        watch.append(due)
    return actions, (max(watch) if watch else None)


# --- stored form -------------------------------------------------------------------

def state_to_dict(state: EventState) -> dict[str, Any]:
    data = {"index": state.index, "attempt": state.attempt, "phase": state.phase.value,
            "started_at": stored_time(state.started_at), "retry_at": stored_time(state.retry_at),
            "reason": state.reason, "epoch": state.epoch}
    # Only when there were some: the release before reads only the keys it knows.
    return {**data, "interruptions": state.interruptions} if state.interruptions else data


def state_from_dict(data: dict[str, Any]) -> EventState:
    return EventState(data["index"], data["attempt"], EventPhase(data["phase"]),
                      parse_stored_time(data["started_at"]), parse_stored_time(data["retry_at"]), data["reason"],
                      data.get("epoch", 0),  # absent in rows written before fencing
                      data.get("interruptions", 0))  # absent: none
