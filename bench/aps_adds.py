"""APScheduler 3.x adding date jobs to a running scheduler's SQLAlchemy store on SQLite:
the add rate the API's creations are held against (bench/api.py).

    python bench/aps_adds.py --db PATH --jobs N

Prints `added <seconds>` for N `add_job` calls (each an INSERT and a commit), the jobs
due 30 days on like the API side's, with the scheduler started (paused: nothing fires).
Run with an interpreter that has requirements-bench.txt installed.
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime, timedelta, timezone

from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.date import DateTrigger


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--jobs", type=int, required=True)
    args = parser.parse_args()
    scheduler = BackgroundScheduler(jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{args.db}")},
                                    timezone=timezone.utc)
    scheduler.start(paused=True)
    first = datetime.now(timezone.utc) + timedelta(days=30)
    began = time.perf_counter()
    for index in range(args.jobs):
        scheduler.add_job("builtins:print", DateTrigger(first + timedelta(minutes=index % 1000)),
                          args=[f"https://example.com/remind/{index}"], id=f"aps-{index}")
    print(f"added {time.perf_counter() - began:.3f}", flush=True)
    scheduler.shutdown(wait=False)


if __name__ == "__main__":
    main()
