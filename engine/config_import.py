"""Import project configs into the store, writing only what changed.

A project whose file bytes are unchanged is skipped before anything is
parsed or written. A file that does not parse changes nothing but the error
shown for the project. A job whose entry is invalid keeps its last good
definition, with the entry's error attached to it (`StoredJob.config_error`, what the
API and the UI show) until the entry is valid again or leaves the file. A job removed
from its file is disabled: its running invocations finish and its history stays.

API-managed jobs belong to their project too: the project's file holds their ACL,
and without the file the API answers 404 for all of them. So when the file goes,
they are disabled with the config jobs (nobody could see or stop them otherwise);
when a file of that name comes back, the ones that were enabled are enabled again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from engine.changes import Applied, Change, JobChanges
from engine.errors import CommitTooLarge
from engine.logs import log_event
from engine.ports import JobSource, JobStore, ProjectRow, StoredJob
from engine.queries import visible
from statemachine import events as ev
from statemachine.definition import JobDefinition
from statemachine.policy import JobPolicy

log = logging.getLogger("sundial.config")


@dataclass(frozen=True)
class JobSnapshot:
    id: str
    policy: JobPolicy
    definition: JobDefinition
    disabled: bool


@dataclass(frozen=True)
class ProjectSnapshot:
    """One project file as read: its jobs, or the error that kept it from parsing."""

    project: str
    content_hash: str
    error: str = ""
    jobs: tuple[JobSnapshot, ...] = ()
    job_errors: tuple[str, ...] = ()
    # Entries with errors, by job id: their jobs keep what they had, with this error (the
    # entry's lines of `job_errors`, joined by newlines) attached.
    broken_jobs: Mapping[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def broken_job_ids(self) -> frozenset[str]:
        return frozenset(self.broken_jobs)


class ConfigImport:
    """Applies project snapshots through the unit of work; reads the rows it compares with."""

    def __init__(self, changes: JobChanges, store: JobStore):
        self.changes, self.store = changes, store

    def project_hashes(self) -> dict[str, str]:
        """Every project imported so far (broken ones too) -> the hash of the file it has."""
        return {row.id: row.config_hash for row in self.store.list_projects()}

    def import_project(self, snapshot: ProjectSnapshot) -> int:
        """Apply one project's snapshot; returns how many jobs' schedules changed."""
        current = self.store.get_project(snapshot.project)
        if current is not None and current.config_hash == snapshot.content_hash:
            return 0
        # The project's jobs as they were before this import: one read, which on a first
        # import finds nothing (decoding every job after it was written cost a third of it).
        before = self.store.list_jobs(snapshot.project)
        # A file that comes back, even broken, brings its project back.
        changed = 0 if current is not None else self._restore_api_jobs(snapshot.project, before)
        if snapshot.error:
            self._save_project(_broken(current, snapshot))
            log_event(log, "config error", level=logging.ERROR, project=snapshot.project, error=snapshot.error)
            return changed
        config_jobs = sorted({job.id for job in snapshot.jobs} | snapshot.broken_job_ids)
        settings = {**snapshot.settings, "config_jobs": config_jobs}
        # The settings (allowed_hosts, ACL) go in before any job can fire under them;
        # the new hash only after every job is applied, so a crash midway re-imports.
        # Meanwhile no hash at all: one midway leaves jobs of this file under the old
        # file's hash, and the old file brought back would be taken as applied.
        self._save_project(ProjectRow(snapshot.project, "", "", list(snapshot.job_errors), settings))
        progress = Progress(snapshot.project, len(snapshot.jobs))
        batch = max(1, self.store.jobs_per_commit)
        changes = [Change(snapshot.project, job.id, ev.JobDisabled() if job.disabled else ev.JobEnabled(job.policy),
                          definition=job.definition, source=JobSource.CONFIG) for job in snapshot.jobs]
        for start in range(0, len(changes), batch):
            part = changes[start:start + batch]
            changed += self._apply_batch(part)
            progress.done_with(len(part))
        changed += self._settle_the_rest(snapshot, before)
        # config_jobs: the ids the file defines; the API refuses to create or delete those.
        self._save_project(ProjectRow(
            snapshot.project, snapshot.content_hash, "", list(snapshot.job_errors), settings,
        ))
        for error in snapshot.job_errors:
            log_event(log, "config job error", level=logging.ERROR, project=snapshot.project, error=error)
        progress.finished(changed)
        return changed

    def remove_project(self, project: str) -> None:
        """The project's file is gone: its jobs (API jobs too) stop, its row goes, history stays."""
        for stored in self.store.list_jobs(project):
            if not stored.record.disabled:
                self.changes.apply(project, stored.record.job_id, ev.JobDisabled())
        self.changes.write(lambda tx: tx.delete_project(project))
        log_event(log, "project removed", project=project)

    def _apply_batch(self, batch: list[Change]) -> int:
        """Apply the jobs of `batch` in one transaction; returns how many schedules changed.

        Each job's step is bounded to one commit (statemachine/budget.py), a batch of them
        is not: one whose new timing settles long backlogs may write more than a commit
        takes. The store refuses that before writing anything, and the batch is split in
        two, each half tried again. Only a single job's step over the budget is a defect.
        """
        try:
            results = self.changes.apply_many(batch)
        except CommitTooLarge:
            if len(batch) == 1:
                raise
            half = len(batch) // 2
            return self._apply_batch(batch[:half]) + self._apply_batch(batch[half:])
        changed = 0
        for result in results:
            if not isinstance(result, Applied):
                raise result  # as `apply` would have: the jobs before it are kept, the hash is not written
            changed += bool(result.transition.actions)
        return changed

    def _settle_the_rest(self, snapshot: ProjectSnapshot, before: list[StoredJob]) -> int:
        """Attach its error to each job whose entry is broken; disable the config jobs the
        file no longer defines (and drop an error they kept). Returns how many were disabled.

        `before`: the project's jobs before this import. A job the import created is in
        the file and has no error, so it needs nothing here. A job whose error reads as
        before is not written: a file changed elsewhere rewrites only what it changed. The
        error is compared again inside the write's transaction (applying a valid entry may
        have cleared it meanwhile).
        """
        keep = {job.id for job in snapshot.jobs} | snapshot.broken_job_ids
        removed = 0
        for stored in before:
            job_id = stored.record.job_id
            error = snapshot.broken_jobs.get(job_id, "")
            if stored.source == JobSource.CONFIG and job_id not in keep and not stored.record.disabled:
                self.changes.apply(snapshot.project, job_id, ev.JobDisabled())
                removed += 1
            if stored.config_error != error:
                self.changes.set_config_error(snapshot.project, job_id, error)
        return removed

    def _restore_api_jobs(self, project: str, before: list[StoredJob]) -> int:
        """Enable again the API jobs that remove_project disabled (see the module's doc)."""
        restored = 0
        for stored in before:
            record, definition = stored.record, stored.definition
            if (stored.source == JobSource.API and record.disabled and record.policy is not None
                    and not definition.disabled and visible(stored)):
                self.changes.apply(project, record.job_id, ev.JobEnabled(record.policy))
                restored += 1
        return restored

    def _save_project(self, row: ProjectRow) -> None:
        self.changes.write(lambda tx: tx.put_project(row))


