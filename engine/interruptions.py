"""Settling the attempts of processes that are gone (docs/REFERENCE.md section 4).

An attempt in flight when its process died (or stopped with it still out) has no
answer coming. It is applied as `AttemptInterrupted`, through the same path as any
attempt's result (`JobChanges.apply_many`): the machine sends it again under the same
invocation id, without counting it against `max_attempts`, up to MAX_INTERRUPTIONS
times an invocation (statemachine/invocations.py, `on_interrupted`); past that it is a
failed attempt, reason `interrupted` (retried if attempts remain, else FAILED). The
attempt after an interruption waits the backoff a failure of it would have: the request
may have reached the target, which may still be working on it (it cannot know that our
process went away), and the backoff keeps the next one from landing on top of it. A
staged attempt the process provably never let out (due after its release mark,
engine/adapters/local/release_marks.py) goes back to its start task instead, the same
attempt, as if it had not begun.

Who finds them: a process settles the attempts of gone processes when it starts,
before it takes any task, and again at each heartbeat (app/bootstrap.py), and the
watchdog too (engine/maintenance.py). Which processes are gone is the store's to say
(`AttemptHolds.orphaned`); on the embedded backend that is the process registry of
engine/adapters/local/liveness.py.

A process that stops cleanly says itself which of its attempts it never sent (the
requests it dropped at the stop, engine/adapters/local/pipeline.py): `unsent_change`.
"""

from __future__ import annotations

import logging

from engine.changes import Applied, Change, JobChanges, Note
from engine.holds import AttemptHolds, AttemptKey, HeldAttempt
from engine.logs import log_event
from engine.metrics import Metrics
from engine.ports import StoredJob
from statemachine import actions as act
from statemachine import events as ev
from statemachine.policy import INTERRUPTED

log = logging.getLogger("sundial.engine")

BATCH = 100  # attempts settled per transaction
MAX_BATCHES = 50  # per call; the next heartbeat continues a longer list


def interrupted_change(held: HeldAttempt) -> Change:
    """The change that records `held`'s attempt as interrupted, its process being gone;
    it applies only while that process still holds that attempt."""
    key = held.key
    note = Note(key.invocation_id, f"attempt {key.attempt}: {INTERRUPTED}",
                {"event": key.event_index, "detail": f"process {held.holder} is gone"})
    event = ev.AttemptInterrupted(key.invocation_id, key.event_index, key.attempt,
                                  released_until=held.released_until)
    return Change(key.project, key.job_id, event, note, releases=held, if_held=True)


def unsent_change(job: StoredJob, action: act.Deliver) -> Change:
    """The change by which this process gives back an attempt it committed and never sent
    (its stop came first): to its start task, the same attempt under the same id. Only
    while this process still holds that issue of it (a re-issue elsewhere moved it on)."""
    project, job_id = job.record.project, job.record.job_id
    held = HeldAttempt(AttemptKey(project, job_id, action.invocation_id, action.event_index, action.attempt))
    event = ev.AttemptInterrupted(action.invocation_id, action.event_index, action.attempt,
                                  epoch=action.epoch or None, unsent=True)
    return Change(project, job_id, event, releases=held, if_held=True)


class Interruptions:
    def __init__(self, changes: JobChanges, holds: AttemptHolds, metrics: Metrics):
        self.changes, self.holds, self.metrics = changes, holds, metrics

    def settle(self) -> int:
        """Settle every attempt held by a process that is gone; returns how many.

        :raises StoreError: storage failed; what was settled before stays settled.
        """
        settled = 0
        for _ in range(MAX_BATCHES):
            orphans = self.holds.orphaned(BATCH)
            if not orphans:
                break
            results = self.changes.apply_many([interrupted_change(held) for held in orphans])
            for held, applied in zip(orphans, results):
                self._log(held, applied)
            settled += len(orphans)
            if len(orphans) < BATCH:
                break
        return settled

    def _log(self, held: HeldAttempt, applied: object) -> None:
        key = held.key
        taken = isinstance(applied, Applied) and bool(applied.transition.actions)
        if taken:
            self.metrics.inc("sundial_attempts_interrupted_total")
        log_event(log, "attempt interrupted" if taken else "interrupted attempt had ended already",
                  level=logging.WARNING if taken else logging.INFO,
                  job=f"{key.project}/{key.job_id}", invocation=key.invocation_id, event=key.event_index,
                  attempt=key.attempt, process=held.holder)
