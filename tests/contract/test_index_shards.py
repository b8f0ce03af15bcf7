"""The Datastore layout of the times the housekeeping selects by: every occurrence writes
a job's watchdog time and an invocation's creation time, all of one aligned burst nearly
the same instant, and Firestore takes about 500 writes a second into an index whose
values increase with time. So those timestamps are unindexed, and the queries read
indexed strings spread over shards by a hash of the job (datastore_entities.py). On both
emulators, with production's shard count; entities of the layout before (the timestamp
indexed, no string) are still found, until their next write moves them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engine.adapters.cloud.datastore_entities import EPOCH, INDEX_SHARDS
from tests.contract import samples
from tests.contract.backends import TEST_INDEX_SHARDS, DatastoreBackend, FirestoreBackend
from tests.contract.samples import T0

SECOND = timedelta(seconds=1)


@pytest.fixture(params=["datastore", "firestore"])
def emulator(request):
    return request.getfixturevalue(request.param)


@pytest.fixture
def backend(request, emulator):
    """Production's shards, or the tests' fewer (quicker) where the count does not matter."""
    kind = FirestoreBackend if request.node.callspec.params["emulator"] == "firestore" else DatastoreBackend
    made = kind(emulator, index_shards=getattr(request, "param", INDEX_SHARDS))
    yield made
    made.close()


@pytest.fixture
def raw(emulator, monkeypatch):
    from google.cloud import datastore as gds

    monkeypatch.setenv("DATASTORE_EMULATOR_HOST", emulator.host)
    return gds.Client(project="sundial-test")


def _burst(store, jobs: int) -> list[str]:
    """`jobs` jobs due at one instant, each with a finished and a running invocation created then."""
    names = [f"job-{i}" for i in range(jobs)]
    for name in names:
        store.run_in_transaction(lambda tx, name=name: (
            tx.put_job(samples.job(job_id=name, watchdog_at=T0)),
            tx.put_invocation(samples.invocation(T0, job_id=name, status="SUCCEEDED")),
            tx.put_invocation(samples.invocation(T0 + SECOND, job_id=name, status="RUNNING", created=T0))))
    return names


def _all_due(store, limit: int, now=T0 + SECOND) -> list[str]:
    page, token = store.jobs_due_for_watchdog(now, limit)
    found = [job for _, job in page]
    while token is not None:
        page, token = store.jobs_due_for_watchdog(now, limit, token)
        found += [job for _, job in page]
    return found


@pytest.mark.parametrize("emulator", ["datastore"], indirect=True)  # 257 queries a page: the quicker emulator
def test_a_burst_s_times_are_unindexed_and_spread_over_shards_and_still_found(backend, raw):
    store = backend.store
    names = _burst(store, 12)
    jobs = raw.get_multi([raw.key("Job", f"proj/{name}") for name in names])
    assert all("watchdog_at" in job.exclude_from_indexes and "watchdog_key" not in job.exclude_from_indexes
               for job in jobs)
    # The same instant for every job, in many ranges of the index: one per job's shard.
    assert {job["watchdog_key"].split("/", 1)[1] for job in jobs} == {"2026-01-05T10:00:00.123456"}
    assert len({job["watchdog_key"].split("/", 1)[0] for job in jobs}) >= 10
    finished = raw.get(raw.key("Job", "proj/job-0", "Invocation", samples.invocation(T0, job_id="job-0").id))
    assert "created_time" in finished.exclude_from_indexes and finished["retention_key"].endswith("10:00:00.123456")
    # Every due job once (the paging over shards is the contract suite's, on fewer); none before its time.
    assert sorted(_all_due(store, 100)) == sorted(names)
    assert store.jobs_due_for_watchdog(T0, 100) == ([], None)
    # Retention takes the finished invocations only.
    assert store.delete_invocations_before(T0 + SECOND, 100) == 12
    assert [row.status for row in store.list_invocations("proj", "job-3", 10, None)[0]] == ["RUNNING"]


def _as_the_layout_before(raw, key, timestamp: str, string: str) -> None:
    """Rewrite an entity as the previous version stored it: the timestamp indexed, no string."""
    entity = raw.get(key)
    old = raw.entity(key, exclude_from_indexes=tuple(entity.exclude_from_indexes - {timestamp}))
    old.update({name: value for name, value in entity.items() if name != string})
    raw.put(old)


@pytest.mark.parametrize("backend", [TEST_INDEX_SHARDS], indirect=True)
def test_entities_of_the_layout_before_are_found_by_the_watchdog_and_retention_until_rewritten(backend, raw):
    store = backend.store
    _burst(store, 3)
    old_job = raw.key("Job", "proj/job-1")
    _as_the_layout_before(raw, old_job, "watchdog_at", "watchdog_key")
    finished_id = samples.invocation(T0, job_id="job-1").id
    running_id = samples.invocation(T0 + SECOND, job_id="job-1").id
    for invocation_id in (finished_id, running_id):
        _as_the_layout_before(raw, raw.key("Job", "proj/job-1", "Invocation", invocation_id),
                              "created_time", "retention_key")
    old_index = raw.query(kind="Job")
    old_index.add_filter("watchdog_at", ">", EPOCH)
    assert [entity.key.name for entity in old_index.fetch()] == ["proj/job-1"]

    assert sorted(_all_due(store, 1)) == ["job-0", "job-1", "job-2"]
    # A deferral moves the old job to the sharded index and out of the old one.
    assert store.defer_watchdog("proj", "job-1", T0 + 2 * SECOND)
    assert list(old_index.fetch()) == []
    assert "watchdog_key" in raw.get(old_job)
    assert sorted(_all_due(store, 1)) == ["job-0", "job-2"]
    assert sorted(_all_due(store, 1, T0 + 3 * SECOND)) == ["job-0", "job-1", "job-2"]

    # Progress rows (a fan-out's events) of finished invocations: the old one and a new one go.
    for name, invocation_id in (("job-0", samples.invocation(T0, job_id="job-0").id), ("job-1", finished_id)):
        store.run_in_transaction(lambda tx, name=name, invocation_id=invocation_id: tx.put_progress(
            "proj", name, invocation_id, "event/0", {"attempt": 1}))
    _as_the_layout_before(raw, raw.key("Job", "proj/job-1", "Invocation", finished_id, "Progress", "event/0"),
                          "scheduled_time", "retention_key")
    removed, token = store.delete_finished_progress(T0 + SECOND, 100)
    assert (removed, token) == (2, None)

    # The old finished invocation goes with the new ones; the old running one stays.
    assert store.delete_invocations_before(T0 + SECOND, 100) == 3
    assert [row.id for row in store.list_invocations("proj", "job-1", 10, None)[0]] == [running_id]
