"""The invocation half of the machine: starting invocations, following their
attempts, and finishing them (admitting occurrences under the overlap policy is
statemachine/admission.py).

Every function takes a record and returns (record, actions); none of them
looks at anything but its arguments.
"""

from __future__ import annotations

from datetime import datetime

from statemachine import actions as act
from statemachine import events as ev
from statemachine import hooks, staging, waiting
from statemachine.budget import STARTS_PER_STEP
from statemachine.calendars import excluded_by
from statemachine.pausing import count_outcome
from statemachine.policy import (
    INTERRUPTED,
    MAX_INTERRUPTIONS,
    Tuning,
    compute_backoff,
    fanout_offsets,
    occurrence_delay,
)
from statemachine.record import ActiveInvocation, JobRecord, Occurrence, evolve
from statemachine.vocabulary import ON_THE_CLOCK, InvocationStatus, SkipReason, Trigger

SUCCEEDED, FAILED = InvocationStatus.SUCCEEDED, InvocationStatus.FAILED
ABORTED, SKIPPED = InvocationStatus.ABORTED, InvocationStatus.SKIPPED

Result = tuple[JobRecord, list[act.Action]]


def start(
    record: JobRecord, occurrence: Occurrence, now: datetime, tuning: Tuning, inline: bool = False
) -> Result:
    """Create the invocation and enqueue the first attempt of each of its events.

    With `inline`, a single event due now is not enqueued: this same commit
    records "attempt 1 starting" (`Deliver`) and the shell sends it right
    after, which spares a task, a transaction and a trip through the queue.
    A process lost in between is covered like any attempt in flight: settled
    once the process is known to be gone (or the queue runs the tick again:
    `ticks.redeliver_inline`), at the latest re-issued by the watchdog after its lease.
    """
    policy = record.live_policy
    if excluded(record, occurrence):
        return record, [act.RecordSkipped.of(occurrence, SkipReason.EXCLUDED)]
    fanout = policy.fanout
    # The first attempt is due at the nominal time plus the occurrence's jitter; what it
    # sends (headers, templates) keeps the nominal time.
    delay = occurrence_delay(policy, record.project, record.job_id, occurrence.scheduled_time, occurrence.trigger)
    due = [max(occurrence.scheduled_time + delay + offset, now) for offset in fanout_offsets(fanout)]
    # A throttled job's attempts all wait their turn on the throttle's queue. One due
    # soon is staged: committed now, sent at its time (staging.py).
    if inline and fanout.count == 1 and not record.paused and not policy.throttle and (
            due[0] <= now or staging.stages(policy, tuning, due[0] - now)):
        return _start_inline(record, occurrence, now, tuning, due[0])
    # Each event's progress in a row of its own (fanout.py), or inline as the release
    # before this one reads it until the operator's switch (Tuning.fanout_rows) is on.
    in_rows = fanout.count > 1 and tuning.fanout_rows
    entry = ActiveInvocation(
        invocation_id=occurrence.invocation_id,
        scheduled_time=occurrence.scheduled_time,
        trigger=occurrence.trigger,
        deadline=now + delay + fanout.spread + policy.timeout,
        event_count=fanout.count,
        attempts=() if in_rows else (1,) * fanout.count,
        # The record does not hear of each event's start: the first is taken as begun
        # when it is due at once.
        started_at=now if in_rows and due[0] <= now else None,
        expect_by=max(due) + tuning.start_grace,
        events_in_rows=in_rows,
    )
    actions: list[act.Action] = [
        act.StartInvocation(entry.invocation_id, entry.scheduled_time, entry.trigger, fanout.count)
    ]
    actions += [act.EnqueueAttempt(entry.invocation_id, index, 1, at) for index, at in enumerate(due)]
    return evolve(record, active=record.active + (entry,)), actions


def excluded(record: JobRecord, occurrence: Occurrence) -> bool:
    """Whether one of the job's exclusion calendars holds the occurrence's time. Only an
    occurrence of the schedule (on time or caught up) is excluded: a manual trigger, a
    backfill or another job's trigger asked for its invocation by name."""
    exclude = record.live_policy.exclude
    return bool(exclude) and occurrence.trigger in ON_THE_CLOCK and \
        excluded_by(exclude, occurrence.scheduled_time) is not None


