"""The engine's use cases: every change to a job is load -> step -> save + enqueue,
in one transaction; deliveries happen after the commit.

Write before any external call: a start task first commits "attempt N is
starting" (the machine's `Deliver` action, recorded on the invocation), then
calls the target, then commits the result. If storage fails, nothing is sent.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Callable

from engine.batch import BATCHED_KINDS, stepped_from, task_event
from engine.delivery import deliver
from engine.logs import log_event
from engine.metrics import Metrics
from engine.notify import send_notification
from engine.ports import Clock, ConflictError, DeliveryResult, StoredJob, Task
from engine.recording import append_log, materialize, record_action, throttle_queue
from statemachine import actions as act
from statemachine import events as ev
from statemachine.definition import JobDefinition
from statemachine.durations import parse_instant
from statemachine.machine import InvalidTransition, Transition, manual_invocation_id, step
from statemachine.policy import DEFAULT_TUNING, Tuning
from statemachine.record import new_record
from statemachine.vocabulary import TaskKind

log = logging.getLogger("sundial.engine")

CONFLICT_RETRIES = 5
SETTINGS_TTL = timedelta(seconds=5)


class NotFound(Exception):
    """The job does not exist."""


@dataclass
class Applied:
    transition: Transition
    job: StoredJob


class Engine:
    def __init__(
        self,
        store,
        targets: dict,
        clock: Clock,
        tuning: Tuning = DEFAULT_TUNING,
        service_url: str = "http://127.0.0.1:8080",
        secret: bytes = b"",
        secrets: Callable[[str, str], str] | None = None,
    ):
        self.store, self.targets, self.clock, self.tuning = store, targets, clock, tuning
        self.service_url, self.secret = service_url.rstrip("/"), secret
        self.metrics = Metrics()
        # Reads the secrets that header values name (engine/secrets.py); None: no store.
        self.secrets = secrets
        self._settings_cache: dict[str, tuple[datetime, tuple[str, ...]]] = {}

    # --- the one way a job changes -------------------------------------------------

    def apply(
        self,
        project: str,
        job_id: str,
        event,
        *,
        definition: JobDefinition | None = None,
        source: str | None = None,
        deleted: bool = False,
        note: tuple[str, str, dict] | None = None,
    ) -> Applied:
        """Step the job with one event and save everything it decided, atomically.

        `definition`/`source` replace the stored job's definition (config import,
        API), and with it its `deleted` mark; a missing job is created only when a
        definition is given. `note` (invocation id, message, fields) is appended to
        an invocation's log.
        """
        def body(tx) -> Applied:
            return self._apply_in(tx, project, job_id, event, definition, source, note, deleted)

        applied = self.retrying(lambda: self.store.run_in_transaction(body))
        self._count_outcomes(applied.transition.actions)  # counted once, after the commit
        return applied

    def apply_many(self, changes: list[tuple[str, str, object, tuple | None]]) -> list:
        """`apply` for many (project, job id, event, note) changes in one transaction.

        Returns, for each change in order, its `Applied`, or the NotFound or
        InvalidTransition that refused it: those are decided before the change
        writes anything, so they cannot spoil the others. Changes to one job see
        each other, in order.
        """
        def body(tx) -> list:
            results = []
            for project, job_id, event, note in changes:
                try:
                    results.append(self._apply_in(tx, project, job_id, event, None, None, note))
                except (NotFound, InvalidTransition) as refused:
                    results.append(refused)
            return results

        results = self.retrying(lambda: self.store.run_in_transaction(body))
        for applied in results:
            if isinstance(applied, Applied):
                self._count_outcomes(applied.transition.actions)
        return results

    def _count_outcomes(self, actions) -> None:
        for action in actions:
            if isinstance(action, act.RecordSkipped):
                self.metrics.inc("sundial_skips_total", reason=action.reason)
            elif isinstance(action, act.FinishInvocation):
                self.metrics.inc("sundial_invocations_finished_total", status=action.status)

    def retrying(self, work):
        """Run `work` (which opens its own transaction) again when its commit loses a race."""
        for attempt in range(1, CONFLICT_RETRIES + 1):
            try:
                return work()
            except ConflictError:
                if attempt == CONFLICT_RETRIES:
                    raise
        raise AssertionError("unreachable")

    def write(self, change) -> None:
        """Run `change(tx)` in a transaction of its own, retried on conflicts."""
        self.retrying(lambda: self.store.run_in_transaction(change))

    def _apply_in(self, tx, project, job_id, event, definition, source, note, deleted=False) -> Applied:
        """The body of `apply`: may run more than once; only its last run commits."""
        now = self.clock.now()
        stored = tx.get_job(project, job_id)
        created = stored is None
        if created:
            if definition is None:
                raise NotFound(f"job {project}/{job_id} not found")
            stored = StoredJob(new_record(project, job_id), definition, source or "config")
        if isinstance(event, ev.ManualTrigger) and not created:
            invocation = manual_invocation_id(stored.record, event, now)
            if tx.get_invocation(project, job_id, invocation) is not None:
                return Applied(Transition(stored.record), stored)  # one request, one invocation
        transition = step(stored.record, event, now, self.tuning)
        changed = created or transition.record != stored.record or transition.actions
        if definition is not None and (definition, source, deleted) != (stored.definition, stored.source,
                                                                        stored.deleted):
            stored = StoredJob(stored.record, definition, source or stored.source, deleted=deleted)
            changed = True
        self._materialize_deferred(tx, stored.record, transition, note)
        if note is not None:
            self._note(tx, project, job_id, note, now)
        if not changed:
            return Applied(transition, stored)
        stored = replace(stored, record=transition.record)
        tx.put_job(stored)
        policy = transition.record.policy
        queue = throttle_queue(project, policy.throttle) if policy is not None else ""
        for action in transition.actions:
            record_action(tx, project, job_id, action, now, queue)
        return Applied(transition, stored)

    def _materialize_deferred(self, tx, before, transition: Transition, note) -> None:
        """Give a deferred invocation (see StartInvocation.deferred) its history record
        as soon as anything is to be written about it."""
        named = {
            a.invocation_id for a in transition.actions
            if isinstance(a, (act.Deliver, act.FinishInvocation, act.RecordAttemptFailed))
        }
        if note is not None:
            named.add(note[0])
        for invocation_id in named:
            entry = before.find_active(invocation_id)
            if entry is not None:
                materialize(tx, before.project, before.job_id, entry)

    def _note(self, tx, project, job_id, note, now) -> None:
        invocation_id, message, fields = note
        row = tx.get_invocation(project, job_id, invocation_id)
        if row is not None:
            append_log(row, now, message, **fields)
            tx.put_invocation(row)

    # --- tasks -----------------------------------------------------------------------

    def handle_task(self, task: Task) -> None:
        """Run one task. Returns when it is done or no longer relevant.

        :raises RetryTask: hand it back to the queue (a tick that came early).
        :raises StoreError: storage failed; the queue retries.
        """
        payload = task.payload
        project, job_id = payload["project"], payload["job"]
        try:
            if task.kind in BATCHED_KINDS:
                self._run_step(task)
            elif task.kind == TaskKind.NOTIFY:
                send_notification(self, payload)
            elif task.kind == TaskKind.TRIGGER:
                at = parse_instant(payload["at"]) if payload.get("at") else None
                self.apply(project, job_id, ev.ManualTrigger(payload["request"], payload["trigger"], at))
            else:
                log_event(log, "unknown task kind", task=task.name, kind=task.kind)
        except (NotFound, InvalidTransition) as error:
            self.log_refused(task, error)

    @staticmethod
    def log_refused(task: Task, error: Exception) -> None:
        """A task with nothing left to do: its job is gone, or the job refuses its event
        (e.g. another job's trigger of a paused job)."""
        if isinstance(error, NotFound):
            log_event(log, "task for a missing job", task=task.name)
        else:
            log_event(log, "task refused", task=task.name, reason=str(error))

    def _run_step(self, task: Task) -> None:
        """A tick or a start task. A start task's request is sent here, before the task
        counts as done: a throttle is the concurrency of its queue, so the request
        must be over when the task is."""
        payload = task.payload
        stepped = stepped_from(task, self.apply(payload["project"], payload["job"], task_event(task)))
        retry = stepped.retry()
        if retry is not None:
            raise retry
        for job, action in stepped.deliveries:
            event, note = self.outcome_change(action, self.send(job, action))
            self.apply(job.record.project, job.record.job_id, event, note=note)

    def send(self, job: StoredJob, action: act.Deliver) -> DeliveryResult:
        """Send one attempt already committed as starting; count and log its result."""
        project, job_id = job.record.project, job.record.job_id
        allowed = self._allowed_hosts(project)
        started = self.clock.now()
        result = deliver(self.targets, job, action, allowed, self._completion(project, job_id, action),
                         self.secrets)
        lateness = started - action.scheduled_time
        self.metrics.inc("sundial_deliveries_total", outcome=result.outcome)
        if action.attempt == 1 and action.event_count == 1:
            self.metrics.observe_lateness(max(lateness.total_seconds(), 0.0))
        log_event(log, "delivered", job=f"{project}/{job_id}", invocation=action.invocation_id,
                  scheduled_time=action.scheduled_time, attempt=action.attempt, event=action.event_index,
                  outcome=result.outcome, reason=result.reason,
                  lateness_ms=int(lateness.total_seconds() * 1000),
                  duration_ms=int(result.duration.total_seconds() * 1000))
        return result

    @staticmethod
    def outcome_change(action: act.Deliver, result: DeliveryResult) -> tuple:
        """The event and invocation-log note that record an attempt's result."""
        note = (action.invocation_id, f"attempt {action.attempt}: {result.outcome}",
                {"event": action.event_index, "detail": result.detail,
                 "duration_ms": int(result.duration.total_seconds() * 1000)})
        return _outcome_event(action, result), note

    def _allowed_hosts(self, project: str) -> tuple[str, ...]:
        """The project's `allowed_hosts`, read at most once per SETTINGS_TTL.

        The project row also lists every job id of its file, so reading it on
        every delivery cost more than the delivery; a change takes effect within
        the TTL, as a config change takes up to the import period anyway.
        """
        now = self.clock.now()
        cached = self._settings_cache.get(project)
        if cached is not None and now < cached[0]:
            return cached[1]
        row = self.store.get_project(project)
        hosts = tuple((row.settings if row else {}).get("allowed_hosts", ()))
        self._settings_cache[project] = (now + SETTINGS_TTL, hosts)
        return hosts

    def _completion(self, project: str, job_id: str, action: act.Deliver) -> tuple[str, str]:
        url = f"{self.service_url}/api/v1/projects/{project}/jobs/{job_id}/invocations/{action.invocation_id}:complete"
        return url, self.completion_token(action.invocation_id)

    def completion_token(self, invocation_id: str) -> str:
        return hmac.new(self.secret, f"complete/{invocation_id}".encode(), hashlib.sha256).hexdigest()

    # --- periodic work -----------------------------------------------------------------

    def run_watchdog(self, limit: int = 500) -> int:
        """Repair every job whose watchdog_at has passed; returns how many were looked at."""
        due = self.store.jobs_due_for_watchdog(self.clock.now(), limit)
        for project, job_id in due:
            try:
                applied = self.apply(project, job_id, ev.WatchdogFired())
            except Exception as error:  # one broken job must not stop the others' repair
                log_event(log, "watchdog repair failed", job=f"{project}/{job_id}", error=repr(error))
                continue
            if applied.transition.actions:
                self.metrics.inc("sundial_watchdog_repairs_total")
                log_event(log, "watchdog repaired", job=f"{project}/{job_id}",
                          actions=[type(a).__name__ for a in applied.transition.actions])
        return len(due)

    def cleanup(self, history: timedelta, batch: int = 1000) -> int:
        """Remove finished invocations older than `history`, in batches."""
        cutoff, removed = self.clock.now() - history, 0
        while True:
            count = self.store.delete_invocations_before(cutoff, batch)
            removed += count
            if count < batch:
                return removed


def _outcome_event(action: act.Deliver, result: DeliveryResult):
    if result.outcome == "accepted":
        return ev.InvocationStarted(action.invocation_id, action.event_index, action.attempt)
    return ev.InvocationFinished(
        action.invocation_id, result.outcome == "succeeded", result.reason, action.event_index, action.attempt
    )
