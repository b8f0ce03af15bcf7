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
    """Where an invocation is (CONTRACT section 4)."""

    STARTING = "STARTING"  # recorded; no attempt has started yet, or it is waiting its turn
    RUNNING = "RUNNING"  # an attempt has started
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"  # never delivered: its SkipReason says why
    ABORTED = "ABORTED"


ACTIVE_STATUSES = (InvocationStatus.STARTING, InvocationStatus.RUNNING)
TERMINAL_STATUSES = (InvocationStatus.SUCCEEDED, InvocationStatus.FAILED, InvocationStatus.SKIPPED,
                     InvocationStatus.ABORTED)


class SkipReason(StrEnum):
    """Why an occurrence did not run: the reason of every SKIPPED invocation."""

    OVERLAP = "overlap"  # another invocation of the job was active, and the policy skips
    MISSED = "missed"  # its time passed while nothing ran, or a newer one superseded it
    PAUSED = "paused"  # the job was paused
    DISABLED = "disabled"  # the job was disabled (or removed from its file) while it waited


class AbortReason(StrEnum):
    """Why Sundial itself aborted an invocation (a user's abort carries the user's words)."""

    DELETED = "deleted"  # its job was deleted through the API


class Trigger(StrEnum):
    """What started an invocation; `job:ID` (another job of the project) is `Trigger.job(ID)`."""

    SCHEDULE = "schedule"
    MANUAL = "manual"
    CATCHUP = "catchup"

    @staticmethod
    def job(job_id: str) -> str:
        return f"{JOB_PREFIX}{job_id}"


JOB_PREFIX = "job:"


class TaskKind(StrEnum):
    """The task-queue tasks that carry the chain."""

    TICK = "tick"  # the job's next tick (TickLater)
    START = "start"  # one attempt of one event (StartInvocation)
    TRIGGER = "trigger"  # another job's success triggers this one
    NOTIFY = "notify"  # an on_failure notification

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
    """Where a job's occurrence goes (CONTRACT section 2: exactly one per target)."""

    HTTP = "http"
    PUBSUB = "pubsub"
    CLOUD_TASKS = "cloud_tasks"
    NOOP = "noop"

    @property
    def payload_field(self) -> str:
        """The field of a target of this kind that carries the request's payload ("" for
        none): an `on_failure` target that leaves it empty is sent the summary there."""
        return _PAYLOAD_FIELDS.get(self, "")


_PAYLOAD_FIELDS = {TargetKind.HTTP: "body", TargetKind.PUBSUB: "data", TargetKind.CLOUD_TASKS: "body"}
