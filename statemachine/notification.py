"""The `on_failure` notification of a FAILED invocation: `step(state, event, now)`.

The host's contract, as for the job machine: in one transaction, load the
invocation's `NotificationState`, call `step` with one event, apply every action
but `SendNotification`, save the new state. `SendNotification` is performed after
the commit (write before call), and its outcome is the next step's event.

The notification's tasks come at least once and may come late. An event about an
attempt that has settled (a later attempt is due, or the notification is over)
changes nothing and asks for nothing. The one exception is deliberate: a task that
comes again while its attempt is still `sending` is the redelivery of an attempt
whose process died before it could say how it went, so it is sent again (a
notification is delivered at least once). A success is taken whenever it comes:
the target has the message, so no later attempt is needed.

Nothing here reads a clock or touches storage, so a step can be replayed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import assert_never

from statemachine.policy import NOTIFY_RETRY, compute_backoff
from statemachine.vocabulary import NotificationStatus

Status = NotificationStatus


@dataclass(frozen=True)
class NotificationState:
    """What an invocation's row holds about its notification."""

    status: NotificationStatus = Status.NONE
    # The attempt the status is about: the one due (PENDING), in flight (SENDING),
    # that got through (SENT) or the last one made (GAVE_UP); 0 before any.
    attempt: int = 0
    reason: str = ""  # why the latest failed attempt failed


NO_NOTIFICATION = NotificationState()


# --- events: what happened, in the past tense -------------------------------------------

@dataclass(frozen=True)
class NotificationRequested:
    """The invocation ended FAILED and its job has an `on_failure` target."""


@dataclass(frozen=True)
class NotificationDue:
    """The task of `attempt` arrived."""

    attempt: int


@dataclass(frozen=True)
class NotificationSent:
    """The target took `attempt`."""

    attempt: int


@dataclass(frozen=True)
class NotificationFailed:
    """`attempt` did not get through; `final`: nothing is left to retry with (e.g. the
    job no longer has an `on_failure` target)."""

    invocation_id: str  # the jitter key of the retry's backoff
    attempt: int
    reason: str
    final: bool = False


Event = NotificationRequested | NotificationDue | NotificationSent | NotificationFailed


# --- actions: what the host is to do, imperative ------------------------------------------

@dataclass(frozen=True)
class SendNotification:
    """After the commit, send `attempt` to the job's `on_failure` target."""

    attempt: int


@dataclass(frozen=True)
class ScheduleNotification:
    """Enqueue the task of `attempt`, due at `at`."""

    attempt: int
    at: datetime


@dataclass(frozen=True)
class GiveUpNotification:
    """No attempt follows `attempt`: say so where people read the invocation."""

    attempt: int
    reason: str


Action = SendNotification | ScheduleNotification | GiveUpNotification


def step(state: NotificationState, event: Event, now: datetime) -> tuple[NotificationState, list[Action]]:
    """The notification's next state and what the host is to do about `event`."""
    if isinstance(event, NotificationRequested):
        if state.status is not Status.NONE:
            return state, []
        return NotificationState(Status.PENDING, 1), [ScheduleNotification(1, now)]
    if isinstance(event, NotificationSent):
        if state.status is Status.SENT:
            return state, []
        return NotificationState(Status.SENT, event.attempt, state.reason), []
    if settled(state, event.attempt):
        return state, []
    if isinstance(event, NotificationDue):
        return replace(state, status=Status.SENDING, attempt=event.attempt), [SendNotification(event.attempt)]
    if isinstance(event, NotificationFailed):
        return _failed(event, now)
    assert_never(event)


def settled(state: NotificationState, attempt: int) -> bool:
    """Nothing more can come of `attempt`: the notification is over, or a later attempt is due."""
    return state.status in (Status.SENT, Status.GAVE_UP) or attempt < state.attempt


def _failed(event: NotificationFailed, now: datetime) -> tuple[NotificationState, list[Action]]:
    attempt, reason = event.attempt, event.reason
    if event.final or attempt >= NOTIFY_RETRY.max_attempts:
        return NotificationState(Status.GAVE_UP, attempt, reason), [GiveUpNotification(attempt, reason)]
    retry_at = now + compute_backoff(NOTIFY_RETRY, attempt, f"notify/{event.invocation_id}")
    return NotificationState(Status.PENDING, attempt + 1, reason), [ScheduleNotification(attempt + 1, retry_at)]


# --- storage -----------------------------------------------------------------------------

def state_to_dict(state: NotificationState) -> dict[str, object]:
    """JSON-ready, without the fields at their defaults: no notification is `{}`."""
    data: dict[str, object] = {}
    if state.status is not Status.NONE:
        data["status"] = state.status.value
    if state.attempt:
        data["attempt"] = state.attempt
    if state.reason:
        data["reason"] = state.reason
    return data


def state_from_dict(data: dict[str, object]) -> NotificationState:
    status, attempt, reason = data.get("status", "none"), data.get("attempt", 0), data.get("reason", "")
    if not isinstance(status, str) or not isinstance(attempt, int) or not isinstance(reason, str):
        raise ValueError(f"not a notification state: {data!r}")
    return NotificationState(Status(status), attempt, reason)
