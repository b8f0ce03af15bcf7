"""Which hook an invocation that just ended asks for: `on_finish(record, ...)`.

`on_failure` is told of every FAILED invocation. `on_recovery` is told of the first
SUCCEEDED invocation after a failure: one whose job's previous invocation to end
FAILED or SUCCEEDED, in the order they finished, ended FAILED. SKIPPED and ABORTED
invocations between them say nothing about the target and change nothing, and neither
does pausing or resuming the job (the streak is the record's `failures_since_success`,
which only a success resets). So FAILED, SKIPPED, ABORTED, SUCCEEDED sends one
`on_recovery` (failures 1), and FAILED, FAILED, SUCCEEDED, SUCCEEDED sends one too
(failures 2), for the first success only.

Pure: called by invocations.finish with the record as it was before the invocation
ended, so the streak has not yet counted it.
"""

from __future__ import annotations

from statemachine import actions as act
from statemachine.record import ActiveInvocation, JobRecord
from statemachine.vocabulary import InvocationStatus


def on_finish(record: JobRecord, entry: ActiveInvocation, status: str, reason: str,
              attempts: int) -> list[act.Action]:
    """The notification `entry` ending with `status` asks for, if any."""
    policy, streak = record.live_policy, record.failures_since_success
    if status == InvocationStatus.FAILED and policy.notify_failures:
        return [act.NotifyFailure(entry.invocation_id, entry.scheduled_time, entry.trigger, reason, attempts,
                                  streak + 1)]
    if status == InvocationStatus.SUCCEEDED and streak and policy.notify_recoveries:
        return [act.NotifyRecovery(entry.invocation_id, entry.scheduled_time, entry.trigger, attempts, streak)]
    return []
