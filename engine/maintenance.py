"""The periodic repairs: the watchdog and the history clean-up.

Both are driven from outside (the embedded server's loops, or App Engine's cron
through /internal/cron/*). A run works until nothing is left or its time budget is
spent, whichever comes first; the budget is the caller's (a cron request must answer
long before App Engine's 10 minutes, and before the next run a minute later) and is
measured on the injected clock. What a run leaves, the next run does:

- The watchdog walks the due jobs page by page with the store's cursor, so a job
  that cannot be repaired never keeps the others from their turn. A failed repair
  pushes that job's watchdog time back by REPAIR_BACKOFF (bounded, and spread per job
  so that many wedged jobs do not come back together): later runs do not meet it at
  the head of their query, and it is tried again once the backoff has run out. If
  even that write fails, the cursor has still moved past the job in this run.
- The clean-up deletes finished history in batches, invocations, the progress
  rows of finished fan-outs and audit entries side by side; a run stopped by its budget leaves the rest
  to the next one, which finds it at the head of the same queries.
"""

from __future__ import annotations

import logging
import zlib
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from enum import Enum

from engine.changes import JobChanges
from engine.errors import NotFound
from engine.interruptions import Interruptions
from engine.logs import log_event
from engine.metrics import Metrics
from engine.ports import Clock, JobStore
from statemachine import events as ev

log = logging.getLogger("sundial.engine")

# A cron run every minute: done with a wide margin before the next one starts.
DEFAULT_BUDGET = timedelta(seconds=40)
PAGE = 500  # jobs per watchdog query, rows per clean-up batch
# How long a job whose repair failed is left alone; plus up to REPAIR_SPREAD, by job.
REPAIR_BACKOFF = timedelta(minutes=1)
REPAIR_SPREAD = 30  # seconds
# After a queue outage every job with a tick pending is stepped, however far ahead it is due.
EVERY_PENDING_TICK = timedelta(days=3660)


class Outcome(Enum):
    """What the watchdog made of one due job."""

    REPAIRED = "repaired"  # the repair acted (re-armed a tick, re-issued or timed out an attempt)
    UNCHANGED = "unchanged"  # nothing to do after all (repaired by someone else, or gone)
    FAILED = "failed"  # the repair raised, or left the job due; deferred
    NOT_TRIED = "not tried"  # the run's budget ran out first


def repair_backoff(project: str, job_id: str) -> timedelta:
    """How long a job whose repair failed waits for the next try: REPAIR_BACKOFF plus a
    share of REPAIR_SPREAD derived from its name (the same for every run)."""
    spread = zlib.crc32(f"{project}/{job_id}".encode()) % (REPAIR_SPREAD + 1)
    return REPAIR_BACKOFF + timedelta(seconds=spread)


