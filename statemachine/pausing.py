"""Pausing a job: the one path both an operator's pause and `pause_after_failures` take.

Pure, like the rest of the machine: (record, actions) out of (record, reason, now).
"""

from __future__ import annotations

from datetime import datetime

from statemachine import actions as act
from statemachine.record import JobRecord, evolve
from statemachine.vocabulary import InvocationStatus, SkipReason
from statemachine.waiting import stop_waiting


def pause(record: JobRecord, reason: str, now: datetime, by: str = "") -> tuple[JobRecord, list[act.Action]]:
    """Stop new occurrences: drop what waits (SKIPPED/paused) and the tick (one stays
    only while the dropped ones are being recorded, see waiting.stop_waiting).

    Pausing a paused job only updates the reason and who gave it. Invocations in flight finish on
    their own; events not yet started end when their start task comes (see
    invocations.on_starting).
    """
    if record.paused:
        return evolve(record, pause_reason=reason, paused_by=by), []
    record = evolve(record, paused=True, pause_reason=reason, paused_by=by, paused_at=now)
    return stop_waiting(record, SkipReason.PAUSED, now)


def count_outcome(record: JobRecord, status: str, reason: str, now: datetime) -> tuple[JobRecord, list[act.Action]]:
    """Count consecutive failures; pause the job when `pause_after_failures` is reached.

    A SUCCEEDED invocation resets the count (and `failures_since_success`) and is the
    job's last success; SKIPPED and ABORTED ones leave all three alone (they say nothing
    about the target). A job already paused keeps its reason.
    """
    if status == InvocationStatus.SUCCEEDED:
        return evolve(record, consecutive_failures=0, failures_since_success=0, last_succeeded_at=now), []
    if status != InvocationStatus.FAILED:
        return record, []
    failures = record.consecutive_failures + 1
    record = evolve(record, consecutive_failures=failures, failures_since_success=record.failures_since_success + 1)
    limit = record.policy.pause_after_failures if record.policy else 0
    if not limit or failures < limit or record.paused or record.disabled:
        return record, []
    last = f" (last: {reason})" if reason else ""
    return pause(record, f"paused after {failures} consecutive failures{last}", now)
