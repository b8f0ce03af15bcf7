"""The read side: what the API, the UI and /metrics show, with the visibility rule applied once.

A job whose deletion has begun is invisible: no reader sees it, in any list or page.
Readers go through `Queries`; the use cases that must see such a job (to revive it with
a PUT, or to finish deleting it) ask for it by name with `stored_job`.

An invocation started by its own tick lives only in its job's record until its first
attempt ends (StartInvocation.deferred: one write fewer per delivery); its request may
have left long before its row is written. Every history the readers see (the listing,
its pages and status filters, a job's last invocations) shows such an invocation as the
row it will have (`row_of_active`), in its place among the rows. The job is read before
the rows, so an invocation that ends in between is found by one read or the other.

One committed ahead of its time (statemachine/staging.py) has sent nothing before it:
until then it is shown STARTING, with no `started_time` and no attempt in its log
(`_shown_row`), on the clock the engine was built with. The job itself is shown through
statemachine/shown.py at the reader's `now` (web/views.py, web/ui.py, engine/metrics.py).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from engine.deferred_finish import may_hold_finish, settle_deferred
from engine.errors import NotFound
from engine.ports import AuditEntry, Clock, InvocationRow, JobStore, ProjectRow, StoredJob
from engine.recording import row_of_active
from statemachine.policy import DEFAULT_TUNING, Tuning
from statemachine.record import ActiveInvocation
from statemachine.staging import staged


def _newest_first(row: InvocationRow) -> str:
    return row.id  # ids sort newest first (statemachine/ids.py)


def _unlisted(job: StoredJob, rows: list[InvocationRow], after: str,
              through: str | None) -> list[tuple[str, ActiveInvocation]]:
    """The job's active invocations with ids in (after, through) (through None: no bound)
    that are not among `rows`, which hold every row of that range."""
    listed = {row.id for row in rows}
    return [(job.record.job_id, entry) for entry in job.record.active
            if entry.invocation_id not in listed and entry.invocation_id > after
            and (through is None or entry.invocation_id < through)]


def _shown_row(project: str, job_id: str, entry: ActiveInvocation, now: datetime) -> InvocationRow:
    """The row an active invocation without one is shown as at `now`: the one it will
    have, except that a staged attempt (its time not come, nothing sent) has not started:
    STARTING, no `started_time`, its log only "created". Its `created_time` is the one
    its row will keep: the attempt's time, as without staging its tick would have run then."""
    return row_of_active(project, job_id, entry, sent=not staged(entry, now))


def visible(stored: StoredJob) -> bool:
    """False for a job whose deletion has begun: the API shows it nowhere."""
    return not stored.deleted