def _start_inline(record: JobRecord, occurrence: Occurrence, now: datetime, tuning: Tuning,
                  due: datetime) -> Result:
    """`due` after `now`: the attempt is staged, and its time (lease, deadline) counts from `due`."""
    policy = record.live_policy
    lease = policy.attempt_timeout + tuning.start_grace
    begins = max(due, now)
    entry = ActiveInvocation(
        invocation_id=occurrence.invocation_id,
        scheduled_time=occurrence.scheduled_time,
        trigger=occurrence.trigger,
        deadline=begins + policy.timeout,
        started_mask=1,
        started_at=begins,
        expect_by=begins + lease,
        epoch=1,
    )
    actions: list[act.Action] = [
        act.StartInvocation(entry.invocation_id, entry.scheduled_time, entry.trigger, 1, deferred=True),
        act.Deliver(entry.invocation_id, entry.scheduled_time, entry.trigger, 0, 1, 1, entry.epoch,
                    send_at=begins if begins > now else None),
    ]
    return evolve(record, active=record.active + (entry,)), actions


def on_starting(record: JobRecord, event: ev.InvocationStarting, now: datetime, tuning: Tuning) -> Result:
    """A start task arrived: commit that the attempt is starting, then deliver."""
    entry = _current_attempt(record, event.invocation_id, event.event_index, event.attempt)
    if entry is None:
        return record, []
    if now >= entry.deadline:
        return finish(record, entry, FAILED, "timeout", now, tuning)
    bit = 1 << event.event_index
    if entry.accepted_mask & bit:
        return record, []  # the target took it (202) and owes us its completion
    lease = record.live_policy.attempt_timeout + tuning.start_grace
    if entry.started_mask & bit and entry.started_at and now - entry.started_at < lease:
        if event.redelivered and staging.staged(entry, now):  # its sender checks the store again at its time
            lost = ev.AttemptInterrupted(entry.invocation_id, event.event_index, event.attempt)
            return on_interrupted(record, lost, now, tuning)
        if event.redelivered:
            # The run that started it died, or this is a duplicate of that very run's
            # task, still sending it (a retry count cannot tell the two apart when the
            # task was a retry already): a start when the lease has run out sends it
            # again if it is still in flight then.
            until = entry.expect_by or entry.started_at + lease
            return record, [act.EnqueueAttempt(entry.invocation_id, event.event_index, event.attempt, until)]
        return record, []  # a duplicate of a start whose attempt is still in flight
    if record.paused:
        # Nothing is delivered while a job is paused: what was waiting to start
        # ends here; what is in flight finishes on its own.
        status = ABORTED if entry.has_started else SKIPPED
        return finish(record, entry, status, SkipReason.PAUSED, now, tuning)
    entry = evolve(
        entry,
        started_mask=entry.started_mask | bit,
        started_at=now,
        expect_by=max(entry.expect_by or now, now + lease),
        epoch=entry.epoch + 1,  # a result of any earlier send of it is stale from this commit on
    )
    deliver = act.Deliver(
        entry.invocation_id,
        entry.scheduled_time,
        entry.trigger,
        event.event_index,
        entry.event_count,
        event.attempt,
        entry.epoch,
    )
    return record.with_active(entry), [deliver]


def on_started(record: JobRecord, event: ev.InvocationStarted, now: datetime, tuning: Tuning) -> Result:
    """The target accepted the attempt (202): wait for its completion, or the deadline."""
    entry = _current_attempt(record, event.invocation_id, event.event_index, event.attempt, event.epoch)
    if entry is None:
        return record, _refused_if_stale(record, event)
    bit = 1 << event.event_index
    entry = evolve(
        entry, started_mask=entry.started_mask | bit, accepted_mask=entry.accepted_mask | bit
    )
    waiting = entry.all_events_mask & ~entry.done_mask & ~entry.accepted_mask
    if not waiting:
        entry = evolve(entry, expect_by=None)  # only the deadline is left to watch
    return record.with_active(entry), []


def on_finished(record: JobRecord, event: ev.InvocationFinished, now: datetime, tuning: Tuning) -> Result:
    attempt = event.attempt
    if attempt is None:
        return _on_completion(record, event, now, tuning)
    entry = _current_attempt(record, event.invocation_id, event.event_index, attempt, event.epoch)
    if entry is None:
        return record, _refused_if_stale(record, event)
    bit = 1 << event.event_index
    if event.succeeded:
        return _settle_events(record, evolve(entry, done_mask=entry.done_mask | bit), now, tuning)
    return _attempt_failed(record, entry, event, attempt, now, tuning)


