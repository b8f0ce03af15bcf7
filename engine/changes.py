"""The one way a job changes: load -> step -> save + enqueue, in one transaction.

`JobChanges` is the unit of work. Every writer (task handlers, the API's use cases,
the config importer, the watchdog) steps a job through `apply` or `apply_many`, and
nothing else writes a job's record. Deliveries happen after the commit, elsewhere
(engine/deliveries.py): write before any external call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Sequence, TypeVar

from engine.audit import Audit, log_entry, new_entry
from engine.cancels import cancel_task
from engine.deferred_finish import may_defer, settle_deferred
from engine.errors import ConflictError, NotFound
from engine.event_rows import TransactionRows
from engine.holds import AttemptCanceller, AttemptHolds, AttemptKey, HeldAttempt
from engine.logs import log_event
from engine.metrics import Metrics
from engine.ports import AuditEntry, Clock, JobSource, JobStore, StoredJob, Transaction
from engine.recording import append_log, materialize, record_actions, throttle_queue
from statemachine import actions as act
from statemachine import events as ev
from statemachine.definition import JobDefinition
from statemachine.fanout_step import JobEvent, step_job
from statemachine.machine import InvalidTransition, Transition, manual_invocation_id
from statemachine.policy import DEFAULT_TUNING, Tuning
from statemachine.record import JobRecord, new_record
from statemachine.vocabulary import InvocationStatus

T = TypeVar("T")

log = logging.getLogger("sundial.engine")

# Runs of a transaction that keeps losing its commit to another writer before the
# conflict reaches the caller (a Datastore store also retries inside each run).
CONFLICT_RETRIES = 5


@dataclass(frozen=True)
class Note:
    """A line for an invocation's log, written in the same transaction as the change."""

    invocation_id: str
    message: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Change:
    """One event for one job, as `apply_many` takes it.

    `releases`: the attempt whose end this change records; its hold (AttemptHolds)
    is released in the same transaction. With `if_held`, the event applies only if
    that process still held that attempt (a gone process's attempt is settled once,
    and never after another process took it over).
    """

    project: str
    job_id: str
    event: JobEvent
    note: Note | None = None
    releases: HeldAttempt | None = None
    if_held: bool = False
    audit: Audit | None = None  # an operator's action: its entry commits with the change (engine/audit.py)
    definition: JobDefinition | None = None  # as `apply`'s: replaces the stored definition (config import)
    source: JobSource | None = None


@dataclass(frozen=True)
class Applied:
    """What a change decided (the machine's transition) and the job as saved."""

    transition: Transition
    job: StoredJob
    audited: AuditEntry | None = None  # the audit entry committed with it


# The refusals `apply_many` returns in place of a change's `Applied`.
Refusal = NotFound | InvalidTransition


