"""Actions: what the shell must do, in the imperative. The shell applies every
action of a transition in the same transaction as the new record, except
`Deliver`, which it performs after the commit."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from statemachine.record import Occurrence


@dataclass(frozen=True)
class ScheduleTick:
    """Enqueue a tick task for `at` (hopping if it is beyond the queue's reach)."""

    at: datetime
    nonce: str
    # The queue may run it this long before `at`: the tick of an occurrence that is
    # staged (statemachine/staging.py). Not part of the action's equality.
    lead: timedelta = field(default=timedelta(0), compare=False)


@dataclass(frozen=True)
class StartInvocation:
    """Create the invocation record, status STARTING.

    `deferred`: the job record's active entry holds the invocation and this
    transaction also commits its first attempt as starting; the shell may
    write the history record later, when the attempt ends (one write fewer).
    """

    invocation_id: str
    scheduled_time: datetime
    trigger: str
    event_count: int = 1
    deferred: bool = False


@dataclass(frozen=True)
class EnqueueAttempt:
    """Enqueue a start task for one attempt of one event, due at `at`."""

    invocation_id: str
    event_index: int
    attempt: int
    at: datetime


@dataclass(frozen=True)
class CheckEvents:
    """Enqueue a check of whether every event of the fan-out invocation has its outcome
    (statemachine/fanout.py), due at `at`: the end of a period (fanout_step.check_due),
    so that the checks asked for within one period are one task."""

    invocation_id: str
    at: datetime


@dataclass(frozen=True)
class ArmDeadline:
    """Enqueue the invocation's deadline timer, due at `at` (its deadline): a task that
    ends the invocation FAILED/timeout if it is still active then (statemachine/deadlines.py)."""

    invocation_id: str
    at: datetime


@dataclass(frozen=True)
class Deliver:
    """Mark the attempt RUNNING in this transaction; after commit, call the target."""

    invocation_id: str
    scheduled_time: datetime
    trigger: str
    event_index: int
    event_count: int
    attempt: int
    # The fencing token of this issue of the attempt: the attempt's epoch, one more at
    # every commit that (re-)issues it. Its result carries it back, and a result whose
    # epoch is no longer the stored one is refused (`RefuseStaleResult`). Not part of
    # the action's equality: it names the same attempt.
    epoch: int = field(default=0, compare=False)
    # A staged attempt (statemachine/staging.py) is sent at this instant, not at once:
    # the shell holds the request until then and checks the job first.
    send_at: datetime | None = field(default=None, compare=False)


@dataclass(frozen=True)
class RecordSkipped:
    """Record an occurrence that gets no delivery: an invocation with status SKIPPED."""

    invocation_id: str
    scheduled_time: datetime
    trigger: str
    reason: str
    detail: str = ""  # more than the reason says, for the invocation's log (e.g. which upstream job failed)

    @classmethod
    def of(cls, occurrence: Occurrence, reason: str, detail: str = "") -> RecordSkipped:
        """The occurrence, skipped for `reason` (a SkipReason): the one way the core builds it."""
        return cls(occurrence.invocation_id, occurrence.scheduled_time, occurrence.trigger, reason, detail)


@dataclass(frozen=True)
class FinishInvocation:
    """Give an invocation its terminal status (SUCCEEDED, FAILED or ABORTED)."""

    invocation_id: str
    status: str
    reason: str = ""


@dataclass(frozen=True)
class RecordAttemptFailed:
    """Log a failed attempt on the invocation; `retry_at` is None when it was the last."""

    invocation_id: str
    event_index: int
    attempt: int
    reason: str
    retry_at: datetime | None


@dataclass(frozen=True)
class RecordAttemptInterrupted:
    """Log an interrupted attempt (events.AttemptInterrupted) sent again at `resend_at`
    as attempt `attempt + 1`, not counted against max_attempts: the invocation's
    `interruption`-th of at most MAX_INTERRUPTIONS."""

    invocation_id: str
    event_index: int
    attempt: int
    resend_at: datetime
    interruption: int


@dataclass(frozen=True)
class TriggerJobs:
    """Send ManualTrigger(request_id=source invocation, trigger=job:SOURCE, at=source's
    scheduled time) to each job: the same source always names the same invocations."""

    job_ids: tuple[str, ...]
    source_invocation_id: str
    source_scheduled_time: datetime | None = None
    # Set for a fan-in report (`after`): the source's terminal status, which each job
    # counts for the source's scheduled time (statemachine/fanin.py) instead of starting.
    source_status: str | None = None


@dataclass(frozen=True)
class NotifyFailure:
    """Enqueue the notification of an invocation that ended FAILED to the job's
    `on_failure` target, in the same transaction that finished it."""

    invocation_id: str
    scheduled_time: datetime
    trigger: str
    reason: str
    attempts: int
    failures: int = 1  # FAILED invocations in a row, this one included


@dataclass(frozen=True)
class NotifyRecovery:
    """Enqueue the notification of the first SUCCEEDED invocation after `failures` FAILED
    ones to the job's `on_recovery` target, in the same transaction that finished it."""

    invocation_id: str
    scheduled_time: datetime
    trigger: str
    attempts: int
    failures: int


@dataclass(frozen=True)
class RefuseStaleResult:
    """A result of an attempt that was issued again since it was sent (its epoch is not
    the stored one), or that was settled without it: nothing of it is recorded. The
    shell logs and counts it."""

    invocation_id: str
    event_index: int
    attempt: int
    epoch: int


@dataclass(frozen=True)
class WithdrawOccurrence:
    """An occurrence committed ahead of its time is taken back before anything of it was
    sent, its time being no fire time of the job's new timing (statemachine/staging.py,
    `withdraw_rescheduled`). A history row written for it ends SKIPPED, reason
    `rescheduled`; without one nothing is written: it goes as if its tick had not run."""

    invocation_id: str


@dataclass(frozen=True)
class CancelTick:
    """Take the queued tick for `at` named by `nonce` off the queue where it can be: the
    step that finished the job's invocation staged the occurrence that tick was queued
    early for (ticks.stage_pending), so it would only come to be found stale."""

    nonce: str
    at: datetime


@dataclass(frozen=True)
class RetryLater:
    """Hand the task being processed back to its queue, to come again after `delay`."""

    delay: timedelta


Action = (
    ScheduleTick
    | StartInvocation
    | EnqueueAttempt
    | CheckEvents
    | ArmDeadline
    | Deliver
    | RecordSkipped
    | FinishInvocation
    | RecordAttemptFailed
    | RecordAttemptInterrupted
    | TriggerJobs
    | NotifyFailure
    | NotifyRecovery
    | RetryLater
    | RefuseStaleResult
    | WithdrawOccurrence
    | CancelTick
)
