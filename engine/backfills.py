"""The backfill use case: the past fire times of a job's schedule, run again.

What a backfill holds and why it fits any commit is statemachine/backfill.py; this
module reads the job, plans, and hands the machine one person's trigger of the run.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from engine.audit import UNKNOWN_ACTOR, Audit
from engine.errors import Refused
from engine.service import Engine
from statemachine import backfill
from statemachine import events as ev
from statemachine.durations import rfc3339_millis
from statemachine.vocabulary import AuditAction, Trigger
from statemachine.waiting import MAX_RUNS


@dataclass(frozen=True)
class Backfilled:
    invocations: list[str]  # in the order they start; each started or waiting its turn


def backfill_job(engine: Engine, project: str, job_id: str, start: datetime, end: datetime,
                 request_id: str | None = None, actor: str = UNKNOWN_ACTOR) -> Backfilled:
    """One invocation per fire time in [start, end), started in order (trigger `backfill`).

    The same `request_id` again (a client retrying) names the same invocations and
    starts nothing new; without one, every request is a backfill of its own.
    """
    stored = engine.queries.job(project, job_id)
    record = stored.record
    if record.policy is None:
        raise Refused("FAILED_PRECONDITION", f"job {project}/{job_id} has never been enabled")
    planned = backfill.plan(record.live_policy, start, end, engine.clock.now(), request_id or uuid.uuid4().hex)
    if planned.run is None:
        return Backfilled([])
    if len(record.runs) >= MAX_RUNS:
        raise Refused("FAILED_PRECONDITION", f"job {project}/{job_id} already has {MAX_RUNS} ranges of "
                                             "occurrences waiting; try again when some have run")
    invocations = planned.invocation_ids(project, job_id)
    detail = {"start": rfc3339_millis(start), "end": rfc3339_millis(end), "count": len(invocations)}
    with engine.writers.admit(project, job_id):
        engine.changes.apply(project, job_id, ev.ManualTrigger(planned.run.key, Trigger.BACKFILL,
                                                               backfill=planned.run),
                             audit=Audit(actor, AuditAction.BACKFILL, detail))
    return Backfilled(invocations)
