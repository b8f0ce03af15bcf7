"""The periodic repairs: the watchdog and the history clean-up.

Both are driven from outside (the embedded server's loops, or App Engine's cron
through /internal/cron/*), and both do a bounded amount of work per run.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from engine.changes import JobChanges
from engine.interruptions import Interruptions
from engine.logs import log_event
from engine.metrics import Metrics
from engine.ports import Clock, JobStore
from statemachine import events as ev

log = logging.getLogger("sundial.engine")


class Maintenance:
    def __init__(self, store: JobStore, changes: JobChanges, clock: Clock, metrics: Metrics,
                 interruptions: Interruptions | None = None):
        """`interruptions`: settles the attempts of gone processes first (None where the
        backend's tasks settle them)."""
        self.store, self.changes, self.clock, self.metrics = store, changes, clock, metrics
        self.interruptions = interruptions

    def run_watchdog(self, limit: int = 500) -> int:
        """Repair every job whose watchdog_at has passed; returns how many were looked at.

        :raises StoreError: the due jobs could not be listed (a job that fails its own
            repair is logged and skipped: one broken job must not stop the others').
        """
        if self.interruptions is not None:
            # Before the repairs: an attempt whose process is gone is settled at once,
            # not re-issued when its lease runs out.
            try:
                self.interruptions.settle()
            except Exception as error:  # the repairs below do not depend on it
                log_event(log, "settling interrupted attempts failed", error=repr(error))
        due = self.store.jobs_due_for_watchdog(self.clock.now(), limit)
        for project, job_id in due:
            try:
                applied = self.changes.apply(project, job_id, ev.WatchdogFired())
            except Exception as error:  # one broken job must not stop the others' repair
                log_event(log, "watchdog repair failed", job=f"{project}/{job_id}", error=repr(error))
                continue
            if applied.transition.actions:
                self.metrics.inc("sundial_watchdog_repairs_total")
                log_event(log, "watchdog repaired", job=f"{project}/{job_id}",
                          actions=[type(a).__name__ for a in applied.transition.actions])
        return len(due)

    def cleanup(self, history: timedelta, batch: int = 1000) -> int:
        """Remove finished invocations older than `history`, in batches; returns how many.

        :raises StoreError: storage failed; what was removed before stays removed.
        """
        cutoff, removed = self.clock.now() - history, 0
        while True:
            count = self.store.delete_invocations_before(cutoff, batch)
            removed += count
            if count < batch:
                return removed
