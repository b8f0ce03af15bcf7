"""The JobStore port, the same on every backend: rows round-trip, queries select
and order as the port says."""

from __future__ import annotations

from datetime import timedelta

from engine.ports import ProjectRow
from statemachine.definition import JobDefinition
from statemachine.record_form import record_to_dict
from statemachine.shards import shard_of
from tests.contract import samples
from tests.contract.samples import T0


def put(store, *rows) -> None:
    def body(tx):
        for row in rows:
            if hasattr(row, "record"):
                tx.put_job(row)
            elif isinstance(row, ProjectRow):
                tx.put_project(row)
            else:
                tx.put_invocation(row)

    store.run_in_transaction(body)


def test_a_job_round_trips_intact(store):
    job = samples.job(watchdog_at=T0 + timedelta(seconds=30))
    put(store, job)
    for loaded in (store.get_job("proj", "job"), store.run_in_transaction(lambda tx: tx.get_job("proj", "job"))):
        assert loaded == job
        assert record_to_dict(loaded.record) == record_to_dict(job.record)


def test_a_missing_job_is_none(store):
    assert store.get_job("proj", "nope") is None
    assert store.run_in_transaction(lambda tx: tx.get_job("proj", "nope")) is None


def test_put_job_replaces_the_whole_row(store):
    put(store, samples.job())
    replacement = samples.job()
    replacement.definition = JobDefinition(id="job", schedule="triggered", target={"noop": {}})
    replacement.source, replacement.config_error, replacement.deleted = "config", "", False
    put(store, replacement)
    assert store.get_job("proj", "job") == replacement


def test_list_jobs_of_one_project_in_id_order(store):
    put(store, samples.job("proj", "b"), samples.job("proj", "a.x"), samples.job("other", "c"),
        samples.job("proj-2", "d"))
    assert [j.record.job_id for j in store.list_jobs("proj")] == ["a.x", "b"]
    assert store.list_jobs("nobody") == []


def test_an_invocation_round_trips_intact(store):
    row = samples.invocation(T0, status="FAILED")
    put(store, row)
    assert store.get_invocation("proj", "job", row.id) == row
    assert store.run_in_transaction(lambda tx: tx.get_invocation("proj", "job", row.id)) == row
    assert store.get_invocation("proj", "job", "nope") is None
    assert store.get_invocation("proj", "other-job", row.id) is None


def test_several_invocations_of_several_jobs_are_read_in_one_call(store):
    one, two = samples.invocation(T0, status="FAILED"), samples.invocation(T0, job_id="other-job")
    elsewhere = samples.invocation(T0, project="elsewhere")
    put(store, one, two, elsewhere)
    keys = [("job", one.id), ("other-job", two.id), ("job", "nope"), ("other-job", one.id)]
    assert store.get_invocations("proj", keys) == {("job", one.id): one, ("other-job", two.id): two}
    assert store.get_invocations("proj", []) == {}


def test_invocations_are_listed_newest_first_across_pages(store):
    rows = [samples.invocation(T0 + timedelta(minutes=m)) for m in range(7)]
    put(store, *rows, samples.invocation(T0, job_id="other-job"))
    newest_first = [r.id for r in reversed(rows)]
    seen, token, pages = [], None, 0
    while True:
        page, token = store.list_invocations("proj", "job", 3, token)
        seen += [r.id for r in page]
        pages += 1
        if token is None:
            break
    assert seen == newest_first and pages == 3
    assert store.list_invocations("proj", "job", 7, None)[1] is None  # exactly one full page: no token
    first, token = store.list_invocations("proj", "job", 1, None)
    assert first == [rows[-1]] and token == rows[-1].id


def test_the_watchdog_query_finds_only_overdue_jobs_oldest_first(store):
    now = T0 + timedelta(hours=1)
    put(
        store,
        samples.job("p", "late-1m", watchdog_at=now - timedelta(minutes=1)),
        samples.job("p", "late-1h", watchdog_at=now - timedelta(hours=1)),
        samples.job("q", "late-1s", watchdog_at=now - timedelta(seconds=1)),
        samples.job("p", "exactly-now", watchdog_at=now),
        samples.job("p", "future", watchdog_at=now + timedelta(seconds=1)),
        samples.job("p", "no-watchdog", watchdog_at=None),
    )
    assert store.jobs_due_for_watchdog(now, 10) == ([("p", "late-1h"), ("p", "late-1m"), ("q", "late-1s")], None)
    assert store.jobs_due_for_watchdog(now, 2)[0] == [("p", "late-1h"), ("p", "late-1m")]
    put(store, samples.job("p", "late-1h", watchdog_at=now + timedelta(minutes=5)))  # repaired
    assert store.jobs_due_for_watchdog(now, 10) == ([("p", "late-1m"), ("q", "late-1s")], None)


