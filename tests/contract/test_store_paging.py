"""The JobStore's paged reads for the web UI, the same on every backend: pages of
jobs (with an id prefix), history filtered by status, a page of jobs' recent outcomes."""

from __future__ import annotations

from datetime import timedelta

from tests.contract import samples
from tests.contract.samples import T0
from tests.contract.test_store import put


def all_pages(read, page_size: int) -> tuple[list, int]:
    """Every row a paged read gives, following its tokens, and how many pages it took."""
    seen, token, pages = [], None, 0
    while True:
        page, token = read(page_size, token)
        seen += page
        pages += 1
        if token is None:
            return seen, pages


def test_jobs_page_by_page_in_id_order_within_one_project(store):
    ids = ["a", "a.b", "a-c", "b", "b1", "c"]
    put(store, *(samples.job("proj", job_id) for job_id in ids), samples.job("proj-2", "a"),
        samples.job("other", "b"))
    jobs, pages = all_pages(lambda size, token: store.list_jobs_page("proj", size, token), 4)
    assert [job.record.job_id for job in jobs] == sorted(ids) and pages == 2
    assert store.list_jobs_page("proj", 6, None)[1] is None  # exactly one full page: no token
    assert store.list_jobs_page("nobody", 10, None) == ([], None)


def test_jobs_page_with_an_id_prefix(store):
    put(store, *(samples.job("proj", job_id) for job_id in ["a", "ab", "abc", "abd", "b", "ab-x"]),
        samples.job("proj-x", "ab"))
    jobs, pages = all_pages(lambda size, token: store.list_jobs_page("proj", size, token, prefix="ab"), 2)
    assert [job.record.job_id for job in jobs] == ["ab", "ab-x", "abc", "abd"] and pages == 2
    # A token from before the prefix's range starts the range; one past it ends it.
    assert [j.record.job_id for j in store.list_jobs_page("proj", 10, "a", prefix="abc")[0]] == ["abc"]
    assert store.list_jobs_page("proj", 10, "abz", prefix="ab") == ([], None)


def test_history_filtered_by_status_newest_first_page_by_page(store):
    statuses = ["SUCCEEDED", "FAILED", "SKIPPED", "FAILED", "SUCCEEDED", "ABORTED", "FAILED", "SKIPPED"]
    rows = [samples.invocation(T0 + timedelta(minutes=i), status=status) for i, status in enumerate(statuses)]
    put(store, *rows, samples.invocation(T0, job_id="other", status="FAILED"))
    newest_first = list(reversed(rows))

    def read(wanted):
        return lambda size, token: store.list_invocations_with_status("proj", "job", wanted, size, token)

    failed, pages = all_pages(read(("FAILED",)), 2)
    assert [r.id for r in failed] == [r.id for r in newest_first if r.status == "FAILED"] and pages == 2
    assert failed[0] == newest_first[1]  # whole rows, log included
    problems, _ = all_pages(read(("FAILED", "SKIPPED", "ABORTED")), 3)
    assert [r.id for r in problems] == [r.id for r in newest_first if r.status != "SUCCEEDED"]
    assert store.list_invocations_with_status("proj", "job", ("RUNNING",), 10, None) == ([], None)


def test_recent_invocations_of_a_page_of_jobs(store):
    rows = [samples.invocation(T0 + timedelta(minutes=i), job_id="a", status="FAILED" if i % 2 else "SUCCEEDED")
            for i in range(5)]
    put(store, *rows, samples.invocation(T0, job_id="b"), samples.invocation(T0, project="other", job_id="c"))
    recent = store.recent_invocations("proj", ["a", "b", "c"], 3)
    assert [r.id for r in recent["a"]] == [r.id for r in reversed(rows)][:3]
    assert [r.status for r in recent["a"]] == ["SUCCEEDED", "FAILED", "SUCCEEDED"]
    assert recent["a"][0].reason == "" and recent["a"][1].reason == "http 500"
    assert all(r.log == [] for r in recent["a"])  # the strip needs no logs
    assert len(recent["b"]) == 1 and recent["c"] == []
