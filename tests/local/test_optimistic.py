"""Optimistic transactions on the SQLite store: the body runs outside the write lock,
and a row that changed under it makes it run again, never commit on stale reads."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest

from engine.adapters.local.commits import GroupCommits, OptimisticCommits
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.ports import InvocationRow, ProjectRow, StoredJob, Task
from statemachine.definition import JobDefinition
from statemachine.durations import UTC
from statemachine.record import new_record

AT = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)


def _job(generation: int = 0) -> StoredJob:
    record = replace(new_record("p", "j"), generation=generation)
    return StoredJob(record, JobDefinition(id="j", schedule="* * * * * ?", target={"noop": {}}), "config")


@pytest.fixture
def woken() -> list[datetime]:
    """The ETAs the store told of, after commits that enqueued tasks."""
    return []


@pytest.fixture(params=[OptimisticCommits, GroupCommits], ids=["alone", "grouped"])
def store(tmp_path, woken, request):
    made = SqliteJobStore(tmp_path / "s.db", request.param, on_enqueue=woken.append)
    made.run_in_transaction(lambda tx: tx.put_job(_job()))
    return made


def test_writes_commit_together_and_the_body_reads_its_own_writes(store, woken):
    def body(tx):
        tx.put_job(_job(5))
        assert tx.get_job("p", "j").record.generation == 5
        row = InvocationRow("p", "j", "inv-1", "STARTING", AT, "schedule")
        tx.put_invocation(row)
        row.log.append({"message": "not put again"})
        assert tx.get_invocation("p", "j", "inv-1").log == []
        tx.enqueue(Task("tick/p/j/1", "tick", {"project": "p", "job": "j"}, AT))
        tx.put_project(ProjectRow("p", config_hash="h"))
        assert tx.get_project("p").config_hash == "h"
        return "done"

    assert store.run_in_transaction(body) == "done"
    assert store.get_job("p", "j").record.generation == 5
    assert store.get_invocation("p", "j", "inv-1").status == "STARTING"
    assert store.get_project("p").config_hash == "h"
    assert store.connection().execute("SELECT name FROM tasks").fetchall() == [("tick/p/j/1",)]
    assert woken == [AT]


def test_a_row_changed_after_the_body_read_it_makes_the_body_run_again(store):
    runs = []

    def body(tx):
        seen = tx.get_job("p", "j").record.generation
        runs.append(seen)
        if len(runs) == 1:  # another writer commits between our read and our commit
            with store.transaction() as other:
                other.put_job(_job(10))
        tx.put_job(_job(seen + 1))

    store.run_in_transaction(body)
    assert runs == [0, 10]
    assert store.get_job("p", "j").record.generation == 11  # never 1: no lost update


def test_a_row_that_appeared_after_the_body_saw_none_counts_as_a_change(store):
    runs = []

    def body(tx):
        runs.append(tx.get_invocation("p", "j", "inv-9"))
        if len(runs) == 1:
            with store.transaction() as other:
                other.put_invocation(InvocationRow("p", "j", "inv-9", "SKIPPED", AT, "schedule"))
        if runs[-1] is None:
            tx.put_invocation(InvocationRow("p", "j", "inv-9", "STARTING", AT, "schedule"))

    store.run_in_transaction(body)
    assert runs[0] is None and runs[1].status == "SKIPPED"
    assert store.get_invocation("p", "j", "inv-9").status == "SKIPPED"


def test_a_body_that_keeps_losing_runs_under_the_lock_at_last(store):
    runs = []

    def body(tx):
        runs.append(tx.get_job("p", "j").record.generation)
        if len(runs) <= 3:  # each optimistic try loses to another writer
            with store.transaction() as other:
                other.put_job(_job(len(runs)))
        tx.put_job(_job(100))

    store.run_in_transaction(body)
    assert len(runs) == 4  # three optimistic tries, then once inside BEGIN IMMEDIATE
    assert store.get_job("p", "j").record.generation == 100


def test_a_body_using_the_connection_runs_inside_a_real_transaction(store):
    def body(tx):
        tx.conn.execute("INSERT INTO meta (key, value) VALUES ('k', 'v')")
        tx.put_job(_job(3))

    store.run_in_transaction(body)
    assert store.connection().execute("SELECT value FROM meta WHERE key = 'k'").fetchone() == ("v",)
    assert store.get_job("p", "j").record.generation == 3


def test_a_body_that_raises_writes_nothing(store):
    def body(tx):
        tx.put_job(_job(7))
        tx.delete_project("p")
        raise KeyError("no")

    with pytest.raises(KeyError):
        store.run_in_transaction(body)
    assert store.get_job("p", "j").record.generation == 0
