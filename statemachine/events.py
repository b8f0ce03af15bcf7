"""Events: what happened to a job, in the past tense. One event per step."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from statemachine.policy import JobPolicy
from statemachine.vocabulary import Trigger


@dataclass(frozen=True)
class JobEnabled:
    """The job is defined (again) and not disabled; carries its current policy."""

    policy: JobPolicy


@dataclass(frozen=True)
class JobDisabled:
    """The job was removed from its config, set `disabled: true`, or deleted."""


@dataclass(frozen=True)
class ScheduleChanged:
    """The job's definition has a new revision."""

    policy: JobPolicy


@dataclass(frozen=True)
class TickArrived:
    """A tick task was delivered; `nonce` says which tick it was."""

    nonce: str


@dataclass(frozen=True)
class InvocationStarting:
    """A start task for one attempt of one event of an invocation was delivered.

    The step that consumes it is the write that must commit before the target
    is called.
    """

    invocation_id: str
    event_index: int = 0
    attempt: int = 1


@dataclass(frozen=True)
class InvocationStarted:
    """The target accepted an attempt asynchronously (HTTP 202); its completion
    comes later through the completion URL."""

    invocation_id: str
    event_index: int = 0
    attempt: int = 1


@dataclass(frozen=True)
class InvocationFinished:
    """An attempt ended, or (with `attempt=None`) an async completion arrived."""

    invocation_id: str
    succeeded: bool
    reason: str = ""
    event_index: int = 0
    attempt: int | None = 1


@dataclass(frozen=True)
class ManualTrigger:
    """A request to start an invocation now.

    `request_id` makes the trigger idempotent: the same request at the same
    `at` names the same invocation (the shell refuses a second one). `trigger`
    is `manual` or `job:ID` for another job's success; `at` is when the
    trigger was asked for (default: the step's `now`), so that a redelivered
    trigger task names the same invocation as the first delivery.
    """

    request_id: str
    trigger: str = Trigger.MANUAL
    at: datetime | None = None


@dataclass(frozen=True)
class Paused:
    reason: str = ""


@dataclass(frozen=True)
class Resumed:
    pass


@dataclass(frozen=True)
class Aborted:
    """Abort every active invocation of the job."""

    reason: str = "aborted"


@dataclass(frozen=True)
class WatchdogFired:
    """The watchdog found the job's `watchdog_at` in the past."""


Event = (
    JobEnabled
    | JobDisabled
    | ScheduleChanged
    | TickArrived
    | InvocationStarting
    | InvocationStarted
    | InvocationFinished
    | ManualTrigger
    | Paused
    | Resumed
    | Aborted
    | WatchdogFired
)

ALL_EVENT_TYPES = (
    JobEnabled,
    JobDisabled,
    ScheduleChanged,
    TickArrived,
    InvocationStarting,
    InvocationStarted,
    InvocationFinished,
    ManualTrigger,
    Paused,
    Resumed,
    Aborted,
    WatchdogFired,
)