class JobChanges:
    def __init__(self, store: JobStore, clock: Clock, metrics: Metrics, tuning: Tuning = DEFAULT_TUNING,
                 holds: AttemptHolds | None = None, defer_finishes: bool | None = None,
                 canceller: AttemptCanceller | None = None):
        """`holds`: where this process records the attempts it holds (None: the
        backend's tasks hold them, as on Cloud Tasks). `canceller`: closes what this
        process has on the wire of an invocation a commit here aborted (None: nothing
        is closed; engine/holds.py says where that is). `defer_finishes`: whether a
        finish may be left to its invocation's row (engine/deferred_finish.py); by
        default as the store says (`defers_finishes`): it spares an entity write on
        Datastore, and on SQLite costs more than the row write it spares."""
        self.store, self.clock, self.metrics, self.tuning = store, clock, metrics, tuning
        self.holds, self.canceller = holds, canceller
        self.defer_finishes = defer_finishes if defer_finishes is not None else store.defers_finishes
        # A store that never defers, and holds no finish deferred before, needs none replayed.
        self._settles = self.defer_finishes or store.holds_deferred_finishes

    def apply(self, project: str, job_id: str, event: JobEvent, *, definition: JobDefinition | None = None,
              source: JobSource | None = None, deleted: bool = False, note: Note | None = None,
              audit: Audit | None = None) -> Applied:
        """Step the job with one event and save everything it decided, atomically.

        `definition`/`source` replace the stored job's definition (config import,
        API), and with it its `deleted` mark; a missing job is created only when a
        definition is given. `audit`: the operator's action, recorded in the same
        transaction (and logged once it committed).

        :raises NotFound: no such job, and no definition to create it from.
        :raises InvalidTransition: the job's state refuses the event; nothing changed.
        :raises StoreError: nothing was committed.
        """
        change = Change(project, job_id, event, note, audit=audit)
        applied = self.write(lambda tx: self._apply_in(tx, change, definition, source, deleted))
        self._count_outcomes(applied)  # counted once, after the commit
        if applied.audited is not None:
            log_entry(applied.audited)
        return applied

    def apply_many(self, changes: list[Change]) -> list[Applied | Refusal]:
        """`apply` for many changes in one transaction.

        Returns, for each change in order, its `Applied`, or the refusal that stopped
        it: refusals are decided before a change writes anything, so they cannot spoil
        the others. Changes to one job see each other, in order.

        :raises StoreError: nothing was committed.
        """
        def body(tx: Transaction) -> list[Applied | Refusal]:
            results: list[Applied | Refusal] = []
            for change in changes:
                try:
                    self._release(tx, change)
                    results.append(self._apply_in(tx, change, change.definition, change.source, False))
                except (NotFound, InvalidTransition) as refused:
                    results.append(refused)
            return results

        return self._accounted(self.write(body), audit=True)

    def fold(self, project: str, job_id: str,
             take: Callable[[Transaction], Sequence[JobEvent]]) -> list[Applied | Refusal]:
        """`apply_many` for the events `take(tx)` reads in the transaction (a job's inbox,
        engine/inbox.py, whose rows it deletes there): the job stepped with each in
        order, all in one commit, a refused one skipped.

        :raises StoreError: nothing was committed.
        """
        def body(tx: Transaction) -> list[Applied | Refusal]:
            results: list[Applied | Refusal] = []
            for event in take(tx):
                try:
                    results.append(self._apply_in(tx, Change(project, job_id, event), None, None, False))
                except (NotFound, InvalidTransition) as refused:
                    results.append(refused)
            return results

        return self._accounted(self.write(body), audit=False)  # (a trigger's entry went with its row)

    def _accounted(self, results: list[Applied | Refusal], audit: bool) -> list[Applied | Refusal]:
        """After the commit: the outcomes counted, and with `audit` each step's audit entry logged."""
        for applied in results:
            if isinstance(applied, Applied):
                self._count_outcomes(applied)
                if audit and applied.audited is not None:
                    log_entry(applied.audited)
        return results

    def set_config_error(self, project: str, job_id: str, error: str) -> bool:
        """Attach to the job the error of its broken config entry ("" clears it); the job
        keeps its definition and record. Writes only if the job's error differs.

        :raises StoreError: nothing was committed.
        """
        def body(tx: Transaction) -> bool:
            stored = tx.get_job(project, job_id)
            if stored is None or stored.config_error == error:
                return False
            tx.put_job(StoredJob(stored.record, stored.definition, stored.source, error, stored.deleted))
            return True

        return self.write(body)

    def write(self, body: Callable[[Transaction], T]) -> T:
        """Run `body(tx)` in a transaction of its own, run again when its commit loses a race.

        :raises ConflictError: it lost CONFLICT_RETRIES times.
        :raises StoreError: storage is failing.
        """
        for attempt in range(1, CONFLICT_RETRIES + 1):
            try:
                return self.store.run_in_transaction(body)
            except ConflictError:
                if attempt == CONFLICT_RETRIES:
                    raise
        raise AssertionError("unreachable")

    def _release(self, tx: Transaction, change: Change) -> None:
        """End the hold of the attempt whose result `change` records (whatever the job
        makes of the result: a job deleted meanwhile still lets go of it).

        :raises NotFound: `if_held`, and that process no longer held that attempt.
        """
        if change.releases is None or self.holds is None:
            return
        if not self.holds.release(tx, change.releases) and change.if_held:
            key = change.releases.key
            raise NotFound(f"attempt {key.attempt} of {key.invocation_id} event {key.event_index}"
                           f" is no longer held by {change.releases.holder}")

    def _count_outcomes(self, applied: Applied) -> None:
        """After the commit: the outcomes counted and logged, and the aborted ones' attempts closed."""
        record = applied.transition.record
        for action in applied.transition.actions:
            if isinstance(action, act.FinishInvocation) and action.status == InvocationStatus.ABORTED:
                self._close_attempts(record, action)
            if isinstance(action, act.RecordSkipped):
                self.metrics.inc("sundial_skips_total", reason=action.reason)
            elif isinstance(action, act.RefuseStaleResult):
                # Its sender held the attempt no longer: it was issued again (or settled) meanwhile.
                self.metrics.inc("sundial_stale_results_total")
                log_event(log, "stale result dropped", level=logging.WARNING, job=f"{record.project}/{record.job_id}",
                          invocation=action.invocation_id, event=action.event_index, attempt=action.attempt,
                          epoch=action.epoch)
            elif isinstance(action, act.FinishInvocation):
                self.metrics.inc("sundial_invocations_finished_total", status=action.status)
                if action.status == InvocationStatus.FAILED:
                    # Its last attempt failed too: an ERROR, where one failed attempt is a WARNING.
                    log_event(log, "invocation failed", level=logging.ERROR, job=f"{record.project}/{record.job_id}",
                              invocation=action.invocation_id, reason=action.reason,
                              consecutive_failures=record.consecutive_failures,
                              paused=record.paused)

    def _close_attempts(self, record: JobRecord, action: act.FinishInvocation) -> None:
        """An aborted invocation's attempt on the wire here is closed, after the abort's
        commit: the target sees its connection drop (`overlap: replace`, a user's abort)."""
        if self.canceller is None:
            return
        closed = self.canceller.close_attempts(record.project, record.job_id, action.invocation_id)
        if closed:
            log_event(log, "aborted attempt closed", job=f"{record.project}/{record.job_id}",
                      invocation=action.invocation_id, reason=action.reason, connections=closed)

    def _apply_in(self, tx: Transaction, change: Change, definition: JobDefinition | None,
                  source: JobSource | None,
                  deleted: bool) -> Applied:
        """The body of `apply`: may run more than once; only its last run commits."""
        now = self.clock.now()
        project, job_id, event, note = change.project, change.job_id, change.event, change.note
        stored = tx.get_job(project, job_id)
        created = stored is None
        if stored is None:
            if definition is None:
                raise NotFound(f"job {project}/{job_id} not found")
            stored = StoredJob(new_record(project, job_id), definition, source or JobSource.CONFIG)
        # A finish left in its invocation's row (engine/deferred_finish.py) comes first.
        record = stored.record if not self._settles else settle_deferred(
            stored.record, lambda invocation: tx.get_invocation(project, job_id, invocation), self.tuning)
        if isinstance(event, ev.ManualTrigger) and not created:
            invocation = manual_invocation_id(record, event, now)
            if tx.get_invocation(project, job_id, invocation) is not None:
                return Applied(Transition(record), stored)  # one request, one invocation
        transition = step_job(record, event, now, self.tuning,
                              lambda invocation: TransactionRows(tx, project, job_id, invocation))
        # The job row is written only when it changed: the steps of a fan-out's events
        # change their own rows (and act), and must not contend for the job's.
        changed = created or transition.record != stored.record
        redefined = False
        if definition is not None and (definition, source, deleted) != (stored.definition, stored.source,
                                                                        stored.deleted):
            stored = StoredJob(stored.record, definition, source or stored.source, deleted=deleted)
            changed = redefined = True
        if any(isinstance(action, act.RefuseStaleResult) for action in transition.actions):
            note = None  # the invocation's log tells the current attempt's answer, not this one
        _materialize_deferred(tx, record, transition, note)
        if note is not None:
            _write_note(tx, project, job_id, note, now)
        policy = transition.record.policy
        queue = throttle_queue(project, policy.throttle) if policy is not None else ""
        record_actions(tx, project, job_id, transition.actions, now, queue)
        self._hold_and_cancel(tx, stored, record, transition, now)
        if changed and self.defer_finishes and not (created or redefined) and record is stored.record:
            changed = not self._defers(tx, stored, event, now, transition)
        if changed:
            # Built directly, not by dataclasses.replace: this runs for every step of every job.
            stored = StoredJob(transition.record, stored.definition, stored.source, stored.config_error,
                               stored.deleted)
            tx.put_job(stored)
        audited = _write_audit(tx, change, now) if changed or transition.actions else None
        return Applied(transition, stored, audited)

    def _hold_and_cancel(self, tx: Transaction, job: StoredJob, before: JobRecord, transition: Transition,
                         now: datetime) -> None:
        """In the step's transaction: this process holds each attempt it starts, and each
        invocation it aborts whose async target has a `cancel_url` gets its `cancel` task
        (engine/cancels.py), so the target is told only once the abort is committed."""
        project, job_id = job.record.project, job.record.job_id
        for action in transition.actions:
            if isinstance(action, act.Deliver) and self.holds is not None:
                self.holds.hold(tx, AttemptKey(project, job_id, action.invocation_id, action.event_index,
                                               action.attempt))
            elif isinstance(action, act.FinishInvocation):
                task = cancel_task(job, before, action, now)
                if task is not None:
                    tx.enqueue(task)

    def _defers(self, tx: Transaction, stored: StoredJob, event: JobEvent, now: datetime,
                transition: Transition) -> bool:
        """Whether this finish is left to its invocation's row (engine/deferred_finish.py);
        never for a job being created or redefined in the same step."""
        if not isinstance(event, ev.InvocationFinished):
            return False
        row = tx.get_invocation(stored.record.project, stored.record.job_id, event.invocation_id)
        return may_defer(stored.record, event, now, transition, row, self.tuning)


