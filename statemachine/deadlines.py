"""Deadline timers: what ends an invocation at its `timeout`, within a second or two.

An invocation's deadline is also part of its job's `watchdog_at`, but the watchdog
runs every 30 s on one machine and every minute on App Engine: it repairs broken
chains, and is far too coarse to keep a deadline. So the chain keeps it, as LUCI's
timers do: a step that leaves an invocation waiting on something that may not come
before its deadline arms a timer, a task of its own kind (`ArmDeadline`, the shell's
`deadline` task) due at the deadline. When it comes, the job is repaired as the
watchdog would repair it (fanout_step.step_job): an invocation still active ends
FAILED, reason `timeout`. A timer whose invocation already ended is stale and changes
nothing; one that comes early goes back to the queue until the deadline.

Most invocations never need one: a synchronous attempt whose answer is due before the
deadline is followed by a step (its result) that looks again. A timer is armed when:
- the invocation's events live in rows (a fan-out): their steps never touch the job's
  record, so nothing on the record's side looks at the deadline;
- every event was accepted (202): only the completion report, or the deadline, is left;
- the current attempt's answer (or its start) is due after the deadline: an attempt
  timeout longer than what is left of the invocation's;
- the job is throttled: its starts wait behind the throttle's other deliveries.
The rule is checked after every step, and a timer is armed when an entry comes to need
one (it did not before the step), so an invocation gets at most one timer in practice
(and a second one, should it come, is named as the first). Nothing is stored for it:
the entry as it was before the step says whether one was armed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from statemachine import actions as act
from statemachine.policy import JobPolicy, Tuning
from statemachine.record import ActiveInvocation, JobRecord


@dataclass(frozen=True)
class DeadlineDue:
    """The timer armed at an invocation's deadline came (the shell's `deadline` task).
    Stepped by `fanout_step.step_job`, which alone knows it."""

    invocation_id: str


def needs_timer(entry: ActiveInvocation, policy: JobPolicy | None, tuning: Tuning) -> bool:
    """Whether nothing the chain holds is sure to step the job before `entry`'s deadline."""
    if entry.events_in_rows or entry.expect_by is None:
        return True
    if policy is not None and policy.throttle:
        return True
    # `expect_by` is when the next step is due at the latest, plus the grace the
    # watchdog allows a lost task or answer before it repairs the chain.
    return entry.expect_by - tuning.start_grace > entry.deadline


def arm(before: JobRecord, after: JobRecord, actions: list[act.Action], tuning: Tuning) -> list[act.Action]:
    """`actions` and a timer for each active entry of `after` that came to need one."""
    armed = []
    for entry in after.active:
        if not needs_timer(entry, after.policy, tuning):
            continue
        earlier = before.find_active(entry.invocation_id)
        if earlier is not None and needs_timer(earlier, before.policy, tuning):
            continue  # armed by the step that made it need one
        armed.append(act.ArmDeadline(entry.invocation_id, entry.deadline))
    return [*actions, *armed] if armed else actions


def early_by(record: JobRecord, event: DeadlineDue, now: datetime) -> act.RetryLater | None:
    """A timer that came before its invocation's deadline goes back to the queue until
    then (a queue may run a task a little early); None when it is on time or stale."""
    entry = record.find_active(event.invocation_id)
    if entry is None or now >= entry.deadline:
        return None
    return act.RetryLater(entry.deadline - now)
