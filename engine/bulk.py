"""Bulk pause and resume: every job of a project that a filter selects, one by one.

Each job goes through the same use case as its own `:pause` or `:resume`
(engine/operations.py), so each change is its own transaction with its own audit entry,
exactly as if an operator had acted on the jobs one at a time. Only the jobs the action
would change are acted on: a bulk pause leaves a job that is already paused with its own
reason (paused after its failures, say), and a bulk resume leaves a running job alone,
so that repeating a bulk request (a client's retry after a storage failure) changes and
audits nothing twice. A job that refuses the action (a disabled job) is reported as
failed and the others go on; a storage failure ends the request, and its retry picks up
the jobs still to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from engine import operations as ops
from engine.audit import UNKNOWN_ACTOR
from engine.errors import StoreError
from engine.ports import StoredJob
from engine.service import Engine
from statemachine.errors import SundialError

PAUSED, RESUMED, UNCHANGED, FAILED = "paused", "resumed", "unchanged", "failed"


@dataclass(frozen=True)
class BulkResult:
    """What became of one selected job: `outcome` is one of the four names above;
    `error` is the refusal of a FAILED one."""

    job_id: str
    outcome: str
    error: SundialError | None = None


Selected = Callable[[StoredJob], bool]


def pause_jobs(engine: Engine, project: str, selected: Selected, reason: str = "",
               actor: str = UNKNOWN_ACTOR) -> list[BulkResult]:
    """Pause every selected job that is not paused, in id order."""
    return _each(engine, project, selected, lambda job: not job.record.paused, PAUSED,
                 lambda job_id: ops.pause(engine, project, job_id, reason, actor=actor))


def resume_jobs(engine: Engine, project: str, selected: Selected, reason: str = "",
                actor: str = UNKNOWN_ACTOR) -> list[BulkResult]:
    """Resume every selected job that is paused, in id order; `reason` goes to the audit."""
    return _each(engine, project, selected, lambda job: job.record.paused, RESUMED,
                 lambda job_id: ops.resume(engine, project, job_id, actor=actor, reason=reason))


def _each(engine: Engine, project: str, selected: Selected, changes: Selected, outcome: str,
          act: Callable[[str], StoredJob]) -> list[BulkResult]:
    results = []
    for job in sorted(engine.queries.jobs(project), key=lambda job: job.record.job_id):
        job_id = job.record.job_id
        if not selected(job):
            continue
        if not changes(job):
            results.append(BulkResult(job_id, UNCHANGED))
            continue
        try:
            act(job_id)
        except StoreError:
            raise
        except SundialError as refusal:  # this job's own refusal; the others go on
            results.append(BulkResult(job_id, FAILED, refusal))
            continue
        results.append(BulkResult(job_id, outcome))
    return results
