"""Many API jobs put in one request (`POST /projects/{p}/jobs:batchPut`): each job is
created, replaced or refused on its own, by the same rules as a PUT of it alone
(engine/operations.py), and audited on its own.

All or nothing per job: a job's step, its audit entry and its tasks commit together,
and a refused job writes nothing. The jobs go in as few transactions as the store takes
(`JobStore.jobs_per_commit`: a couple of hundred on SQLite, one on Datastore, whose
transactions span few entity groups); a chunk whose writes exceed one commit's budget
(statemachine/budget.py) is split in two and tried again, as the config import does.

A job may name in `triggers` another job of the same batch. Storage failing stops the
batch: the jobs committed before it keep their results, the rest get the failure, and
sending the same batch again is safe (a PUT of an unchanged job writes nothing).
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Mapping

from engine.audit import UNKNOWN_ACTOR
from engine.changes import Applied, Change
from engine.errors import Busy, CommitTooLarge, Refused, StoreError
from engine.operations import Put, PutEntry, changes_nothing, put_change, stored_triggers
from engine.ports import ProjectRow, StoredJob
from engine.service import Engine
from statemachine.errors import SundialError

# What became of one job of a batch: the PUT's result, or the error that refused it.
Outcome = Put | SundialError


def put_jobs(engine: Engine, project: str, entries: dict[str, PutEntry], max_jobs: int,
             actor: str = UNKNOWN_ACTOR, *, row: ProjectRow | None = None,
             read: Mapping[str, StoredJob | None] | None = None) -> dict[str, Outcome]:
    """Put every job of `entries` (by job id); each one's outcome, by job id. `row`, `read`:
    the project's row and the jobs' rows (None: no row) as the caller read them just before,
    as for operations.put_job; a job not in `read` is read here.

    :raises NotFound: the project has no config file; nothing was written.
    """
    row = row if row is not None else engine.queries.project(project)
    read = read or {}
    room = max_jobs - engine.queries.job_count(project)
    in_store = stored_triggers(engine, project)

    def triggers_of(name: str) -> tuple[str, ...] | None:
        listed = entries.get(name)
        return listed.definition.trigger_targets if listed is not None else in_store(name)

    outcomes: dict[str, Outcome] = {}
    pending: list[tuple[Change, bool]] = []
    for job_id, entry in entries.items():
        stored = read[job_id] if job_id in read else engine.queries.stored_job(project, job_id)
        try:
            change, created = put_change(row, stored, job_id, entry, actor, stored is not None or room > 0,
                                         triggers_of, max_jobs)
        except Refused as refused:
            outcomes[job_id] = refused
            continue
        room -= stored is None
        if stored is not None and not created and changes_nothing(engine, stored, change):
            outcomes[job_id] = Put(stored, created=False)
            continue
        pending.append((change, created))
    _commit(engine, pending, outcomes)
    return outcomes


def _commit(engine: Engine, pending: list[tuple[Change, bool]], outcomes: dict[str, Outcome]) -> None:
    size = max(1, engine.changes.store.jobs_per_commit)
    for start in range(0, len(pending), size):
        try:
            _commit_admitted(engine, pending[start:start + size], outcomes)
        except StoreError as failure:
            for change, _ in pending[start:]:
                outcomes.setdefault(change.job_id, failure)  # (a split chunk's first half may have committed)
            return


def _commit_admitted(engine: Engine, chunk: list[tuple[Change, bool]], outcomes: dict[str, Outcome]) -> None:
    """The chunk's jobs that this process admits a writer of (engine/writers.py), in one
    transaction; a job with too many writers at work is refused as its PUT would be."""
    with ExitStack() as places:
        admitted = []
        for change, created in chunk:
            try:
                places.enter_context(engine.writers.admit(change.project, change.job_id))
            except Busy as busy:
                outcomes[change.job_id] = busy
                continue
            admitted.append((change, created))
        _apply(engine, admitted, outcomes)


def _apply(engine: Engine, admitted: list[tuple[Change, bool]], outcomes: dict[str, Outcome]) -> None:
    if not admitted:
        return
    try:
        results = engine.changes.apply_many([change for change, _ in admitted])
    except CommitTooLarge:
        if len(admitted) == 1:
            raise  # one job's step over the budget is a defect (statemachine/budget.py)
        half = len(admitted) // 2
        _apply(engine, admitted[:half], outcomes)
        _apply(engine, admitted[half:], outcomes)
        return
    for (change, created), result in zip(admitted, results):
        outcomes[change.job_id] = Put(result.job, created) if isinstance(result, Applied) else result