def _write_audit(tx: Transaction, change: Change, now: datetime) -> AuditEntry | None:
    """The operator's action, recorded with the change it made. One that changed nothing
    (the same PUT again, resuming a job that is not paused) leaves no entry: the audit
    log answers who changed what."""
    if change.audit is None:
        return None
    entry = new_entry(change.audit, change.project, change.job_id, now)
    tx.put_audit(entry)
    return entry


def _materialize_deferred(tx: Transaction, before: JobRecord, transition: Transition, note: Note | None) -> None:
    """Give a deferred invocation (see StartInvocation.deferred) its history record
    as soon as anything is to be written about it."""
    named = {
        a.invocation_id for a in transition.actions
        if isinstance(a, (act.Deliver, act.FinishInvocation, act.RecordAttemptFailed, act.RecordAttemptInterrupted))
    }
    if note is not None:
        named.add(note.invocation_id)
    for invocation_id in named:
        entry = before.find_active(invocation_id)
        if entry is not None:
            materialize(tx, before.project, before.job_id, entry)


def _write_note(tx: Transaction, project: str, job_id: str, note: Note, now: datetime) -> None:
    row = tx.get_invocation(project, job_id, note.invocation_id)
    if row is not None:
        append_log(row, now, note.message, **note.fields)
        tx.put_invocation(row)
