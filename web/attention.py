"""The jobs that need attention, for the top of `/` (docs/REFERENCE.md section 7): no Flask, no I/O.

A job needs attention when it is
- `config`: its entry in the config file has an error (the import's error names it;
  it runs its last good definition); and one line for a project whose file does not
  load, or for an invalid entry that never made a job (there is no job to link to);
- `failing`: its last finished invocation FAILED (the record's count of FAILED
  invocations since the last SUCCEEDED one, or the last resume, is above 0);
- `late`: its next tick was due more than LATE_AFTER ago, or an invocation of it is
  still active more than LATE_AFTER past its timeout. Either means the chain is stuck:
  the watchdog re-arms a tick within a minute or so of its time and ends an invocation
  at its timeout, so a healthy job is never this far behind;
- `paused`: paused by someone, with the reason they gave.

Everything comes from the job's record (`facts`): no read per job besides the job
itself, so the facts of a large project can be kept for a minute (engine/metrics.py's
JobSeriesCache) and the page still judges lateness against the time of the request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Iterable

from engine.ports import ProjectRow, StoredJob

LATE_AFTER = timedelta(minutes=5)
ATTENTION_LIMIT = 100  # lines shown; the rest are counted
# How an import error names its job entry (config/): "demo.yaml:12: job 'nightly': schedule: ..."
_NAMED_JOB = re.compile(r"\bjob '([^']+)'")
KINDS = ("config", "failing", "late", "paused")  # most urgent first: the order of the list


@dataclass(frozen=True)
class JobFacts:
    """What the attention rules read of one job, kept small so a project's facts can be cached."""

    project: str
    job_id: str
    paused: bool = False
    pause_reason: str = ""
    paused_at: datetime | None = None
    paused_by: str = ""
    failures: int = 0
    config_error: str = ""
    tick_at: datetime | None = None
    deadline: datetime | None = None  # the earliest timeout of its active invocations


@dataclass(frozen=True)
class Attention:
    project: str
    job_id: str  # "" for a project whose file does not load
    kinds: tuple[str, ...]
    facts: JobFacts | None = None
    detail: str = ""


def facts(jobs: Iterable[StoredJob]) -> list[JobFacts]:
    """The facts of every job that could need attention (disabled ones only for a config error)."""
    found = []
    for job in jobs:
        record = job.record
        if record.disabled and not job.config_error:
            continue
        deadlines = [entry.deadline for entry in record.active]
        found.append(JobFacts(
            record.project, record.job_id, record.paused, record.pause_reason, record.paused_at,
            str(getattr(record, "paused_by", "") or ""),  # recorded by versions that keep who paused
            record.consecutive_failures, job.config_error, None if record.paused else record.tick_at,
            min(deadlines) if deadlines else None))
    return found


def kinds_of(job: JobFacts, now: datetime) -> tuple[str, ...]:
    """Why the job needs attention, most urgent first (KINDS' order); () when it does not."""
    # Plain tests, no allocation for a healthy job: the list judges every job of every readable project.
    found: list[str] = []
    if job.config_error:
        found.append("config")
    if job.failures > 0:
        found.append("failing")
    if not job.paused:
        due = now - LATE_AFTER
        if (job.tick_at is not None and job.tick_at < due) or (job.deadline is not None and job.deadline < due):
            found.append("late")
    else:
        found.append("paused")
    return tuple(found)


def attention(projects: list[ProjectRow], job_facts: list[JobFacts], now: datetime,
              limit: int = ATTENTION_LIMIT) -> tuple[list[Attention], int]:
    """The first `limit` lines, most urgent first, and how many more there are."""
    lines = [Attention(row.id, "", ("config",), detail=row.config_error) for row in projects if row.config_error]
    known = {(job.project, job.job_id): job for job in job_facts}
    broken: dict[tuple[str, str], str] = {}
    for row in projects:
        for error in row.job_errors:
            named = _NAMED_JOB.search(error)
            key = (row.id, named.group(1) if named and (row.id, named.group(1)) in known else "")
            broken.setdefault(key, error)  # an entry that never made a job is listed under its project
    for job in job_facts:
        error = job.config_error or (broken.pop((job.project, job.job_id), "") if broken else "")
        kinds = kinds_of(replace(job, config_error=error) if error else job, now)
        if kinds:
            lines.append(Attention(job.project, job.job_id, kinds, job, error))
    lines += [Attention(project, "", ("config",), detail=error) for (project, _), error in broken.items()]
    lines.sort(key=lambda line: (KINDS.index(line.kinds[0]), line.project, line.job_id))
    return lines[:limit], max(len(lines) - limit, 0)

