"""The in-memory store's committed data, under one lock, and what one commit may write.

What it models: rows keyed as the other stores key them (a job by project and id, an
invocation, a fan-out's progress part, a project, an audit entry, a meta value), the
watchdog's indexed time kept apart from the job's record (as a column or an indexed
property is), and production's limits checked before anything of a commit is
written: the number of entities (CommitTooLarge, statemachine/budget.py) and the size
of an entity and of one stored text (Firestore in Datastore mode's, as
engine/adapters/cloud/datastore_limits.py counts them; here each text property is
counted by its UTF-8 bytes, keys and property names left out, so the check is a
few hundred bytes kinder than production's).

What it does not: durability (a process's memory), several processes, an upgrade
path (nothing is kept to be read by another release), and storage failures (a
test that wants them wraps the store, tests/engine/harness.py's FlakyStore).

Rows are copied going in and coming out, so a caller that changes what it read or
wrote changes nothing stored, as with a store that encodes its rows.
"""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from engine.errors import CommitTooLarge, StoreError
from engine.ports import AuditEntry, InvocationRow, ProjectRow, StoredJob, Task
from statemachine.budget import COMMIT_ENTITY_LIMIT
from statemachine.record_form import record_to_dict

MAX_ENTITY_BYTES = 1_048_572  # Firestore in Datastore mode: one entity
MAX_PROPERTY_BYTES = 1_048_487  # and one unindexed property

JobKey = tuple[str, str]  # (project, job id)
InvocationKey = tuple[str, str, str]  # (project, job id, invocation id)


class RowTooLarge(StoreError):
    """A row over production's size limits: refused before the commit, so nothing
    of its transaction is written (Datastore would refuse the commit)."""

    def __init__(self, what: str, size: int, limit: int):
        self.what, self.size, self.limit = what, size, limit
        super().__init__(f"memory: {what} is too large to store: {size:,} bytes, over the limit of"
                         f" {limit:,} bytes of one Datastore entity; nothing was written")


@dataclass
class Writes:
    """One transaction's writes, buffered until it commits. None marks a deletion."""

    jobs: dict[JobKey, StoredJob | None] = field(default_factory=dict)
    invocations: dict[InvocationKey, InvocationRow] = field(default_factory=dict)
    progress: dict[InvocationKey, dict[str, dict[str, Any]]] = field(default_factory=dict)
    projects: dict[str, ProjectRow | None] = field(default_factory=dict)
    audit: dict[tuple[str, str], AuditEntry] = field(default_factory=dict)
    inbox: dict[InvocationKey, dict[str, Any] | None] = field(default_factory=dict)  # (project, job, key)
    # In the order made: a Task is enqueued, a name (str) dequeued.
    queue_changes: list[Task | str] = field(default_factory=list)

    def entity_count(self) -> int:
        parts = sum(len(parts) for parts in self.progress.values())
        return len(self.jobs) + len(self.invocations) + parts + len(self.projects) + len(self.audit) + len(self.inbox)

    def job_names(self) -> list[str]:
        keys = [*self.jobs, *((p, j) for p, j, _ in self.invocations), *((p, j) for p, j, _ in self.progress),
                *((entry.project, entry.job_id) for entry in self.audit.values()), *((p, j) for p, j, _ in self.inbox)]
        return list(dict.fromkeys(f"{project}/{job_id}" for project, job_id in keys))


