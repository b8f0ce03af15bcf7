"""The shell's side of staged attempts (statemachine/staging.py): holding a request until
its time, and the check just before it leaves.

The attempt was committed as starting ahead of its time. Any step of the job since that
paused, disabled, deleted or redefined it gave the staged attempt up in its own commit,
in whichever process it ran: the occurrence was recorded SKIPPED, withdrawn (a new
timing without its time: the entry is gone), or its attempt went back to a start task
under a new epoch. So the check reads the job once, as stored
now, and sends only if the entry still holds this very issue of the attempt (same
epoch, still started, nothing done) on the same definition; otherwise the request is
dropped, and this process's hold on the attempt released.

A pause that commits after the check is a pause after the attempt started, as without
staging: the request goes, and the invocation finishes on its own.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Callable

from engine.holds import AttemptKey, HeldAttempt
from engine.logs import log_event
from engine.ports import Clock, JobStore, StoredJob
from statemachine import actions as act

log = logging.getLogger("sundial.engine")


def still_staged(store: JobStore, job: StoredJob, action: act.Deliver) -> bool:
    """Whether the job, as stored now, still wants this staged request sent."""
    record = job.record
    return staged_in(store.get_job(record.project, record.job_id), job, action)


def current_jobs(store: JobStore, keys: list[tuple[str, str]],
                 known: dict[tuple[str, str], tuple[StoredJob, str]] | None = None
                 ) -> dict[tuple[str, str], StoredJob]:
    """The jobs as stored now, by (project, job id), in one read where the store reads
    many at once (the requests of one instant are checked together). `known`: jobs as
    the caller staged them, with their record's stored text, for a store that can hand
    back an unchanged row as the caller's own object (SqliteJobStore.get_jobs)."""
    read_many = getattr(store, "get_jobs", None)
    if read_many is not None:
        return dict(read_many(keys, known))
    found = {key: store.get_job(*key) for key in dict.fromkeys(keys)}
    return {key: job for key, job in found.items() if job is not None}


def staged_in(current: StoredJob | None, job: StoredJob, action: act.Deliver) -> bool:
    """Whether `current` (the job as stored now; None: gone) still wants the staged
    request of `action`, which `job` issued, sent."""
    if current is None or current.deleted or current.record.paused or current.record.disabled:
        return False
    entry = current.record.find_active(action.invocation_id)
    return (
        entry is not None
        and entry.epoch == action.epoch
        and entry.attempts == (action.attempt,)
        and entry.started_mask == 1
        and not entry.done_mask
        and current.record.policy == job.record.policy
    )


def give_up_staged(write: Callable, holds, job: StoredJob, action: act.Deliver) -> None:
    """The request is not sent: release this process's hold on the attempt (if it still
    has it; a re-issue elsewhere replaced it). A failure here leaves the hold to be
    settled as any orphan is, which changes nothing once the attempt has moved on."""
    record = job.record
    log_event(log, "staged attempt given up", job=f"{record.project}/{record.job_id}",
              invocation=action.invocation_id, attempt=action.attempt)
    if holds is None:
        return
    held = HeldAttempt(AttemptKey(record.project, record.job_id, action.invocation_id, action.event_index,
                                  action.attempt))
    try:
        write(lambda tx: holds.release(tx, held))
    except Exception as error:
        log_event(log, "releasing a staged attempt failed", invocation=action.invocation_id, error=repr(error))


def seconds_until(clock: Clock, at: datetime) -> float:
    return (at - clock.now()).total_seconds()


def wait_until(clock: Clock, at: datetime) -> None:
    """Sleep until the clock reads `at` or later (a test's clock may sleep by moving on)."""
    sleep = getattr(clock, "sleep", time.sleep)
    while (left := seconds_until(clock, at)) > 0:
        sleep(left)