def test_the_watchdog_query_pages_with_a_cursor_that_repairs_do_not_shift(store):
    now = T0 + timedelta(hours=1)
    jobs = [samples.job("p", f"late-{n:02}", watchdog_at=now - timedelta(minutes=30 - n)) for n in range(7)]
    jobs.append(samples.job("p", "tied", watchdog_at=now - timedelta(minutes=30)))  # tied with late-00
    put(store, *jobs)
    seen, cursor, pages = [], None, 0
    while True:
        page, cursor = store.jobs_due_for_watchdog(now, 3, cursor)
        seen += page
        pages += 1
        # Repairing what a page returned moves it past `now`: the next page is unchanged.
        put(store, *(samples.job(p, j, watchdog_at=now + timedelta(minutes=1)) for p, j in page))
        if cursor is None:
            break
    assert sorted(seen) == sorted(("p", job.record.job_id) for job in jobs)  # each once
    # Earliest first within each part of the store (the Datastore store's shards of its
    # indexed times; SQLite has one): tied jobs in either order.
    due = {job.record.job_id: job.record.watchdog_at for job in jobs}
    parts = getattr(store, "index_shards", 1)
    for part in range(parts):
        times = [due[j] for p, j in seen if shard_of(p, j, parts) == part]
        assert times == sorted(times), part
    assert pages in (3, 4)  # a full last page may or may not know it was the last
    assert store.jobs_due_for_watchdog(now, 3) == ([], None)


def test_deferring_a_watchdog_only_ever_moves_it_later(store):
    now = T0 + timedelta(hours=1)
    put(store, samples.job("p", "wedged", watchdog_at=now - timedelta(minutes=5)),
        samples.job("p", "fine", watchdog_at=now + timedelta(hours=1)), samples.job("p", "idle", watchdog_at=None))
    assert store.defer_watchdog("p", "wedged", now + timedelta(minutes=1)) is True
    assert store.jobs_due_for_watchdog(now, 10) == ([], None)
    assert store.jobs_due_for_watchdog(now + timedelta(minutes=2), 10)[0] == [("p", "wedged")]
    assert store.defer_watchdog("p", "fine", now + timedelta(minutes=1)) is False  # never earlier
    assert store.defer_watchdog("p", "idle", now + timedelta(minutes=1)) is False  # no watchdog: none made
    assert store.defer_watchdog("p", "gone", now + timedelta(minutes=1)) is False
    assert store.jobs_due_for_watchdog(now + timedelta(minutes=30), 10)[0] == [("p", "wedged")]
    # The record is left as it was: its own watchdog time still says when it was due.
    assert store.get_job("p", "wedged").record.watchdog_at == now - timedelta(minutes=5)


def test_projects_put_get_list_delete(store):
    a = ProjectRow("a", "hash-a", "", ["jobs[1]: bad"], {"acl": {"readers": ["group:all"]}, "allowed_hosts": ["h"]})
    b = ProjectRow("b", "hash-b", "line 1: not YAML")
    put(store, b, a)
    assert store.get_project("a") == a
    assert store.run_in_transaction(lambda tx: tx.get_project("b")) == b
    assert store.list_projects() == [a, b]
    store.run_in_transaction(lambda tx: tx.delete_project("a"))
    assert store.get_project("a") is None
    assert store.list_projects() == [b]
    assert store.get_project("never") is None


def test_retention_deletes_only_finished_invocations_created_before_the_cutoff(store):
    cutoff = T0 + timedelta(days=45)
    old = [samples.invocation(T0 + timedelta(minutes=m), status=s)
           for m, s in enumerate(["SUCCEEDED", "FAILED", "SKIPPED", "ABORTED", "SUCCEEDED"])]
    running = [samples.invocation(T0 + timedelta(minutes=10 + m), status=s)
               for m, s in enumerate(["STARTING", "RUNNING"])]
    young = samples.invocation(cutoff + timedelta(seconds=1))
    other_job = samples.invocation(T0, job_id="other", status="FAILED")
    put(store, *old, *running, young, other_job)

    assert store.delete_invocations_before(cutoff, 4) == 4  # a batch stops at its limit
    assert store.delete_invocations_before(cutoff, 4) == 2
    assert store.delete_invocations_before(cutoff, 4) == 0
    left, _ = store.list_invocations("proj", "job", 100, None)
    assert {r.id for r in left} == {young.id} | {r.id for r in running}
    assert store.list_invocations("proj", "other", 100, None) == ([], None)


def test_retention_keeps_invocations_without_a_creation_time(store):
    row = samples.invocation(T0)
    row.created_time = None
    put(store, row)
    assert store.delete_invocations_before(T0 + timedelta(days=100), 10) == 0
    assert store.get_invocation("proj", "job", row.id) == row


def test_delete_job_removes_the_row_and_keeps_its_history(store):
    row = samples.invocation(T0, status="ABORTED")
    put(store, samples.job("proj", "job"), samples.job("proj", "other"), row)
    store.run_in_transaction(lambda tx: tx.delete_job("proj", "job"))
    assert store.get_job("proj", "job") is None
    assert store.run_in_transaction(lambda tx: tx.get_job("proj", "job")) is None
    assert [j.record.job_id for j in store.list_jobs("proj")] == ["other"]
    assert store.get_invocation("proj", "job", row.id) == row
    store.run_in_transaction(lambda tx: tx.delete_job("proj", "never"))  # nothing to delete: no error


def test_a_delete_in_a_transaction_is_seen_by_its_own_reads_and_undone_by_a_failure(store):
    put(store, samples.job("proj", "job"))

    def body(tx):
        tx.delete_job("proj", "job")
        assert tx.get_job("proj", "job") is None
        raise RuntimeError("roll back")

    try:
        store.run_in_transaction(body)
    except RuntimeError:
        pass
    assert store.get_job("proj", "job") is not None


def test_count_jobs_counts_one_projects_rows(store):
    put(store, samples.job("proj", "a"), samples.job("proj", "b"), samples.job("proj-2", "c"))
    assert (store.count_jobs("proj"), store.count_jobs("proj-2"), store.count_jobs("none")) == (2, 1, 0)