class MemoryTables:
    """The committed rows. `lock` is held by a whole transaction (body and commit) and
    by every read, so readers see whole commits and writers never interleave."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.jobs: dict[JobKey, StoredJob] = {}
        self.watchdog_at: dict[JobKey, datetime] = {}
        self.invocations: dict[JobKey, dict[str, InvocationRow]] = {}
        self.progress: dict[InvocationKey, dict[str, dict[str, Any]]] = {}
        self.projects: dict[str, ProjectRow] = {}
        self.audit: dict[tuple[str, str], AuditEntry] = {}
        self.inbox: dict[JobKey, dict[str, dict[str, Any]]] = {}  # a job's pending rows by key
        self.meta: dict[str, str] = {}

    def throttle_limit(self, queue: str) -> int | None:
        """How many tasks of the queue `PROJECT/THROTTLE` may be leased at once, as the
        project's last import stored it; None: no such throttle (it runs unthrottled)."""
        project, _, throttle = queue.partition("/")
        with self.lock:
            row = self.projects.get(project)
            limit = row.settings.get("throttles", {}).get(throttle) if row is not None else None
        return int(limit) if limit is not None else None

    def invocation(self, key: InvocationKey) -> InvocationRow | None:
        row = self.invocations.get(key[:2], {}).get(key[2])
        return None if row is None else copy_invocation(row)

    def apply(self, writes: Writes) -> dict[JobKey, int]:
        """Make the writes the committed data; the caller holds the lock. Returns the
        size in bytes of each job record written, as measured for the limits (so that
        a caller that watches sizes, the simulator, need not serialize it again).

        :raises CommitTooLarge: more entities than one commit takes; nothing written.
        :raises RowTooLarge: a row over the size limits; nothing written."""
        count = writes.entity_count()
        if count > COMMIT_ENTITY_LIMIT:
            raise CommitTooLarge("memory", writes.job_names(), count)
        sizes = check_sizes(writes)
        for key, job in writes.jobs.items():
            self._put_job(key, job)
        for (project, job_id, invocation_id), row in writes.invocations.items():
            self.invocations.setdefault((project, job_id), {})[invocation_id] = row
        for invocation, parts in writes.progress.items():
            self.progress.setdefault(invocation, {}).update(parts)
        for project, project_row in writes.projects.items():
            if project_row is None:
                self.projects.pop(project, None)
            else:
                self.projects[project] = project_row
        self.audit.update(writes.audit)
        for (project, job_id, row_name), value in writes.inbox.items():
            rows = self.inbox.setdefault((project, job_id), {})
            if value is None:
                rows.pop(row_name, None)
            else:
                rows[row_name] = value
        return sizes

    def _put_job(self, key: JobKey, job: StoredJob | None) -> None:
        if job is None:
            self.jobs.pop(key, None)
            self.watchdog_at.pop(key, None)
            return
        self.jobs[key] = job
        if job.record.watchdog_at is None:
            self.watchdog_at.pop(key, None)
        else:
            self.watchdog_at[key] = job.record.watchdog_at


def check_sizes(writes: Writes) -> dict[JobKey, int]:
    """The size of each job record written (its compact JSON, in bytes).

    :raises RowTooLarge: a stored text or a whole row over production's limits."""
    sizes = {}
    for (project, job_id), job in writes.jobs.items():
        if job is not None:
            record = json.dumps(record_to_dict(job.record), separators=(",", ":"))
            sizes[(project, job_id)] = _check(f"job {project}/{job_id}", record, job.definition.canonical_json,
                                              job.config_error)[0]
    for (project, job_id, invocation_id), row in writes.invocations.items():
        log = json.dumps(row.log, separators=(",", ":"))
        _check(f"invocation {invocation_id} of job {project}/{job_id}", log, row.reason)
    for (project, job_id, invocation_id), parts in writes.progress.items():
        for part, value in parts.items():
            _check(f"progress {part} of invocation {invocation_id} of job {project}/{job_id}",
                   json.dumps(value, separators=(",", ":")))
    return sizes


def _check(what: str, *texts: str) -> list[int]:
    """The sizes of `texts` in bytes, each and together within the limits."""
    sizes = [len(text.encode("utf-8")) for text in texts]
    if max(sizes) > MAX_PROPERTY_BYTES:
        raise RowTooLarge(what, max(sizes), MAX_PROPERTY_BYTES)
    if sum(sizes) > MAX_ENTITY_BYTES:
        raise RowTooLarge(what, sum(sizes), MAX_ENTITY_BYTES)
    return sizes


def copy_job(job: StoredJob) -> StoredJob:
    """A copy whose fields may be set without touching the original (record and
    definition are frozen, so they are shared)."""
    return replace(job)


def copy_invocation(row: InvocationRow) -> InvocationRow:
    """A copy whose log may grow without touching the original (entries are never
    changed in place, only added or cut)."""
    return replace(row, log=list(row.log))


def copy_project(row: ProjectRow) -> ProjectRow:
    return copy.deepcopy(row)


def copy_value(value: dict[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = copy.deepcopy(value)
    return copied