def on_interrupted(record: JobRecord, event: ev.AttemptInterrupted, now: datetime, tuning: Tuning) -> Result:
    """An attempt in flight lost its sender (events.AttemptInterrupted). Never sent (its
    process says so, or a staged one it had not let out): back to its start task, the
    same attempt. Else sent again under the same invocation id as the next attempt
    number, after the backoff a failure of it would have waited (the target may still be
    working on it), without counting against max_attempts; after MAX_INTERRUPTIONS of
    them, or when the deadline comes first, it counts as a failed attempt (`interrupted`)."""
    entry = _current_attempt(record, event.invocation_id, event.event_index, event.attempt, event.epoch)
    bit = 1 << event.event_index
    if entry is None or not entry.started_mask & bit or entry.accepted_mask & bit:
        return record, []  # not in flight: it ended, was issued again, or the target took it (202)
    if (event.unsent and entry.event_count == 1) or staging.staged(entry, now) or \
            staging.unsent(entry, event.released_until):
        if staging.missed_meanwhile(record, entry, event.attempt, now, tuning):
            return finish(record, entry, SKIPPED, SkipReason.MISSED, now, tuning)
        return staging.wait_for_start(record, entry, tuning)
    attempt, key = event.attempt, f"{entry.invocation_id}/{event.event_index}"
    # (An entry of several inline events, written before events had rows, keeps the old rule.)
    if entry.event_count == 1 and entry.interruptions < MAX_INTERRUPTIONS:
        resend_at = now + compute_backoff(record.live_policy.retry, attempt - entry.interruptions, key)
        if resend_at < entry.deadline:
            entry = evolve(entry, attempts=(attempt + 1,), started_mask=0, interruptions=entry.interruptions + 1,
                           expect_by=max(entry.expect_by or resend_at, resend_at + tuning.start_grace))
            return record.with_active(entry), [
                act.RecordAttemptInterrupted(entry.invocation_id, 0, attempt, resend_at, entry.interruptions),
                act.EnqueueAttempt(entry.invocation_id, 0, attempt + 1, resend_at),
            ]
    failed = ev.InvocationFinished(entry.invocation_id, False, INTERRUPTED, event.event_index, attempt)
    return _attempt_failed(record, entry, failed, attempt, now, tuning)


def _attempt_failed(record: JobRecord, entry: ActiveInvocation, event: ev.InvocationFinished, attempt: int,
                    now: datetime, tuning: Tuning) -> Result:
    retry = record.live_policy.retry
    reason = event.reason or "failed"
    index = event.event_index
    counted = attempt - entry.interruptions  # the attempts sent again after an interruption do not count
    if counted < retry.max_attempts:
        retry_at = now + compute_backoff(retry, counted, f"{entry.invocation_id}/{index}")
        if retry_at < entry.deadline:
            attempts = entry.attempts[:index] + (attempt + 1,) + entry.attempts[index + 1 :]
            entry = evolve(
                entry,
                attempts=attempts,
                started_mask=entry.started_mask & ~(1 << index),
                expect_by=max(entry.expect_by or retry_at, retry_at + tuning.start_grace),
            )
            return record.with_active(entry), [
                act.RecordAttemptFailed(entry.invocation_id, index, attempt, reason, retry_at),
                act.EnqueueAttempt(entry.invocation_id, index, attempt + 1, retry_at),
            ]
    bit = 1 << index
    entry = evolve(
        entry,
        done_mask=entry.done_mask | bit,
        failed_mask=entry.failed_mask | bit,
        failure_reason=entry.failure_reason or reason,
    )
    logged = act.RecordAttemptFailed(entry.invocation_id, index, attempt, reason, None)
    record, actions = _settle_events(record, entry, now, tuning)
    return record, [logged] + actions


def _on_completion(record: JobRecord, event: ev.InvocationFinished, now: datetime, tuning: Tuning) -> Result:
    """Async completion: it settles every event still in flight or waiting."""
    entry = record.find_active(event.invocation_id)
    if entry is None or entry.events_in_rows:
        return record, []
    pending = (entry.started_mask | entry.accepted_mask) & ~entry.done_mask
    if not pending:
        return record, []
    entry = evolve(entry, done_mask=entry.done_mask | pending)
    if not event.succeeded:
        entry = evolve(
            entry,
            failed_mask=entry.failed_mask | pending,
            failure_reason=entry.failure_reason or event.reason or "failed",
        )
    return _settle_events(record, entry, now, tuning)


def _settle_events(record: JobRecord, entry: ActiveInvocation, now: datetime, tuning: Tuning) -> Result:
    """Store the entry; finish the invocation once every event is done."""
    if not entry.finished:
        return record.with_active(entry), []
    if not entry.failed_mask:
        return finish(record, entry, SUCCEEDED, "", now, tuning)
    reason = entry.failure_reason
    if entry.event_count > 1:
        failed = bin(entry.failed_mask).count("1")
        reason = f"{failed} of {entry.event_count} events failed; first: {reason}"
    return finish(record, entry, FAILED, reason, now, tuning)


