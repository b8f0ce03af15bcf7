"""Many API jobs put at once (engine/batch_put.py) on every backend: in chunks of the
store's `jobs_per_commit`, each job created, replaced or refused on its own, each audited,
and every created job firing at its time."""

from __future__ import annotations

from datetime import timedelta

import pytest

from config.loader import parse_job_entry
from engine.batch_put import put_jobs
from engine.errors import Refused, StoreError
from engine.operations import Put, PutEntry
from engine.ports import ProjectRow
from tests.contract.backends import MemoryBackend, SqliteBackend
from tests.contract.test_api_operations import ApiScenario, stamp
from tests.engine.harness import START


def entry(job_id: str, **fields) -> PutEntry:
    job = parse_job_entry({"target": {"noop": {}}, **fields}, {}, job_id)
    return PutEntry(job.policy, job.definition, job.disabled)


def put(api, entries: dict[str, PutEntry], max_jobs: int = 100) -> dict:
    return put_jobs(api.engine, "proj", entries, max_jobs, actor="user:batch@example.com")


def test_a_batch_creates_replaces_and_refuses_each_job_on_its_own(backend):
    api = ApiScenario(backend)
    api.engine.changes.write(lambda tx: tx.put_project(ProjectRow("proj", settings={"config_jobs": ["owned"]})))
    backend.store.jobs_per_commit = 2  # three chunks for five jobs
    first = put(api, {f"j{i}": entry(f"j{i}", at=[stamp(10 + i)]) for i in range(4)})
    assert all(isinstance(outcome, Put) and outcome.created for outcome in first.values())
    outcomes = put(api, {"j0": entry("j0", at=[stamp(10)]),  # unchanged
                         "j1": entry("j1", at=[stamp(30)]),  # replaced
                         "owned": entry("owned", at=[stamp(10)]),  # the config file's
                         "new": entry("new", at=[stamp(40)]),  # the fifth job: the last that fits
                         "one-more": entry("one-more", at=[stamp(40)])}, max_jobs=5)
    assert not outcomes["j0"].created and not outcomes["j1"].created and outcomes["new"].created
    assert [outcomes[name].code for name in ("owned", "one-more")] == ["ALREADY_EXISTS", "FAILED_PRECONDITION"]
    loops = put(api, {"loop": entry("loop", schedule="triggered", triggers=["loop-2"]),
                      "loop-2": entry("loop-2", schedule="triggered", triggers=["loop"])})
    assert [(type(o), o.code) for o in loops.values()] == [(Refused, "INVALID_ARGUMENT")] * 2
    api.run_until(START + timedelta(minutes=1))
    assert sorted((r.job_id, r.scheduled_time) for r in api.target.requests) == [
        ("j0", START + timedelta(seconds=10)), ("j1", START + timedelta(seconds=30)),
        ("j2", START + timedelta(seconds=12)), ("j3", START + timedelta(seconds=13)),
        ("new", START + timedelta(seconds=40))]
    entries, _ = api.engine.queries.audit("proj", None, 100, None)
    assert sorted(e.job_id for e in entries) == ["j0", "j1", "j1", "j2", "j3", "new"]  # j0's unchanged put: none
    assert {e.actor for e in entries} == {"user:batch@example.com"}


def test_a_chunk_past_one_commits_budget_is_split_and_every_job_created(backend):
    if not isinstance(backend, (SqliteBackend, MemoryBackend)):
        pytest.skip("a transaction of hundreds of jobs is the embedded stores' (Datastore takes one job a commit)")
    api = ApiScenario(backend)
    backend.store.jobs_per_commit = 1_000  # all in one chunk: more entities than one commit takes
    commits = []
    apply_many = api.engine.changes.apply_many
    api.engine.changes.apply_many = lambda changes: commits.append(len(changes)) or apply_many(changes)
    outcomes = put(api, {f"r{i}": entry(f"r{i}", at=[stamp(10)]) for i in range(400)}, max_jobs=1_000)
    assert all(isinstance(outcome, Put) and outcome.created for outcome in outcomes.values())
    assert commits[0] == 400 and len(commits) > 1  # refused whole, then split
    assert len(api.engine.queries.jobs("proj")) == 400


def test_storage_failing_stops_the_batch_and_keeps_what_committed_before(backend):
    api = ApiScenario(backend)
    backend.store.jobs_per_commit = 2
    apply_many, calls = api.engine.changes.apply_many, []

    def failing_second(changes):
        calls.append(changes)
        if len(calls) == 2:
            raise StoreError("disk full")
        return apply_many(changes)

    api.engine.changes.apply_many = failing_second
    outcomes = put(api, {f"j{i}": entry(f"j{i}", at=[stamp(10)]) for i in range(5)})
    assert [isinstance(outcomes[f"j{i}"], Put) for i in range(5)] == [True, True, False, False, False]
    assert all(isinstance(outcomes[f"j{i}"], StoreError) for i in range(2, 5)) and len(calls) == 2
    assert [job.record.job_id for job in api.engine.queries.jobs("proj")] == ["j0", "j1"]
    api.engine.changes.apply_many = apply_many
    again = put(api, {f"j{i}": entry(f"j{i}", at=[stamp(10)]) for i in range(5)})  # sent again: safe
    assert [outcome.created for outcome in again.values()] == [False, False, True, True, True]