def _broken(current: ProjectRow | None, snapshot: ProjectSnapshot) -> ProjectRow:
    """Keep everything of the last good import; remember the broken file's hash and error."""
    if current is None:
        return ProjectRow(snapshot.project, snapshot.content_hash, snapshot.error)
    return ProjectRow(
        snapshot.project, snapshot.content_hash, snapshot.error, current.job_errors, current.settings
    )


class Progress:
    """Lines that show a long import moving: one every PROGRESS_JOBS jobs or
    PROGRESS_SECONDS, whichever comes first (a first import of 100,000 jobs takes tens
    of seconds), then one when the project is done. Reads the monotonic clock, not the
    engine's: it measures this process's work, not scheduled time."""

    def __init__(self, project: str, total: int):
        self.project, self.total, self.done = project, total, 0
        self.started = self._last = time.monotonic()
        self._last_done = 0

    def done_with(self, jobs: int) -> None:
        self.done += jobs
        now = time.monotonic()
        if self.done - self._last_done >= PROGRESS_JOBS or now - self._last >= PROGRESS_SECONDS:
            log_event(log, "importing project", project=self.project, done=self.done, total=self.total,
                      jobs_per_second=round(self.done / max(now - self.started, 1e-6), 1))
            self._last, self._last_done = now, self.done

    def finished(self, changed: int) -> None:
        took = time.monotonic() - self.started
        log_event(log, "imported project", project=self.project, jobs=self.total, changed=changed,
                  took_ms=round(took * 1000))


PROGRESS_JOBS = 1000
PROGRESS_SECONDS = 5.0
