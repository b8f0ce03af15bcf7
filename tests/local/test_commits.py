"""The SQLite store's commit strategy, chosen once when the store is built, its
decoded-record cache, and the backoffs of the local dispatcher."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from app.bootstrap import build, build_local
from config.settings import from_environment
from engine.adapters.local.commits import LockedCommits
from engine.adapters.local.sqlite_queue import SqliteTaskQueue
from engine.adapters.local.sqlite_rows import RecordCache, SqliteTransaction
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.ports import StoredJob, Task
from engine.retry import RECORD_BACKOFF, TASK_BACKOFF
from statemachine.definition import JobDefinition
from statemachine.durations import UTC
from statemachine.record import new_record
from statemachine.vocabulary import TaskKind


def _job() -> StoredJob:
    return StoredJob(new_record("p", "j"), JobDefinition(id="j", schedule="* * * * * ?", target={"noop": {}}))


def test_the_strategy_given_at_construction_runs_every_body(tmp_path):
    store = SqliteJobStore(tmp_path / "s.db", LockedCommits)
    seen = store.run_in_transaction(lambda tx: (tx.put_job(_job()), type(tx))[1])
    assert seen is SqliteTransaction
    assert store.get_job("p", "j") is not None


@pytest.mark.parametrize("processes", ["1", "2"])
def test_the_composition_root_locks_whatever_the_processes(tmp_path, processes):
    (tmp_path / "configs").mkdir()
    settings = from_environment({"SUNDIAL_PROCESSES": processes, "SUNDIAL_DB": str(tmp_path / "db"),
                                 "SUNDIAL_CONFIG_DIR": str(tmp_path / "configs"),
                                 "SUNDIAL_TASK_SECRET": "secret"})
    store = build_local(settings).engine.queries.store
    assert store.run_in_transaction(type) is SqliteTransaction


def test_a_stores_transactions_share_its_record_cache_and_no_other_store_does(tmp_path):
    store = SqliteJobStore(tmp_path / "s.db")
    job = _job()
    store.run_in_transaction(lambda tx: tx.put_job(job))
    # Read back as the very record written: decoded from this store's cache.
    assert store.run_in_transaction(lambda tx: tx.get_job("p", "j")).record is job.record
    assert store.get_job("p", "j").record is job.record
    read = SqliteJobStore(tmp_path / "s.db").get_job("p", "j").record
    assert read == job.record and read is not job.record  # another store decodes its own


def test_a_task_whose_handler_raised_waits_half_a_second_doubling_to_a_minute():
    waits = [TASK_BACKOFF.after(attempts).total_seconds() for attempts in (1, 2, 3, 7, 8, 9, 50)]
    assert waits == [0.5, 1.0, 2.0, 32.0, 60.0, 60.0, 60.0]


def test_a_result_not_committed_is_tried_again_after_half_a_second_then_every_second():
    waits = [RECORD_BACKOFF.after(failures) for failures in range(1, 7)]
    assert waits == [timedelta(seconds=s) for s in (0.5, 1.0, 1.0, 1.0, 1.0, 1.0)]


def test_a_definition_read_back_is_the_one_written_and_is_not_encoded_again(tmp_path, monkeypatch):
    store = SqliteJobStore(tmp_path / "s.db")
    job = _job()
    store.run_in_transaction(lambda tx: tx.put_job(job))
    read = store.get_job("p", "j")
    assert read.definition is job.definition  # decoded once, from this store's cache
    encoded = []
    real_to_dict = type(job.definition).to_dict
    monkeypatch.setattr(type(job.definition), "to_dict", lambda self: encoded.append(self) or real_to_dict(self))
    store.run_in_transaction(lambda tx: tx.put_job(read))
    assert encoded == []
    assert SqliteJobStore(tmp_path / "s.db").get_job("p", "j").definition == job.definition  # another store decodes


def test_the_definition_cache_stays_bounded_when_many_objects_share_a_few_texts():
    # A job switched back and forth between two definitions writes a new object each
    # time; the cache of their texts must not keep every one of them.
    cache = RecordCache()
    for i in range(3 * RecordCache.LIMIT):
        cache.definition_text(JobDefinition(id="j", schedule="every 1m", target={"noop": {}}, disabled=bool(i % 2)))
    assert len(cache._definition_texts) <= RecordCache.LIMIT


@pytest.mark.parametrize("children", [False, True])
def test_only_serve_asks_for_the_dispatcher_children(tmp_path, children):
    (tmp_path / "configs").mkdir()
    settings = from_environment({"SUNDIAL_PROCESSES": "2", "SUNDIAL_DB": str(tmp_path / "db"),
                                 "SUNDIAL_CONFIG_DIR": str(tmp_path / "configs"), "SUNDIAL_TASK_SECRET": "s"})
    runtime = build(settings, children=children)  # the WSGI app builds without them
    assert (runtime.children is not None) is children


def test_a_task_of_a_kind_this_version_does_not_know_is_leased_as_it_is(tmp_path):
    # Leasing it must not fail the whole batch: its handler logs and drops just that task.
    store = SqliteJobStore(tmp_path / "q.db")
    queue = SqliteTaskQueue(store)
    with store.transaction() as tx:
        tx.enqueue(Task("known", TaskKind.TRIGGER, {}, datetime.now(UTC)))
        tx.enqueue(Task("unknown", "from-a-newer-version", {}, datetime.now(UTC)))
    leased = queue.lease_due(datetime.now(UTC) + timedelta(seconds=1), 10, timedelta(seconds=30))
    assert sorted(str(item.task.kind) for item in leased) == ["from-a-newer-version", "trigger"]


@pytest.mark.parametrize("cores", [1, 2, 8])
def test_serve_defaults_to_one_process_whatever_the_cores(monkeypatch, tmp_path, cores):
    from config import settings as settings_module

    monkeypatch.setattr(settings_module.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    env = {"SUNDIAL_DB": str(tmp_path / "db"), "SUNDIAL_TASK_SECRET": "secret"}
    assert from_environment(env).processes == 1
    assert from_environment({**env, "SUNDIAL_PROCESSES": "2"}).processes == 2
