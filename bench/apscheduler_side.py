"""APScheduler 3.x doing the benchmark's work, as a process of its own (so that its
CPU and RSS are measured apart from the bench, like Sundial's server).

    python -m bench.apscheduler_side --db PATH --url RECEIVER --kind burst|aligned|spread|overlap
        --jobs N [--at T] [--workers 32] [--misfire default|none] [--slow-ms 2500]

A `BackgroundScheduler` with one `SQLAlchemyJobStore` on SQLite and a thread pool of
`--workers` threads (APScheduler's `ThreadPoolExecutor`, which defaults to 10; the
bench passes Sundial's SUNDIAL_WORKERS default, 32). Job defaults are APScheduler's
(misfire_grace_time 1 s, coalesce True, max_instances 1) unless `--misfire none`.
Each job is `bench.aps_job:deliver`, one POST to the receiver.

Protocol with the bench (bench/aps_runs.py): once every job is in the store and the
scheduler runs, one line `added <seconds> <unix time>` on stdout; then it runs until
`stop` arrives on stdin (or stdin closes), shuts down without waiting for running
jobs, and prints `events <json>`: how many of each scheduler event it saw, so that
runs APScheduler dropped (EVENT_JOB_MISSED, EVENT_JOB_MAX_INSTANCES) show as numbers.
`events` on stdin prints the counts so far and goes on.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter
from datetime import datetime, timedelta, timezone

from apscheduler import events as ev
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from bench import aps_job

PROJECT = "bench"  # the same X-Sundial-Job names as Sundial's jobs: `bench/<id>`
EVENTS = {ev.EVENT_JOB_SUBMITTED: "submitted", ev.EVENT_JOB_EXECUTED: "executed", ev.EVENT_JOB_ERROR: "error",
          ev.EVENT_JOB_MISSED: "missed", ev.EVENT_JOB_MAX_INSTANCES: "max_instances"}


class EventCounts:
    """Counts scheduler events by kind; a submission event counts its run times."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.lock = threading.Lock()

    def __call__(self, event) -> None:
        runs = len(getattr(event, "scheduled_run_times", None) or [None])
        with self.lock:
            self.counts[EVENTS[event.code]] += runs

    def report(self) -> None:
        with self.lock:
            print("events " + json.dumps(dict(self.counts)), flush=True)


def triggers(args) -> list[tuple[str, object, str]]:
    """(job id, trigger, url path) for each job of the scenario, named as bench/scenarios.py names them."""
    utc = timezone.utc
    if args.kind == "burst":
        at = datetime.fromtimestamp(args.at, utc)
        return [(f"b{i:05d}", DateTrigger(run_date=at), "/burst") for i in range(args.jobs)]
    if args.kind == "aligned":
        return [(f"s{i:05d}", CronTrigger(second="*/2", timezone=utc), "/steady") for i in range(args.jobs)]
    if args.kind == "spread":
        base = datetime.fromtimestamp(int(time.time()) // 2 * 2 - 10, utc)  # an even second in the past
        offset = lambda i: timedelta(milliseconds=i * 2000 // args.jobs)  # noqa: E731 (as spread_offset_ms)
        return [(f"s{i:05d}", IntervalTrigger(seconds=2, start_date=base + offset(i)), "/steady")
                for i in range(args.jobs)]
    return [(f"o{i:02d}", CronTrigger(second="*", timezone=utc), f"/slow?ms={args.slow_ms}") for i in range(args.jobs)]


def build(args) -> BackgroundScheduler:
    aps_job.POOL_SIZE = args.workers
    defaults = {"misfire_grace_time": None} if args.misfire == "none" else {}
    return BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{args.db}")},
        executors={"default": aps_job.LabelledThreadPoolExecutor(args.workers)},
        job_defaults=defaults, timezone=timezone.utc)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--url", required=True, help="the receiver's base URL")
    parser.add_argument("--kind", choices=("burst", "aligned", "spread", "overlap"), required=True)
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--at", type=float, help="burst: the instant every job is due (unix time)")
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--misfire", choices=("default", "none"), default="default")
    parser.add_argument("--slow-ms", type=int, default=2500)
    args = parser.parse_args(argv)

    scheduler = build(args)
    counts = EventCounts()
    scheduler.add_listener(counts, sum(EVENTS))
    began = time.time()
    # Jobs added before start() are written to the store by start(), one INSERT and
    # commit each; starting paused keeps the first ones from firing before the last is in.
    for job_id, trigger, path in triggers(args):
        scheduler.add_job(aps_job.deliver, trigger, args=[f"{PROJECT}/{job_id}", args.url + path], id=job_id)
    scheduler.start(paused=True)
    scheduler.resume()
    print(f"added {time.time() - began:.3f} {time.time():.3f}", flush=True)
    for command in sys.stdin:  # "events": report and go on; "stop" or end of input: stop
        if command.strip() != "events":
            break
        counts.report()
    scheduler.shutdown(wait=False)
    counts.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
