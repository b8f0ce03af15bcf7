"""Settling the attempts of processes that are gone (docs/REFERENCE.md section 4).

An attempt in flight when its process died has no answer coming. It is settled as a
failed attempt with reason `interrupted`, through the same path as any attempt's
result (`InvocationFinished`, recorded by `JobChanges.apply_many`): the machine
retries it under the same invocation id if attempts remain, else the invocation ends
FAILED with reason `interrupted`. Like any failed attempt, its retry waits the
retry policy's backoff: the request may have reached the target, which may still be
working on it (it cannot know that our process died), and the backoff is what keeps
a retry from landing on top of it, as after a timeout, which has no answer either.

Who finds them: a process settles the attempts of gone processes when it starts,
before it takes any task, and again at each heartbeat (app/bootstrap.py), and the
watchdog too (engine/maintenance.py). Which processes are gone is the store's to say
(`AttemptHolds.orphaned`); on the embedded backend that is the process registry of
engine/adapters/local/liveness.py.
"""

from __future__ import annotations

import logging

from engine.changes import Applied, Change, JobChanges, Note
from engine.holds import AttemptHolds, HeldAttempt
from engine.logs import log_event
from engine.metrics import Metrics
from statemachine import events as ev

log = logging.getLogger("sundial.engine")

INTERRUPTED = "interrupted"  # the failed attempt's reason, and the FAILED invocation's
BATCH = 100  # attempts settled per transaction
MAX_BATCHES = 50  # per call; the next heartbeat continues a longer list


def interrupted_change(held: HeldAttempt) -> Change:
    """The change that records `held`'s attempt as failed, its process being gone;
    it applies only while that process still holds that attempt."""
    key = held.key
    note = Note(key.invocation_id, f"attempt {key.attempt}: {INTERRUPTED}",
                {"event": key.event_index, "detail": f"process {held.holder} is gone"})
    event = ev.InvocationFinished(key.invocation_id, False, INTERRUPTED, key.event_index, key.attempt,
                                  released_until=held.released_until)
    return Change(key.project, key.job_id, event, note, releases=held, if_held=True)


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
