"""docs/SCALE.md's table: 10,000, 100,000 and 1,000,000 hourly jobs, all due at `:00`
("aligned") or spread over the hour, under Cloud Tasks' ramp for cold queue groups.

    python bench/scale_table.py [--jobs 10000,100000,1000000]

Prints the table's rows in the page's own Markdown (tests/unit/test_scale_table.py
checks the 10,000-job rows against the page). Every row is the model of
bench/scale_simulation.py with:

- the CPU per invocation measured by bench/cloud_cpu.py, scaled to an F2;
- the queue group cold at `:00` (500 operations a second, 50% more every 5 minutes), for
  dispatching the hour's ticks and for creating the next ones, except in the
  "warm queues" row, the best case the model used to give alone;
- App Engine giving up on a request after `PENDING_LIMIT` seconds in its pending queue
  (not documented: assumed), which Cloud Tasks then retries after its backoff;
- the chain's queues (N) and `max_instances` of docs/SCALE.md's advice for that many jobs.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.scale_simulation import Limits, Outcome, month_cost, simulate  # noqa: E402

PENDING_LIMIT = 10.0
# jobs: (N, max_instances): docs/SCALE.md's advice.
SETUP = {10_000: (8, 50), 100_000: (8, 100), 1_000_000: (64, 1000)}
HEADER = ("| jobs | hour | N | variant | p50 s | p99 s | max s | peak instances | requests given up | $ a month |\n"
          "|---|---|---|---|---|---|---|---|---|---|")


def variants(jobs: int) -> list[tuple[bool, str, Limits]]:
    """(aligned, name, limits) of each row for `jobs` jobs."""
    _, cap = SETUP[jobs]
    base = replace(Limits(), max_instances=cap, pending_limit=PENDING_LIMIT)
    cold = replace(base, cold_group=True)
    return [
        (True, "warm queues (best case)", base),
        (True, "cold, consecutive names (today)", cold),
        (True, "cold, scattered names", replace(cold, scattered=True)),
        (True, "cold, next ticks created outside the burst", replace(cold, creates_ahead=True)),
        (True, "cold, scattered, created outside the burst", replace(cold, scattered=True, creates_ahead=True)),
        (False, "cold, consecutive names (today)", cold),
    ]


def figure(seconds: float) -> str:
    return f"{seconds:,.1f}" if seconds < 100 else f"{seconds:,.0f}"


def row(jobs: int, aligned: bool, name: str, outcome: Outcome) -> str:
    shards, _ = SETUP[jobs]
    assert outcome.delivered == jobs, f"{jobs - outcome.delivered} jobs never started"
    cost = sum(month_cost(outcome, jobs).values())
    return (f"| {jobs:,} | {'aligned' if aligned else 'spread'} | {shards} | {name} | "
            f"{figure(outcome.percentile(0.5))} | {figure(outcome.percentile(0.99))} | "
            f"{figure(max(outcome.lateness))} | "
            f"{outcome.peak_instances:,} | {outcome.aborted:,} | {cost:,.0f} |")


def rows(jobs: int, only: range | None = None) -> list[str]:
    """The rows for `jobs` jobs; `only`: those of these indexes in `variants`."""
    shards, _ = SETUP[jobs]
    chosen = [v for i, v in enumerate(variants(jobs)) if only is None or i in only]
    return [row(jobs, aligned, name, simulate(jobs, shards, aligned, limits)) for aligned, name, limits in chosen]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", default=",".join(str(j) for j in SETUP))
    parser.add_argument("--rows", default="", help="only these rows of each size, e.g. 0-2 (to run in parallel)")
    args = parser.parse_args()
    first, _, last = args.rows.partition("-")
    only = range(int(first), int(last or first) + 1) if args.rows else None
    base = Limits()
    print(f"{base.cpu * 1000:.1f} ms CPU per invocation on an F2, {base.instance_slots()} requests per instance, "
          f"pending queue limit {PENDING_LIMIT:g} s (assumed)")
    print(HEADER)
    for jobs in (int(j) for j in args.jobs.split(",")):
        for line in rows(jobs, only):
            print(line, flush=True)


if __name__ == "__main__":
    main()
