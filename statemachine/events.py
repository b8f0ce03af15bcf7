"""Events: what happened to a job, in the past tense. One event per step.

Two of them carry more than one kind of happening, told apart by a field (their
names stay as they are; the docstrings below say what each form means):
`InvocationFinished` with `attempt=None` is an async target's completion report,
not the end of one attempt; `ManualTrigger.trigger` says whether a person or
another job's success asked for the invocation, and the machine treats the two
differently when the job is stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from statemachine.policy import JobPolicy
from statemachine.runs import Run
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
    """A tick task was delivered; `nonce` says which tick it was. `redelivered`: the
    queue ran this task before and that run gave no answer (Cloud Tasks' retry count
    is above 0): whatever that run began has ended, and an attempt it delivered inline
    is interrupted (AttemptInterrupted: sent again under the same invocation id)."""

    nonce: str
    redelivered: bool = False


@dataclass(frozen=True)
class InvocationStarting:
    """A start task for one attempt of one event of an invocation was delivered.

    The step that consumes it is the write that must commit before the target
    is called.
    """

    invocation_id: str
    event_index: int = 0
    attempt: int = 1
    # The queue ran this task before without an answer: its attempt, still "in
    # flight" in storage, died with that run: it is interrupted (AttemptInterrupted).
    redelivered: bool = False


@dataclass(frozen=True)
class InvocationStarted:
    """The target accepted an attempt asynchronously (HTTP 202); its completion
    comes later through the completion URL."""

    invocation_id: str
    event_index: int = 0
    attempt: int = 1
    epoch: int | None = None  # the Deliver's fencing token; None: not fenced (see InvocationFinished)


@dataclass(frozen=True)
class InvocationFinished:
    """An attempt ended: the target answered (or failed to) for `attempt` of event
    `event_index`, and a failure may be retried.

    With `attempt=None` it is a different happening: the async target's completion
    report arrived (POST .../invocations/ID:complete, after an earlier 202). It names
    no attempt and no event: it settles every event of the invocation still in
    flight or accepted, at once and without a retry (`succeeded`, `reason` as the
    report says), and is ignored once the invocation has finished.
    """

    invocation_id: str
    succeeded: bool
    reason: str = ""
    event_index: int = 0
    attempt: int | None = 1
    # The epoch of the Deliver this answers (its fencing token): the result counts only
    # while the stored attempt still has that epoch. None: not an answer of a sender
    # (a completion report).
    epoch: int | None = None
    # The sender has room to hold one more request: when this ends the job's last
    # invocation, its next occurrence may be staged in the same step (ticks.stage_pending).
    stage_next: bool = False


@dataclass(frozen=True)
class AttemptInterrupted:
    """An attempt in flight lost its sender before an answer came: its process died or
    stopped (a gone process's hold, engine/interruptions.py), or the queue ran its task
    again after a run that gave no answer (Cloud Tasks; see TickArrived). The target may
    or may not have got the request; nobody will hear its answer.

    Not a failure of the target: the attempt is sent again under the same invocation id
    without counting against `max_attempts`, up to MAX_INTERRUPTIONS times per
    invocation (statemachine/invocations.py, `on_interrupted`).

    `epoch`: the issue interrupted (None: whichever is in flight). `released_until`: of a
    gone process's staged attempt, the latest time of a request that process may have let
    out; one due later was never sent (staging.unsent). `unsent`: the process itself says
    the request never left (a stop dropped it before its write). Either way it goes back
    to a start task under the same id and attempt, as if it had not begun.
    """

    invocation_id: str
    event_index: int = 0
    attempt: int = 1
    epoch: int | None = None
    released_until: datetime | None = None
    unsent: bool = False


@dataclass(frozen=True)
class InvocationSettled:
    """Every event of a fan-out invocation whose events live in rows of their own
    (statemachine/fanout.py) has its outcome, or one event's step ended the whole
    invocation (a deadline passed, the job is paused): it ends with `status` and
    `reason`. `attempts`: the highest attempt any event reached."""

    invocation_id: str
    status: str
    reason: str = ""
    attempts: int = 1


@dataclass(frozen=True)
class ManualTrigger:
    """A request to start an invocation now.

    `request_id` makes the trigger idempotent: the same request at the same
    `at` names the same invocation (the shell refuses a second one). `at` is
    when the trigger was asked for (default: the step's `now`), so that a
    redelivered trigger task names the same invocation as the first delivery.

    `trigger` says who asked, and is stored as the invocation's trigger:
    - `Trigger.MANUAL` ("manual"): a person (the API, the UI, the CLI). A paused
      or disabled job refuses it (InvalidTransition), so the person hears why.
    - `Trigger.job(ID)` ("job:ID"): job ID of the same project succeeded and
      names this job in its `triggers`; `request_id` is that job's invocation.
      Nobody waits for an answer, so a paused or disabled job records it
      SKIPPED (reason paused/disabled) instead of refusing it.
    - `Trigger.BACKFILL` ("backfill"): a person asked for every fire time in
      `backfill` (a run of the job's schedule, statemachine/backfill.py), each an
      invocation with its own scheduled time, started in order; refused like a
      person's trigger when the job is paused or disabled.

    A person's trigger with an `at` in the past re-runs that occurrence: the
    invocation's scheduled time (and its template values) is `at`.
    """

    request_id: str
    trigger: str = Trigger.MANUAL
    at: datetime | None = None
    backfill: Run | None = None
    # Not a start but a fan-in report (trigger `after`, statemachine/fanin.py): upstream
    # job `upstream`'s invocation `request_id` for scheduled time `at` ended `upstream_status`.
    upstream: str | None = None
    upstream_status: str = ""


@dataclass(frozen=True)
class Paused:
    reason: str = ""
    by: str = ""  # who asked (the job's `paused_by`); "" for the job's own pause_after_failures


@dataclass(frozen=True)
class Resumed:
    pass


@dataclass(frozen=True)
class Aborted:
    """Abort every active invocation of the job."""

    reason: str = "aborted"


@dataclass(frozen=True)
class WatchdogFired:
    """The watchdog found the job's `watchdog_at` in the past. `queue_lost`: the task queue
    came back from an outage and may have lost what it held (an emulator restarted
    empty): the job's pending tick is armed again at its time, however soon it is due."""

    queue_lost: bool = False


Event = (
    JobEnabled
    | JobDisabled
    | ScheduleChanged
    | TickArrived
    | InvocationStarting
    | InvocationStarted
    | InvocationFinished
    | AttemptInterrupted
    | InvocationSettled
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
    AttemptInterrupted,
    InvocationSettled,
    ManualTrigger,
    Paused,
    Resumed,
    Aborted,
    WatchdogFired,
)
