"""Server time of the web UI's pages on the embedded backend (SQLite), at size.

    .venv/bin/python bench/ui.py [--jobs 10000] [--invocations 100000] [--runs 40]

Fills a fresh SQLite store straight through the store API (one transaction per batch):
a project of N jobs (each with a few invocations, so the jobs list has outcomes to show)
and one job with M invocations (mostly SUCCEEDED, 1% FAILED, a handful ABORTED). Then
times each page through Flask's test client in-process — the server's own time,
rendering included, without the network — and prints p50/p95 per page. The goal is
under 200 ms for each.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from config.settings import Settings  # noqa: E402
from engine.adapters.local.sqlite_store import SqliteJobStore  # noqa: E402
from engine.ports import InvocationRow, JobSource, ProjectRow, StoredJob  # noqa: E402
from engine.service import build_engine  # noqa: E402
from statemachine import ids  # noqa: E402
from statemachine.definition import JobDefinition  # noqa: E402
from statemachine.policy import JobPolicy  # noqa: E402
from statemachine.record import JobRecord, JobState  # noqa: E402
from web.app import create_app  # noqa: E402

PROJECT = "big"
BUSY = "job-00000"  # the job with the long history
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
BATCH = 500  # the store refuses larger commits (statemachine/budget.py)


class FixedClock:
    def now(self) -> datetime:
        return NOW


def job(job_id: str) -> StoredJob:
    policy = JobPolicy(schedule_text="0 */5 * * * ?", timezone="America/Los_Angeles", revision="r1")
    record = JobRecord(PROJECT, job_id, JobState.SCHEDULED, policy, disabled=False,
                       tick_at=NOW + timedelta(minutes=5), tick_nonce="1-1", scheduled_until=NOW)
    target = {"http": {"url": "https://svc.example.com/run", "body": '{"at":"${startOfHour}"}'}}
    definition = JobDefinition(id=job_id, schedule="0 */5 * * * ?", timezone="America/Los_Angeles", target=target)
    return StoredJob(record, definition, JobSource.CONFIG)


def invocation(job_id: str, index: int) -> InvocationRow:
    scheduled = NOW - timedelta(minutes=5 * (index + 1))
    status = "ABORTED" if index % 20_000 == 7 else "FAILED" if index % 100 == 3 else "SUCCEEDED"
    stamp = scheduled.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    log = [{"time": stamp, "message": "created", "trigger": "schedule"},
           {"time": stamp, "message": "attempt 1 starting", "event": 0},
           {"time": stamp, "message": f"attempt 1: {status.lower()}", "event": 0,
            "detail": "HTTP 200 OK\n{\"ok\":true}\n", "duration_ms": 12},
           {"time": stamp, "message": f"finished: {status}"}]
    return InvocationRow(PROJECT, job_id, ids.invocation_id(PROJECT, job_id, scheduled, ids.OCCURRENCE),
                         status, scheduled, "schedule", reason="http 500" if status == "FAILED" else "",
                         created_time=scheduled, started_time=scheduled, finished_time=scheduled + timedelta(seconds=1),
                         attempt=1, log=log)


def fill(store: SqliteJobStore, jobs: int, invocations: int) -> None:
    store.run_in_transaction(lambda tx: tx.put_project(ProjectRow(PROJECT, "h", settings={"config_jobs": []})))
    rows: list = [job(f"job-{n:05d}") for n in range(jobs)]
    rows += [invocation(f"job-{n:05d}", i) for n in range(1, jobs) for i in range(3)]
    rows += [invocation(BUSY, i) for i in range(invocations)]
    for start in range(0, len(rows), BATCH):
        batch = rows[start:start + BATCH]
        store.run_in_transaction(lambda tx: [tx.put_job(r) if isinstance(r, StoredJob) else tx.put_invocation(r)
                                             for r in batch])


def timed(client, path: str, runs: int, before=lambda: None) -> tuple[float, float]:
    """`before()` runs ahead of each timed request, untimed (e.g. to empty a cache)."""
    response = client.get(path)  # warm: templates compiled, pages cached by SQLite
    assert response.status_code == 200, (path, response.status_code, response.data[:300])
    times = []
    for _ in range(runs):
        before()
        began = time.perf_counter()
        response = client.get(path)
        times.append(time.perf_counter() - began)
        assert response.status_code == 200
    times.sort()
    return times[len(times) // 2], times[min(len(times) - 1, int(0.95 * len(times)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--invocations", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    store = SqliteJobStore(Path(tempfile.mkdtemp(prefix="sundial-bench-ui-")) / "ui.db")
    began = time.perf_counter()
    fill(store, args.jobs, args.invocations)
    print(f"filled {args.jobs:,} jobs and {args.invocations:,} invocations of {BUSY} "
          f"in {time.perf_counter() - began:.1f}s")
    engine = build_engine(store, {}, FixedClock())
    app = create_app(engine, Settings(task_secret="bench", demo_echo=False))
    client = app.test_client()
    deep = store.list_invocations(PROJECT, BUSY, 1, None)[0][0].id
    for _ in range(20):  # a page token deep in the history: ~1,000 pages of 50 down
        page, token = store.list_invocations(PROJECT, BUSY, 5000, deep)
        deep = token or deep
    middle_job = f"job-{args.jobs // 2:05d}"
    some = store.list_invocations(PROJECT, BUSY, 1, None)[0][0].id
    pages = [
        ("jobs list, first page of 50", f"/p/{PROJECT}"),
        ("jobs list, a page in the middle", f"/p/{PROJECT}?page_token={middle_job}"),
        ("jobs list, id prefix search", f"/p/{PROJECT}?q=job-099"),
        ("jobs list, state filter matching none", f"/p/{PROJECT}?state=paused"),
        (f"job page, {args.invocations:,} invocations", f"/p/{PROJECT}/{BUSY}"),
        ("job page, deep history page", f"/p/{PROJECT}/{BUSY}?page_token={deep}"),
        ("job page, filter failed (1%)", f"/p/{PROJECT}/{BUSY}?status=failed"),
        ("job page, filter aborted (rare)", f"/p/{PROJECT}/{BUSY}?status=aborted"),
        ("invocation page", f"/p/{PROJECT}/{BUSY}/{some}"),
        ("projects + attention list, cached facts", "/"),
    ]
    print(f"{'page':<44} {'p50':>8} {'p95':>8}   ({args.runs} runs each, Flask test client, in-process)")
    for name, path in pages:
        p50, p95 = timed(client, path, args.runs)
        print(f"{name:<44} {p50 * 1000:7.1f}ms {p95 * 1000:7.1f}ms")
    # The attention list's first read of a large project, or once its minute is up: every job.
    p50, p95 = timed(client, "/", max(args.runs // 4, 3), lambda: app.extensions.pop("sundial_job_attention", None))
    print(f"{'projects + attention list, facts read afresh':<44} {p50 * 1000:7.1f}ms {p95 * 1000:7.1f}ms")


if __name__ == "__main__":
    main()