class Queries:
    """Reads only; each method's :raises StoreError: (storage failing) goes without saying."""

    def __init__(self, store: JobStore, clock: Clock, tuning: Tuning = DEFAULT_TUNING):
        """`clock`: the engine's, for what depends on the time of the read (`_shown_row`)."""
        self.store, self.clock, self.tuning = store, clock, tuning

    def _settled(self, jobs: list[StoredJob]) -> list[StoredJob]:
        """The jobs as their next steps will see them: with a finish that was written
        only to its invocation's row applied (engine/deferred_finish.py), so a reader
        never sees an invocation RUNNING in its job and SUCCEEDED in its history. The
        rows that may hold one are read in one batch per page."""
        if not jobs:
            return jobs
        project = jobs[0].record.project
        keys = [(job.record.job_id, entry.invocation_id) for job in jobs for entry in job.record.active
                if may_hold_finish(entry)]
        rows = self.store.get_invocations(project, keys) if keys else {}
        settled = []
        for job in jobs:
            job_id = job.record.job_id
            record = settle_deferred(job.record, lambda invocation: rows.get((job_id, invocation)), self.tuning)
            settled.append(job if record is job.record else replace(job, record=record))
        return settled

    def projects(self) -> list[ProjectRow]:
        return self.store.list_projects()

    def project(self, project: str) -> ProjectRow:
        """:raises NotFound: the project has no config file."""
        row = self.store.get_project(project)
        if row is None:
            raise NotFound(f"project {project!r} not found")
        return row

    def job_count(self, project: str) -> int:
        """How many job rows the project has (hidden ones too: they count against its limit)."""
        return self.store.count_jobs(project)

    def job(self, project: str, job_id: str) -> StoredJob:
        """:raises NotFound: no such job, or its deletion has begun."""
        stored = self.find_job(project, job_id)
        if stored is None:
            raise NotFound(f"job {project}/{job_id} not found")
        return stored

    def find_job(self, project: str, job_id: str) -> StoredJob | None:
        """The job, or None where `job` would raise NotFound."""
        stored = self.store.get_job(project, job_id)
        return self._settled([stored])[0] if stored is not None and visible(stored) else None

    def stored_job(self, project: str, job_id: str) -> StoredJob | None:
        """The job's row even while its deletion is under way; for the use cases only."""
        return self.store.get_job(project, job_id)

    def jobs(self, project: str) -> list[StoredJob]:
        return self._settled([stored for stored in self.store.list_jobs(project) if visible(stored)])

    def jobs_page(self, project: str, page_size: int, page_token: str | None,
                  prefix: str = "") -> tuple[list[StoredJob], str | None]:
        """One page of the project's jobs in id order (fewer when some are hidden)."""
        page, token = self.store.list_jobs_page(project, page_size, page_token, prefix)
        return self._settled([job for job in page if visible(job)]), token

    def recent_invocations(self, jobs: list[StoredJob], count: int) -> dict[str, list[InvocationRow]]:
        """Each job's newest `count` invocations, newest first, without their logs,
        from one query for jobs of one project (and one read of the rows of those in
        flight that may have none yet)."""
        if not jobs:
            return {}
        project = jobs[0].record.project
        recent = self.store.recent_invocations(project, [job.record.job_id for job in jobs], count)
        wanted = []
        for job in jobs:
            rows = recent.get(job.record.job_id, [])
            wanted += _unlisted(job, rows, "", rows[-1].id if len(rows) >= count else None)
        for job_id, row in self._rows_of(project, wanted, ()):
            row.log = []
            recent[job_id] = sorted([*recent.get(job_id, []), row], key=_newest_first)[:count]
        return recent

    def last_invocation(self, job: StoredJob) -> InvocationRow | None:
        page, _ = self.invocations(job.record.project, job.record.job_id, 1, None, read=job)
        return page[0] if page else None

    def invocations(self, project: str, job_id: str, page_size: int, page_token: str | None,
                    statuses: tuple[str, ...] = (),
                    read: StoredJob | None = None) -> tuple[list[InvocationRow], str | None]:
        """Newest first, one page; only those of `statuses` when given. The token is the
        last id of the page, as the store's: ids sort newest first. `read`: the job as the
        caller read it just before (spares a read; a burst of triggers each asks)."""
        stored = read if read is not None else self.store.get_job(project, job_id)  # before the rows (module doc)
        if statuses:
            page, token = self.store.list_invocations_with_status(project, job_id, statuses, page_size, page_token)
        else:
            page, token = self.store.list_invocations(project, job_id, page_size, page_token)
        if stored is None or not stored.record.active:
            return page, token
        # The page holds every row in (page_token, its last id], or every row after the
        # token when it is the last page: an active entry in that range not on it has
        # no row (or, with a status filter, one of another status: read below).
        wanted = _unlisted(stored, page, page_token or "", page[-1].id if token is not None else None)
        extra = [row for _, row in self._rows_of(project, wanted, statuses)]
        if not extra:
            return page, token
        merged = sorted(page + extra, key=_newest_first)
        if len(merged) > page_size:
            merged = merged[:page_size]
            token = merged[-1].id
        return merged, token

    def _rows_of(self, project: str, wanted: list[tuple[str, ActiveInvocation]],
                 statuses: tuple[str, ...]) -> list[tuple[str, InvocationRow]]:
        """(job id, row) of active invocations: their own row if it was written meanwhile,
        else the one they will have; only those of `statuses` when given."""
        if not wanted:
            return []
        written = self.store.get_invocations(project, [(job_id, entry.invocation_id) for job_id, entry in wanted])
        rows, now = [], self.clock.now()
        for job_id, entry in wanted:
            row = written.get((job_id, entry.invocation_id)) or _shown_row(project, job_id, entry, now)
            if not statuses or row.status in statuses:
                rows.append((job_id, row))
        return rows

    def invocation(self, project: str, job_id: str, invocation_id: str) -> InvocationRow:
        """:raises NotFound: no such invocation (or it was cleaned up)."""
        row = self.find_invocation(project, job_id, invocation_id)
        if row is None:
            raise NotFound(f"invocation {invocation_id!r} of {project}/{job_id} not found")
        return row

    def find_invocation(self, project: str, job_id: str, invocation_id: str) -> InvocationRow | None:
        """The invocation's history record; for one started by its own tick whose first
        attempt has not ended, the record it will have (it lives in its job's record until
        then), so an async target's report or a reader does not miss it."""
        row = self.store.get_invocation(project, job_id, invocation_id)
        if row is not None:
            return row
        stored = self.find_job(project, job_id)
        entry = stored.record.find_active(invocation_id) if stored is not None else None
        return _shown_row(project, job_id, entry, self.clock.now()) if entry is not None else None

    def audit(self, project: str, job_id: str | None, page_size: int,
              page_token: str | None) -> tuple[list[AuditEntry], str | None]:
        """The project's operator actions (only the job's, given `job_id`), newest first, one
        page. Entries of a deleted job stay readable: they say who deleted it."""
        return self.store.list_audit(project, job_id, page_size, page_token)
