"""Sundial's vocabulary, each word defined once: what an invocation can be, why an
occurrence did not run, what started an invocation, which tasks carry the chain, where
a FAILED invocation's notification is, and which kinds of target a job can have.

String enums: a member is its stored and JSON value (`InvocationStatus.FAILED ==
"FAILED"`), so rows, entities, tasks and API answers are unchanged, and a value read
back from storage compares equal to its member.
"""

from __future__ import annotations

from enum import StrEnum


class InvocationStatus(StrEnum):
    """Where an invocation is (docs/REFERENCE.md section 4)."""

    STARTING = "STARTING"  # recorded; no attempt has started yet, or it is waiting its turn
    RUNNING = "RUNNING"  # an attempt has started
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"  # never delivered: its SkipReason says why
    ABORTED = "ABORTED"


ACTIVE_STATUSES = (InvocationStatus.STARTING, InvocationStatus.RUNNING)
TERMINAL_STATUSES = (InvocationStatus.SUCCEEDED, InvocationStatus.FAILED, InvocationStatus.SKIPPED,
                     InvocationStatus.ABORTED)


class DeliveryOutcome(StrEnum):
    """How one attempt's delivery went, as a target reports it (DeliveryResult.outcome);
    the word is logged and counted (`sundial_deliveries_total{outcome=...}`)."""

    SUCCEEDED = "succeeded"  # the target took it (a 2xx, a published message, a created task)
    FAILED = "failed"  # refused, timed out, an error answer, a forbidden address: its reason says which
    ACCEPTED = "accepted"  # an async target's 202: the completion report settles the attempt


class SkipReason(StrEnum):
    """Why an occurrence did not run: the reason of every SKIPPED invocation."""

    OVERLAP = "overlap"  # another invocation of the job was active, and the policy skips
    MISSED = "missed"  # its time passed while nothing ran, or a newer one superseded it
    PAUSED = "paused"  # the job was paused
    DISABLED = "disabled"  # the job was disabled (or removed from its file) while it waited
    # Committed ahead of its time, and the job's new timing has no fire time then
    # (statemachine/staging.py); only an invocation that already had a history row gets it.
    RESCHEDULED = "rescheduled"
    EXCLUDED = "excluded"  # its time falls in one of the job's exclusion calendars (`exclude`)
    # A fan-in job's (`after`) scheduled time: an upstream job did not succeed for it in time
    # (it failed, or the window passed first); the invocation's log names which ones.
    UPSTREAM = "upstream"


class AbortReason(StrEnum):
    """Why Sundial itself aborted an invocation (a user's abort carries the user's words)."""

    DELETED = "deleted"  # its job was deleted through the API
    REPLACED = "replaced"  # a newer occurrence of its job took its place (`overlap: replace`)


class Trigger(StrEnum):
    """What started an invocation; `job:ID` (another job of the project) is `Trigger.job(ID)`."""

    SCHEDULE = "schedule"
    MANUAL = "manual"
    CATCHUP = "catchup"
    BACKFILL = "backfill"  # a person asked for the fire times of a past range (`:backfill`)
    AFTER = "after"  # every upstream job of its `after` succeeded for its scheduled time

    @staticmethod
    def job(job_id: str) -> str:
        return f"{JOB_PREFIX}{job_id}"


JOB_PREFIX = "job:"
# Triggers whose invocation stands for a fire time as it came due: only theirs have a
# lateness. A backfill or a re-run names a past time on purpose, and a manual or a job's
# trigger has no time it was due at.
ON_THE_CLOCK = frozenset({Trigger.SCHEDULE.value, Trigger.CATCHUP.value})


class TaskKind(StrEnum):
    """The task-queue tasks that carry the chain."""

    TICK = "tick"  # the job's next tick (TickLater)
    START = "start"  # one attempt of one event (StartInvocation)
    TRIGGER = "trigger"  # another job's success triggers this one
    NOTIFY = "notify"  # an on_failure notification
    CHECK = "check"  # see whether every event of a fan-out has its outcome (statemachine/fanout.py)
    DEADLINE = "deadline"  # an invocation's deadline timer (statemachine/deadlines.py)
    INBOX = "inbox"  # fold a job's pending triggers into its record (engine/inbox.py)
    CANCEL = "cancel"  # tell an async target's cancel_url its invocation was aborted (engine/cancels.py)

    @property
    def handler_path(self) -> str:
        """The internal handler that runs it: POST /internal/tasks/<handler_path>."""
        return "start-invocation" if self is TaskKind.START else self.value


def task_kind(stored: str) -> TaskKind | str:
    """A stored task's kind; the text itself when this version does not know it (a task
    written by a newer one), so its handler can log and drop just that task."""
    try:
        return TaskKind(stored)
    except ValueError:
        return stored


class NotificationStatus(StrEnum):
    """Where the `on_failure` notification of an invocation is (statemachine/notification.py)."""

    NONE = "none"  # none was asked for
    PENDING = "pending"  # the task of its next attempt is enqueued
    SENDING = "sending"  # an attempt is committed as sending: its request may be on its way
    SENT = "sent"  # the target took it
    GAVE_UP = "gave_up"  # its last attempt failed, or there was no target left to try


class TargetKind(StrEnum):
    """Where a job's occurrence goes (docs/REFERENCE.md section 2: exactly one per target).
    Each kind's fields, its payload field among them, are in statemachine/target_kinds.py."""

    HTTP = "http"
    PUBSUB = "pubsub"
    CLOUD_TASKS = "cloud_tasks"
    NOOP = "noop"


class AuditAction(StrEnum):
    """An operator's action, as the audit log names it (engine/audit.py)."""

    PUT = "put"  # a job created or replaced through the API
    DELETE = "delete"
    PAUSE = "pause"
    RESUME = "resume"
    TRIGGER = "trigger"
    ABORT = "abort"
    BACKFILL = "backfill"

    @property
    def past_tense(self) -> str:
        """The verb of its log line: `audit: user:alice@example.com paused p/j: INC-1234`."""
        return _PAST_TENSE[self]


_PAST_TENSE = {AuditAction.PUT: "put", AuditAction.DELETE: "deleted", AuditAction.PAUSE: "paused",
               AuditAction.RESUME: "resumed", AuditAction.TRIGGER: "triggered", AuditAction.ABORT: "aborted",
               AuditAction.BACKFILL: "backfilled"}