class Maintenance:
    def __init__(self, store: JobStore, changes: JobChanges, clock: Clock, metrics: Metrics,
                 interruptions: Interruptions | None = None, repair_workers: int = 1):
        """`interruptions`: settles the attempts of gone processes first (None where the
        backend's tasks settle them). `repair_workers`: repairs run at once (a store whose
        transactions wait on the network gains from several; one writer at a time gains
        nothing)."""
        self.store, self.changes, self.clock, self.metrics = store, changes, clock, metrics
        self.interruptions = interruptions
        self.repair_workers = max(1, repair_workers)

    def run_watchdog(self, budget: timedelta = DEFAULT_BUDGET, page_size: int = PAGE,
                     queue_lost: bool = False) -> int:
        """Repair the jobs whose watchdog_at has passed, page after page, until none is
        left or `budget` is spent; returns how many were tried. `queue_lost`: the task
        queue came back from an outage and may have lost what it held; every job with a
        tick pending has it armed again (WatchdogFired.queue_lost), due or not.

        :raises StoreError: the due jobs could not be listed (a job that fails its own
            repair is deferred and skipped: one broken job must not stop the others').
        """
        self._settle_interruptions()
        start = self.clock.now()
        deadline, cursor = start + budget, None
        horizon, event = (start + EVERY_PENDING_TICK, ev.WatchdogFired(queue_lost=True)) if queue_lost else \
            (start, ev.WatchdogFired())
        counts = dict.fromkeys(Outcome, 0)
        pool = ThreadPoolExecutor(self.repair_workers, "sundial-watchdog") if self.repair_workers > 1 else None
        try:
            while True:
                # The same `now` for every page: the cursor belongs to that query.
                page, cursor = self.store.jobs_due_for_watchdog(horizon, page_size, cursor)
                run = pool.map if pool is not None else map
                for outcome in run(lambda job: self._repair(job[0], job[1], deadline, event), page):
                    counts[outcome] += 1
                if cursor is None or self.clock.now() >= deadline:
                    break
        finally:
            if pool is not None:
                pool.shutdown()
        finished = cursor is None and not counts[Outcome.NOT_TRIED]
        tried = sum(counts.values()) - counts[Outcome.NOT_TRIED]
        self._report("watchdog", finished, tried=tried,
                     **{outcome.name.lower(): counts[outcome] for outcome in Outcome if counts[outcome]})
        return tried

    def _settle_interruptions(self) -> None:
        if self.interruptions is None:
            return
        # Before the repairs: an attempt whose process is gone is settled at once,
        # not re-issued when its lease runs out.
        try:
            self.interruptions.settle()
        except Exception as error:  # the repairs below do not depend on it
            log_event(log, "settling interrupted attempts failed", error=repr(error))

    def _repair(self, project: str, job_id: str, deadline: datetime, event: ev.WatchdogFired) -> Outcome:
        """One job's repair, in a transaction of its own; never raises."""
        if self.clock.now() >= deadline:
            return Outcome.NOT_TRIED
        job = f"{project}/{job_id}"
        try:
            applied = self.changes.apply(project, job_id, event)
        except NotFound:
            return Outcome.UNCHANGED  # deleted since the query: nothing left to repair
        except Exception as error:  # one broken job must not stop the others' repair
            self._defer(project, job_id, repr(error))
            return Outcome.FAILED
        if applied.transition.actions:
            self.metrics.inc("sundial_watchdog_repairs_total")
            # WARNING: a repair means a task was lost or late; a steady trickle needs a look.
            log_event(log, "watchdog repaired", level=logging.WARNING, job=job,
                      actions=[type(a).__name__ for a in applied.transition.actions])
        due = applied.job.record.watchdog_at
        if due is not None and due <= self.clock.now():
            # Stepped, and still due: it would head every run's query. Left alone a while.
            self._defer(project, job_id, f"still due at {due.isoformat()} after its repair")
            return Outcome.FAILED
        return Outcome.REPAIRED if applied.transition.actions else Outcome.UNCHANGED

    def _defer(self, project: str, job_id: str, error: str) -> None:
        self.metrics.inc("sundial_watchdog_repair_failures_total")
        until = self.clock.now() + repair_backoff(project, job_id)
        try:
            self.store.defer_watchdog(project, job_id, until)
        except Exception as defer_error:  # the cursor has moved past it anyway
            log_event(log, "watchdog repair failed", level=logging.ERROR, job=f"{project}/{job_id}",
                      error=error, deferring=repr(defer_error))
            return
        log_event(log, "watchdog repair failed", level=logging.ERROR, job=f"{project}/{job_id}",
                  error=error, retry_after=until)

    def cleanup(self, history: timedelta, budget: timedelta = DEFAULT_BUDGET, batch: int = PAGE) -> int:
        """Remove finished history older than `history` (invocations, the progress
        rows of finished fan-outs, and audit entries), batch after batch, until none is left or `budget` is
        spent; returns how many rows were removed.

        :raises StoreError: storage failed; what was removed before stays removed.
        """
        start = self.clock.now()
        cutoff, deadline = start - history, start + budget
        removed, invocations_left, progress_left, audit_left, cursor = 0, True, True, True, None
        try:
            while invocations_left or progress_left or audit_left:
                if invocations_left:
                    count = self.store.delete_invocations_before(cutoff, batch)
                    removed, invocations_left = removed + count, count >= batch
                if progress_left:
                    count, cursor = self.store.delete_finished_progress(cutoff, batch, cursor)
                    removed, progress_left = removed + count, cursor is not None
                if audit_left:  # kept as long as the history (engine/audit.py)
                    count = self.store.delete_audit_before(cutoff, batch)
                    removed, audit_left = removed + count, count >= batch
                if self.clock.now() >= deadline:
                    break
        finally:
            self.metrics.inc("sundial_cleanup_removed_total", removed)
        self._report("cleanup", not (invocations_left or progress_left or audit_left), removed=removed)
        return removed

    def _report(self, run: str, finished: bool, **counts: int) -> None:
        """One line per run that did anything; a run stopped by its budget is counted."""
        if not finished:
            self.metrics.inc("sundial_maintenance_budget_spent_total", run=run)
        if not finished or any(counts.values()):
            log_event(log, f"{run} run", level=logging.INFO if finished else logging.WARNING,
                      finished=finished, **counts)
