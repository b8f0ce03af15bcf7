"""What must hold after every step of a simulation, and at its end.

Checked from what each commit wrote (`on_commit`, called by the store once the commit
landed) and from each send (`on_send`, called by the target as the request arrives):
- one occurrence, one invocation: at most one invocation per (job, scheduled time)
  of the schedule;
- `overlap: skip`: never two invocations of the job active at once, nor a send for one
  while another is active;
- nothing is sent that is not committed first: the stored job holds the invocation
  active, at the attempt being sent, started and not settled;
- each issue of an attempt (its fencing epoch) is sent once: a second send means a
  process sent after its leases ran out, or an attempt was issued again while live;
- an invocation succeeds only on the answer of its latest issue (a result fenced off
  by a newer issue of its attempt is never recorded);
- history is never rewritten: a finished invocation keeps its status, reason, end
  and scheduled time;
- a job's record stays within its size bound;
and at the end (`check_end`), once the faults stopped: liveness, every invocation
ended and every due occurrence of the quiet period has an invocation or a skip.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import NoReturn

from engine.adapters.memory.tables import Writes
from engine.ports import DeliveryRequest, InvocationRow, JobStore
from statemachine.policy import Overlap
from statemachine.record import JobRecord
from statemachine.vocabulary import ACTIVE_STATUSES

ACTIVE = frozenset(status.value for status in ACTIVE_STATUSES)
SCHEDULED_TRIGGERS = frozenset({"schedule", "catchup"})
TARGET_FAILURES = frozenset({"http 500", "refused"})  # the simulated target's failed answers
RECORD_BOUND = 64 * 1024  # bytes of a job's stored record (compact JSON), far below an entity's 1 MiB


class Violation(BaseException):
    """An invariant broke: the message says which, and where. A BaseException, so
    that no `except Exception` in the engine (a target that raises is a bug it
    survives) hides it; `violations` keeps it anyway."""


@dataclass(frozen=True)
class _Seen:
    status: str
    reason: str
    finished: datetime | None
    scheduled: datetime
    trigger: str

    @property
    def finished_for_good(self) -> bool:
        return self.status not in ACTIVE


@dataclass
class Invariants:
    store: JobStore | None = None
    rows: dict[tuple[str, str, str], _Seen] = field(default_factory=dict)
    occurrences: dict[tuple[str, str, datetime], str] = field(default_factory=dict)
    records: dict[tuple[str, str], JobRecord] = field(default_factory=dict)
    skip_jobs: set[tuple[str, str]] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)
    sent: set[tuple[str, str, str, int, int, int]] = field(default_factory=set)
    # The latest answer to each invocation: (its attempt, the answer).
    answers: dict[tuple[str, str, str], tuple[int, str]] = field(default_factory=dict)

    def fail(self, message: str) -> NoReturn:
        self.violations.append(message)
        raise Violation(message)

    def on_commit(self, writes: Writes, sizes: dict[tuple[str, str], int]) -> None:
        """`sizes`: each job record's size in bytes, as the store measured it."""
        for (project, job_id), job in writes.jobs.items():
            self._job_written(project, job_id, None if job is None else job.record, sizes.get((project, job_id), 0))
        for key, row in writes.invocations.items():
            self._row_written(key, row)

    def _job_written(self, project: str, job_id: str, record: JobRecord | None, size: int) -> None:
        if record is None:
            self.skip_jobs.discard((project, job_id))
            self.records.pop((project, job_id), None)
            return
        before = self.records.get((project, job_id))
        if before is not None:
            self._accepted_kept(before, record)
        self.records[(project, job_id)] = record
        skip = record.live_policy.overlap == Overlap.SKIP
        (self.skip_jobs.add if skip else self.skip_jobs.discard)((project, job_id))
        if skip and len(record.active) > 1:
            self.fail(f"overlap skip: {project}/{job_id} has {len(record.active)} active invocations:"
                      f" {[entry.invocation_id for entry in record.active]}")
        for entry in record.active:
            if entry.trigger in SCHEDULED_TRIGGERS:
                self._occurrence(project, job_id, entry.scheduled_time, entry.invocation_id)
        if size > RECORD_BOUND:
            self.fail(f"record size: {project}/{job_id} is {size} bytes, over {RECORD_BOUND}")

    def _accepted_kept(self, before: JobRecord, after: JobRecord) -> None:
        """An attempt whose 202 is recorded waits for its completion report (or the
        deadline, an abort, a pause): no other answer moves it to a next attempt."""
        for entry in before.active:
            later = after.find_active(entry.invocation_id)
            if later is None or not entry.accepted_mask & 1 or later.attempts[0] == entry.attempts[0]:
                continue
            key = (after.project, after.job_id, entry.invocation_id)
            if self.answers.get(key, (0, ""))[1] != "completed failed":
                self.fail(f"accepted attempt {entry.attempts[0]} of {'/'.join(key)} moved on to attempt"
                          f" {later.attempts[0]} without its completion report")

    def _occurrence(self, project: str, job_id: str, at: datetime, invocation_id: str) -> None:
        other = self.occurrences.setdefault((project, job_id, at), invocation_id)
        if other != invocation_id:
            self.fail(f"two invocations of one occurrence {project}/{job_id} at {at.isoformat()}:"
                      f" {other} and {invocation_id}")

    def _row_written(self, key: tuple[str, str, str], row: InvocationRow) -> None:
        seen = _Seen(row.status, row.reason, row.finished_time, row.scheduled_time, row.trigger)
        before = self.rows.get(key)
        if before is not None and before.finished_for_good and before != seen:
            self.fail(f"history rewritten: {'/'.join(key)} was {before}, now {seen}")
        if before is None and row.trigger in SCHEDULED_TRIGGERS:
            self._occurrence(key[0], key[1], row.scheduled_time, row.id)
        if before is None or before.status != row.status:
            self._outcome_fits_answer(key, row)
        self.rows[key] = seen

    def on_send(self, request: DeliveryRequest) -> None:
        """The attempt being sent is committed: its job's stored record holds the
        invocation active, at this attempt, started and not yet done."""
        assert self.store is not None
        where = f"{request.project}/{request.job_id} {request.invocation_id} attempt {request.attempt}"
        stored = self.store.get_job(request.project, request.job_id)
        entry = None if stored is None else stored.record.find_active(request.invocation_id)
        if entry is None:
            self.fail(f"send before commit: {where}: the stored job has no such active invocation")
        bit = 1 << request.event_index
        if entry.attempts[request.event_index] != request.attempt or not entry.started_mask & bit:
            self.fail(f"send of an attempt not committed: {where}: stored attempts {entry.attempts},"
                      f" started {entry.started_mask:b}")
        if entry.done_mask & bit:
            self.fail(f"send of a settled attempt: {where}")
        issue = (request.project, request.job_id, request.invocation_id, request.event_index, request.attempt,
                 entry.epoch)
        if issue in self.sent:
            self.fail(f"two sends of one issue of an attempt: {where}, epoch {entry.epoch}")
        self.sent.add(issue)

    def _outcome_fits_answer(self, key: tuple[str, str, str], row: InvocationRow) -> None:
        """An invocation ends on its latest issue's answer: SUCCEEDED on a 200 (or a
        completion), FAILED for a target's failure only if no accepted attempt waits."""
        answer = self.answers.get(key, (0, "ok"))[1]
        if row.status == "SUCCEEDED" and answer != "ok" or \
                row.status == "FAILED" and row.reason in TARGET_FAILURES and answer.startswith("202"):
            self.fail(f"{row.status} on a stale answer: {'/'.join(key)} ({row.reason}): the latest issue's"
                      f" answer is {answer!r}")

    def on_answer(self, request: DeliveryRequest, answer: str) -> None:
        """What the target answered (or an async completion reported) last. (An answer
        may come back too late to count: a 202 does not oblige the engine to wait.)"""
        self.answers[(request.project, request.job_id, request.invocation_id)] = (request.attempt, answer)

    def check_end(self, due: dict[tuple[str, str], list[datetime]], cutoff: datetime) -> None:
        """Liveness: no invocation scheduled before `cutoff` still active, and each time
        in `due` (per job) has an invocation (finished, or skipped with its reason)."""
        for (project, job_id, invocation_id), seen in self.rows.items():
            if not seen.finished_for_good and seen.scheduled < cutoff:
                self.fail(f"liveness: {project}/{job_id} {invocation_id} still {seen.status} at the end")
            elif seen.status == "SKIPPED" and not seen.reason:
                self.fail(f"skipped without a reason: {project}/{job_id} {invocation_id}")
        for (project, job_id), record in self.records.items():
            stuck = [entry.invocation_id for entry in record.active if entry.scheduled_time < cutoff]
            if stuck:
                self.fail(f"liveness: {project}/{job_id} still has {stuck} active at the end")
        for (project, job_id), times in due.items():
            for at in times:
                if (project, job_id, at) not in self.occurrences:
                    self.fail(f"liveness: {project}/{job_id} occurrence {at.isoformat()} never handled")
