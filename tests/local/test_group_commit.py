"""Group commit: many threads' transactions share commits, and none is lost, doubled
or committed on stale reads."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime

import pytest

from engine.adapters.local.commits import GroupCommits
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.ports import InvocationRow, StoredJob
from statemachine.definition import JobDefinition
from statemachine.durations import UTC
from statemachine.record import new_record

AT = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)


class CountingStore(SqliteJobStore):
    """The real store; counts its SQLite transactions."""

    def __init__(self, path):
        self.commits = 0
        super().__init__(path, GroupCommits)

    @contextmanager
    def transaction(self):
        with super().transaction() as tx:
            yield tx
        self.commits += 1


def _job(job_id: str, generation: int = 0) -> StoredJob:
    definition = JobDefinition(id=job_id, schedule="triggered", target={"noop": {}})
    return StoredJob(replace(new_record("p", job_id), generation=generation), definition, "config")


def _bump(store, job_id: str) -> None:
    def body(tx):
        job = tx.get_job("p", job_id)
        tx.put_job(_job(job_id, job.record.generation + 1))
    store.run_in_transaction(body)


def _together(threads: int, work) -> None:
    barrier = threading.Barrier(threads)

    def run(i):
        barrier.wait()
        work(i)
    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)


def test_threads_share_commits_and_every_write_lands(tmp_path):
    store = CountingStore(tmp_path / "s.db")
    for i in range(16):
        store.run_in_transaction(lambda tx, i=i: tx.put_job(_job(f"j{i}")))
    store.commits = 0
    _together(16, lambda i: [_bump(store, f"j{i}") for _ in range(50)])
    assert [store.get_job("p", f"j{i}").record.generation for i in range(16)] == [50] * 16
    assert store.commits < 16 * 50  # some commits carried several threads' writes


def test_no_update_is_lost_when_threads_change_the_same_row(tmp_path):
    store = SqliteJobStore(tmp_path / "s.db", GroupCommits)
    store.run_in_transaction(lambda tx: tx.put_job(_job("shared")))
    _together(8, lambda i: [_bump(store, "shared") for _ in range(40)])
    assert store.get_job("p", "shared").record.generation == 8 * 40


def test_one_failing_entry_fails_alone(tmp_path):
    store = SqliteJobStore(tmp_path / "s.db", GroupCommits)
    store.run_in_transaction(lambda tx: tx.put_job(_job("ok")))
    broken = InvocationRow("p", "ok", "inv-1", "STARTING", None, "schedule")  # no scheduled time

    with pytest.raises(AttributeError):  # raised when its row is encoded, at commit
        store.run_in_transaction(lambda tx: (tx.put_job(_job("ok", 5)), tx.put_invocation(broken)))
    assert store.get_job("p", "ok").record.generation == 0  # its savepoint was rolled back
    _bump(store, "ok")
    assert store.get_job("p", "ok").record.generation == 1
