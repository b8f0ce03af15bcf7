"""Admitting an occurrence under the job's overlap policy: start it, make it wait its
turn, or record it SKIPPED/overlap (statemachine/invocations.py starts what is admitted).

Every function takes a record and returns (record, actions); none of them
looks at anything but its arguments.
"""

from __future__ import annotations

from datetime import datetime

from statemachine import actions as act
from statemachine import waiting
from statemachine.budget import STARTS_PER_STEP
from statemachine.invocations import Result, excluded, finish, start
from statemachine.policy import Catchup, JobPolicy, Overlap, Tuning
from statemachine.record import JobRecord, Occurrence
from statemachine.runs import Run
from statemachine.vocabulary import JOB_PREFIX, AbortReason, InvocationStatus, SkipReason, Trigger


def admit(
    record: JobRecord, occurrence: Occurrence, now: datetime, tuning: Tuning, inline: bool = False
) -> Result:
    """Start an occurrence, let it wait, or skip it, as the overlap policy says.

    `inline`: the caller will deliver right after its commit (see `start`).
    """
    policy = record.live_policy
    if len(record.active) < policy.concurrency_limit() or excluded(record, occurrence):
        return start(record, occurrence, now, tuning, inline)  # an excluded one is recorded SKIPPED there
    if _trigger_storm(record, occurrence, policy):
        return record, [act.RecordSkipped.of(occurrence, SkipReason.OVERLAP)]
    # A caught-up occurrence under `catchup: all` is never dropped for overlap:
    # the policy promises each one is delivered, so they wait their turn.
    if policy.overlap is Overlap.BUFFER_ALL or _kept_in_order(occurrence.trigger, policy):
        return waiting.push(record, occurrence, policy)
    if policy.overlap is Overlap.REPLACE:
        return _replace(record, occurrence, now, tuning, inline)
    if policy.overlap is Overlap.BUFFER_ONE:
        # The newest replaces what waits, except the caught-up and backfilled ones promised above.
        record, dropped = waiting.drop_unless(record, lambda trigger: _kept_in_order(trigger, policy),
                                              SkipReason.OVERLAP)
        record, pushed = waiting.push(record, occurrence, policy)
        return record, dropped + pushed
    return record, [act.RecordSkipped.of(occurrence, SkipReason.OVERLAP)]


def _replace(record: JobRecord, occurrence: Occurrence, now: datetime, tuning: Tuning, inline: bool) -> Result:
    """`overlap: replace`: abort what is active (ABORTED/replaced, as a user's abort would:
    its late answers are refused) and start the occurrence at once. Should the aborts let
    an occurrence kept in order start (a caught-up one under `catchup: all`, a backfill's),
    this one waits behind it instead of replacing that too."""
    actions: list[act.Action] = []
    for entry in record.active:
        current = record.find_active(entry.invocation_id)
        if current is not None:
            record, finished = finish(record, current, InvocationStatus.ABORTED, AbortReason.REPLACED, now, tuning)
            actions += finished
    if len(record.active) >= record.live_policy.concurrency_limit():
        record, pushed = waiting.push(record, occurrence, record.live_policy)
        return record, actions + pushed
    record, started = start(record, occurrence, now, tuning, inline)
    return record, actions + started


def admit_run(record: JobRecord, run: Run, now: datetime, tuning: Tuning, inline: bool = False) -> Result:
    """Admit the run's occurrences, in order, as `admit` would one by one: start what the
    overlap policy lets start, queue the rest as one run when they all wait."""
    policy = record.live_policy
    actions: list[act.Action] = []
    rest: Run | None = run
    starts = 0
    while rest is not None and len(record.active) < policy.concurrency_limit() and starts < STARTS_PER_STEP:
        first = rest.first()
        if first is None:
            break
        starts += 1
        rest = rest.without_through(first)
        record, started = start(record, waiting.occurrence(record, first, run.trigger, run.key), now, tuning, inline)
        actions += started
    if rest is None:
        return record, actions
    if policy.overlap is Overlap.BUFFER_ALL or _kept_in_order(run.trigger, policy):
        record, queued = waiting.push_run(record, rest)
        return record, actions + queued
    # Only `catchup: all` and a backfill admit a run, and they all wait; were a run
    # of others admitted, each would be admitted alone (under buffer_one the newest waits).
    for moment in rest.times():
        record, admitted = admit(record, waiting.occurrence(record, moment, run.trigger), now, tuning, inline)
        actions += admitted
    return record, only_active_delivered(record, actions)


def only_active_delivered(record: JobRecord, actions: list[act.Action]) -> list[act.Action]:
    """`actions` without the deliveries of invocations no longer active: under `overlap:
    replace` an occurrence admitted later in the same step aborts one started (inline)
    earlier in it, which must then never reach its target."""
    return [action for action in actions
            if not isinstance(action, act.Deliver) or record.find_active(action.invocation_id) is not None]


# Under `buffer_all`, at most this many occurrences started by other jobs' triggers
# wait at once, and at most this many started by people (the API, the UI); more are
# SKIPPED/overlap, so that a storm of upstream successes or of requests cannot grow a
# job's record (and its backlog) without bound. Every other overlap policy bounds
# them already (skip: none wait; buffer_one: one; allow: none beyond max_concurrent).
MAX_TRIGGERED_WAITING = 100


def _trigger_storm(record: JobRecord, occurrence: Occurrence, policy: JobPolicy) -> bool:
    if policy.overlap is not Overlap.BUFFER_ALL:
        return False
    kind = _triggered_kind(occurrence.trigger)
    if kind is None:
        return False
    return waiting.count(record, lambda trigger: _triggered_kind(trigger) == kind) >= MAX_TRIGGERED_WAITING


def _triggered_kind(trigger: str) -> str | None:
    """"job" for another job's trigger, "manual" for a person's, None for the schedule's."""
    if trigger.startswith(JOB_PREFIX):
        return "job"
    return "manual" if trigger == Trigger.MANUAL else None


def _kept_in_order(trigger: str, policy: JobPolicy) -> bool:
    """Those that wait their turn whatever the overlap policy: caught up under `catchup: all`,
    and a backfill's (a person asked for each; Temporal's backfills default to buffer_all)."""
    return (trigger == Trigger.CATCHUP and policy.catchup is Catchup.ALL) or trigger == Trigger.BACKFILL
