"""A job's inbox: triggers (the API's, and other jobs' `triggers`) appended as rows of
their own, and folded into the job's record by one step that deletes them.

Why: every write of a job's record is a transaction on its one row. Firestore in
Datastore mode locks the entity for each, and a pile of waiters times out together
(50 triggers of one job at once: 49 failed after 90 s on its emulator). An append
writes only its own row, keyed by the trigger's idempotency key (the API request's
id, or the upstream invocation's), so appends never wait for one another or for the
job's steps; the same key again finds its row and writes nothing.

Each append also enqueues a named `inbox` task, due at the end of the grain
(INBOX_GRAIN) the append falls in, so that one task folds all of a burst's rows in a
few commits (FOLD_ROWS a commit) instead of each trigger writing the record. A fold
that found rows enqueues one more for the grain after it: a row whose commit ended
after that grain's task had read would otherwise wait for the next append.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from engine.audit import Audit, log_entry, new_entry
from engine.changes import Applied, JobChanges, Refusal
from engine.ports import AuditEntry, Task, Transaction
from engine.recording import task_name
from statemachine import events as ev
from statemachine.durations import UTC
from statemachine.vocabulary import TaskKind

# The width of one fold task's window. Longer batches more triggers into one write of
# the record; shorter lets a trigger start sooner. A person's trigger is folded at once
# when the job has few writers (engine/writers.py), so this delays bursts only.
INBOX_GRAIN = timedelta(milliseconds=250)
# Rows folded in one commit: each may write an invocation row and delete its own, so
# 100 stay well inside one commit's 500 entities (statemachine/budget.py).
FOLD_ROWS = 100
# Rows an API request folds itself (engine/operations.py): its answer waits for them,
# so a few; the job's inbox task folds the rest of a burst.
INLINE_FOLD_ROWS = 8
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Pending:
    """One trigger waiting in a job's inbox, as `ev.ManualTrigger` will carry it."""

    request_id: str
    trigger: str
    at: datetime
    # A fan-in report (statemachine/fanin.py): the upstream job and its invocation's status.
    upstream: str | None = None
    status: str = ""

    @property
    def key(self) -> str:
        """The row's key: a second append of one trigger finds its row."""
        return f"{self.trigger}/{self.request_id}"

    def to_dict(self) -> dict[str, str]:
        # isoformat, not RFC 3339 in milliseconds: the step sees the time the trigger had.
        row = {"request": self.request_id, "trigger": self.trigger, "at": self.at.isoformat()}
        if self.upstream is not None:  # only a report's row has them
            row.update(upstream=self.upstream, status=self.status)
        return row

    @classmethod
    def from_dict(cls, value: dict[str, str]) -> Pending:
        return cls(value["request"], value["trigger"], datetime.fromisoformat(value["at"]),
                   value.get("upstream"), value.get("status", ""))

    def event(self) -> ev.ManualTrigger:
        return ev.ManualTrigger(self.request_id, self.trigger, self.at, upstream=self.upstream,
                                upstream_status=self.status)


def inbox_task(project: str, job_id: str, now: datetime) -> Task:
    """The fold of the job's inbox for the grain `now` falls in, due at its end."""
    grains = math.floor((now - _EPOCH) / INBOX_GRAIN)
    due = _EPOCH + (grains + 1) * INBOX_GRAIN
    return Task(task_name(TaskKind.INBOX, project, job_id, grains), TaskKind.INBOX,
                {"project": project, "job": job_id}, due)


class Inbox:
    def __init__(self, changes: JobChanges):
        self.changes = changes

    def append(self, project: str, job_id: str, pending: Pending, audit: Audit | None = None) -> Pending:
        """Add the trigger to the job's inbox, with its fold task, in a transaction that
        touches neither the job's record nor any other trigger's row. Returns the
        trigger as pending: a row of the same key pending already is kept as it was
        (its time, hence its invocation's id), and only the fold task is enqueued again.

        :raises StoreError: nothing was written.
        """
        def body(tx: Transaction) -> tuple[Pending, AuditEntry | None]:
            earlier = tx.get_inbox(project, job_id, pending.key)
            now = self.changes.clock.now()
            # Also for a row pending already: a client's retry re-arms a fold whose task was lost.
            tx.enqueue(inbox_task(project, job_id, now))
            if earlier is not None:
                return Pending.from_dict(earlier), None
            tx.put_inbox(project, job_id, pending.key, pending.to_dict())
            entry = new_entry(audit, project, job_id, now) if audit is not None else None
            if entry is not None:
                tx.put_audit(entry)
            return pending, entry

        kept, entry = self.changes.write(body)
        if entry is not None:
            log_entry(entry)
        return kept

    def fold(self, project: str, job_id: str, most: int = FOLD_ROWS,
             due: datetime | None = None) -> list[Applied | Refusal]:
        """Step the job with up to `most` pending triggers, oldest first, deleting
        each row in the same commit (so each is stepped once). A trigger the job
        refuses (paused meanwhile), or the rows of a job that is gone, are dropped.

        `due`: the time of the inbox task that folds (its follow-up, for the rows it
        leaves, is named by a later grain than its own even when the clock lags it).

        :raises StoreError: nothing was committed; the rows stay for the next fold.
        """
        def take(tx: Transaction) -> list[ev.ManualTrigger]:
            rows = tx.list_inbox(project, job_id, most)
            for key in rows:
                tx.delete_inbox(project, job_id, key)
            if rows:
                now = self.changes.clock.now()
                tx.enqueue(inbox_task(project, job_id, now if due is None else max(now, due)))
            waiting = sorted((Pending.from_dict(value) for value in rows.values()), key=lambda p: (p.at, p.key))
            return [pending.event() for pending in waiting]

        return self.changes.fold(project, job_id, take)
