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

from engine.holds import AttemptHolds, AttemptKey, HeldAttempt
from engine.logs import log_event
from engine.ports import Clock, StoredJob
from engine.staging_ports import JobsReader, KnownJobs, RunTransaction
from statemachine import actions as act

log = logging.getLogger("sundial.engine")


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


def give_up_staged(write: RunTransaction, holds: AttemptHolds | None, job: StoredJob, action: act.Deliver) -> None:
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


class StagedChecks:
    """What a staged attempt's request passes at its time, besides its leases: its job as
    stored now still wants it (`staged_in`), and the release mark is stored before it leaves
    (a staged request never let out is then sent again). Built only where the tuning
    stages (engine/service.py): the cloud backend's TaskRunner has none.

    `jobs`: the store's read of many jobs at once (OneByOne where it reads one at a time);
    `write(body)`: a transaction, to release a hold given up; `sleep`: how waiting for a
    request's time passes (a test's clock moves on instead).
    """

    def __init__(self, jobs: JobsReader, write: RunTransaction, holds: AttemptHolds | None,
                 sleep: Callable[[float], None] = time.sleep):
        self._jobs, self._write, self._holds, self._sleep = jobs, write, holds, sleep

    def still_wanted(self, job: StoredJob, action: act.Deliver) -> bool:
        """One request at its time: False (and given up) if its job was paused, deleted or
        redefined since; True once the release mark is stored."""
        key = (job.record.project, job.record.job_id)
        if not staged_in(self._jobs.get_jobs([key]).get(key), job, action):
            give_up_staged(self._write, self._holds, job, action)
            return False
        if self._holds is not None and action.send_at is not None:
            self._holds.release_up_to(action.send_at)
        return True

    def wanted(self, staged: list[tuple[StoredJob, act.Deliver]], known: KnownJobs | None = None) -> list[bool]:
        """The requests due at one instant whose leases hold, checked together: one read
        of their jobs (`known`: see JobsReader.get_jobs), those no longer wanted given up,
        and the release mark stored for the latest of the rest."""
        current = self._jobs.get_jobs([(job.record.project, job.record.job_id) for job, _ in staged], known)
        go = []
        for job, action in staged:
            ok = staged_in(current.get((job.record.project, job.record.job_id)), job, action)
            if not ok:
                give_up_staged(self._write, self._holds, job, action)  # paused, deleted or redefined since
            go.append(ok)
        latest = max((action.send_at for (_, action), ok in zip(staged, go) if ok and action.send_at), default=None)
        if self._holds is not None and latest is not None:
            self._holds.release_up_to(latest)  # stored before they leave: one never let out is sent again
        return go

    def wait_until(self, clock: Clock, at: datetime) -> None:
        """Sleep until the clock reads `at` or later."""
        while (left := seconds_until(clock, at)) > 0:
            self._sleep(left)