def _current_attempt(record: JobRecord, invocation_id: str, index: int,
                     attempt: int | None, epoch: int | None = None) -> ActiveInvocation | None:
    """The active entry if (event, attempt) is its current, unfinished attempt (and `epoch` its issue)."""
    entry = record.find_active(invocation_id)
    if entry is None or entry.events_in_rows or not 0 <= index < entry.event_count:
        return None  # (an entry whose events are in rows hears of them as InvocationSettled)
    if entry.event_done(index) or entry.attempts[index] != attempt:
        return None
    # An epoch other than the stored one was sent before the attempt was issued again. The
    # entry has one counter: inline events of a fan-out (written at version 1) in flight
    # together would make each other's answers stale, so they are told apart by attempt.
    return None if epoch is not None and entry.event_count == 1 and epoch != entry.epoch else entry


def _refused_if_stale(record: JobRecord, event: ev.InvocationStarted | ev.InvocationFinished) -> list[act.Action]:
    """A sender's answer that is not the current attempt's, while its invocation is active: said so."""
    entry = record.find_active(event.invocation_id)
    if event.epoch is None or event.attempt is None or entry is None or entry.events_in_rows:
        return []
    return [act.RefuseStaleResult(event.invocation_id, event.event_index, event.attempt, event.epoch)]


def on_settled(record: JobRecord, event: ev.InvocationSettled, now: datetime, tuning: Tuning) -> Result:
    """A fan-out invocation whose events are in rows ends as its events decided."""
    entry = record.find_active(event.invocation_id)
    if entry is None:
        return record, []
    return finish(record, entry, event.status, event.reason, now, tuning, event.attempts)


def finish(record: JobRecord, entry: ActiveInvocation, status: str, reason: str, now: datetime,
           tuning: Tuning, attempts: int | None = None) -> Result:
    """Give the invocation its terminal status and let what waited on it go."""
    record = evolve(
        record,
        active=tuple(e for e in record.active if e.invocation_id != entry.invocation_id),
        last_finished_at=now,
    )
    actions: list[act.Action] = [act.FinishInvocation(entry.invocation_id, status, reason)]
    # `triggers` with their condition: on success (a plain id), on failure, or on either.
    policy = record.live_policy
    following = policy.triggers if status == SUCCEEDED else policy.triggers_on_failure if status == FAILED else ()
    if following:
        actions.append(act.TriggerJobs(following, entry.invocation_id, entry.scheduled_time))
    # Fan-in (`after`, statemachine/fanin.py): every end but a person's trigger's (whose
    # time is no scheduled time) is reported to the jobs waiting on this one.
    if policy.reports_to and entry.trigger != Trigger.MANUAL:
        actions.append(act.TriggerJobs(policy.reports_to, entry.invocation_id, entry.scheduled_time, status))
    actions += hooks.on_finish(record, entry, status, reason, attempts or max(entry.attempts, default=1))
    record, paused = count_outcome(record, status, reason, now)
    record, started = drain_buffer(record, now, tuning)
    return record, actions + paused + started


def drain_buffer(record: JobRecord, now: datetime, tuning: Tuning) -> Result:
    """Start waiting occurrences, in order, while the overlap policy allows."""
    actions: list[act.Action] = []
    for _ in range(STARTS_PER_STEP):
        if not record.has_waiting or len(record.active) >= record.live_policy.concurrency_limit():
            break
        record, head = waiting.pop(record)
        record, started = start(record, head, now, tuning)
        actions += started
    return record, actions


def repair(record: JobRecord, entry: ActiveInvocation, now: datetime, tuning: Tuning) -> Result:
    """The watchdog's repair of one invocation whose chain stopped moving."""
    if now >= entry.deadline:
        return finish(record, entry, FAILED, "timeout", now, tuning)
    if entry.expect_by is None or now < entry.expect_by or entry.events_in_rows:
        return record, []  # (the events in rows are repaired by fanout_step._repair_events)
    lost = entry.all_events_mask & ~entry.done_mask & ~entry.accepted_mask
    actions: list[act.Action] = [
        act.EnqueueAttempt(entry.invocation_id, index, entry.attempts[index], now)
        for index in range(entry.event_count)
        if lost >> index & 1
    ]
    lease = record.live_policy.attempt_timeout + tuning.start_grace
    # Their attempts are lost: the re-issued starts must not be taken for duplicates
    # of an attempt in flight (on_starting's check uses the invocation's one
    # `started_at`, which the first of them to start moves to now).
    entry = evolve(entry, started_mask=entry.started_mask & ~lost, expect_by=now + tuning.start_grace + lease)
    return record.with_active(entry), actions


def mark_inline(record: JobRecord, actions: list[act.Action], nonce: str) -> JobRecord:
    """Note on each entry whose attempt this tick's step delivers inline which tick it
    was, for `ticks.redeliver_inline`."""
    for action in actions:
        entry = record.find_active(action.invocation_id) if isinstance(action, act.Deliver) else None
        if entry is not None and not entry.events_in_rows:
            record = record.with_active(evolve(entry, started_by=nonce))
    return record
