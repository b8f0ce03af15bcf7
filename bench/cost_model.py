"""What Sundial costs a month on Google Cloud, from what one invocation uses.

bench/cloud_cost.py measures the per-invocation figures on the real store and hands them
here; this module only multiplies. Prices are list prices in USD (us-central1, Firestore
in Datastore mode Standard edition, App Engine standard), as published when this was
written: check them against the pricing pages before relying on a figure. What is
assumed rather than measured is named in `Assumptions` and printed with the table.
"""

from __future__ import annotations

from dataclasses import dataclass

MONTH_SECONDS = 30 * 24 * 3600
# bench/cloud_cpu.py, 2026-11-28: the app's CPU per invocation on the cloud path (task request,
# Flask, the engine, two ndb transactions, CreateTask, the outbound request), 23.5 ms on a
# 2.1 GHz Xeon (2 shared cores, load average 5 to 9). An F2 is a 1.2 GHz-class instance:
# scaled by the clock speeds alone (an assumption), 41 ms.
MEASURED_CPU_MS, MEASURED_GHZ, F2_GHZ = 23.5, 2.1, 1.2
F2_CPU_MS = MEASURED_CPU_MS * MEASURED_GHZ / F2_GHZ


@dataclass(frozen=True)
class Prices:
    read_per_100k: float = 0.03  # Firestore in Datastore mode, regional; multi-region nam5 is double
    write_per_100k: float = 0.09
    delete_per_100k: float = 0.01
    storage_gib_month: float = 0.15
    free_reads_day: int = 50_000
    free_writes_day: int = 20_000
    free_deletes_day: int = 20_000
    tasks_per_million: float = 0.40  # Cloud Tasks billable operations (create, push attempt)
    free_task_ops_month: int = 1_000_000
    f2_instance_hour: float = 0.10  # App Engine standard F2
    free_f_hours_day: float = 28.0  # F1 hours; an F2 hour counts as two
    scheduler_job_month: float = 0.10  # Cloud Scheduler, per job
    scheduler_free_jobs: int = 3


@dataclass(frozen=True)
class Usage:
    """One invocation's use of the services (reads, writes, enqueues: measured)."""

    reads: float
    writes: float
    enqueues: float
    deletes: float = 1.0  # its history row, removed at retention
    row_bytes: float = 1_500  # an invocation's row with its index entries
    history_days: int = 45


@dataclass(frozen=True)
class Assumptions:
    cpu_ms: float = F2_CPU_MS  # instance CPU per invocation: measured, scaled to an F2
    target_ms: float = 200.0  # how long the target takes to answer (the request waits for it)
    concurrency: int = 32  # app.yaml's max_concurrent_requests
    utilisation: float = 0.6  # of an instance's CPU that autoscaling lets you use
    warm_instances: int = 1  # app.yaml's min_instances


def _billable(amount_month: float, free_month: float) -> float:
    return max(0.0, amount_month - free_month)


def monthly_cost(invocations: float, usage: Usage, prices: Prices = Prices(),
                 assume: Assumptions = Assumptions()) -> dict[str, float]:
    """USD a month by item for `invocations` a month, all spread evenly over the month."""
    per_second = invocations / MONTH_SECONDS
    rows_kept = invocations / 30 * usage.history_days
    busy = max(per_second * assume.cpu_ms / 1000 / assume.utilisation,  # CPU-bound
               per_second * (assume.cpu_ms + assume.target_ms) / 1000 / assume.concurrency)  # slot-bound
    instance_hours = max(busy, assume.warm_instances) * 24 * 30
    return {
        "datastore reads": _billable(invocations * usage.reads, prices.free_reads_day * 30)
        * prices.read_per_100k / 100_000,
        "datastore writes": _billable(invocations * usage.writes, prices.free_writes_day * 30)
        * prices.write_per_100k / 100_000,
        "datastore deletes": _billable(invocations * usage.deletes, prices.free_deletes_day * 30)
        * prices.delete_per_100k / 100_000,
        "storage": rows_kept * usage.row_bytes / 2**30 * prices.storage_gib_month,
        "cloud tasks": _billable(invocations * usage.enqueues * 2, prices.free_task_ops_month)
        * prices.tasks_per_million / 1_000_000,
        "app engine": max(0.0, instance_hours * 2 - prices.free_f_hours_day * 30) / 2 * prices.f2_instance_hour,
    }


def scheduler_cost(jobs: int, prices: Prices = Prices()) -> float:
    """Cloud Scheduler's price for the same jobs (no per-run charge, a quota of 1,000 jobs
    a region by default and 5,000 at most, one run a minute at the most)."""
    return max(0, jobs - prices.scheduler_free_jobs) * prices.scheduler_job_month


def print_model(minutely: Usage, hourly: Usage, assume: Assumptions = Assumptions()) -> None:
    """The monthly bill of three loads: a million invocations of minutely jobs, 10,000
    jobs every minute and 10,000 jobs every hour (each with its own measured use)."""
    print(f"monthly cost at list prices ({assume.cpu_ms:.1f} ms CPU measured and scaled to an F2; assumed: "
          f"{assume.target_ms:g} ms target "
          f"per invocation, {minutely.row_bytes:,.0f} B per history row kept {minutely.history_days} days, "
          f"{assume.warm_instances} warm F2)")
    scenarios = (
        ("1 million invocations", 1_000_000, None, minutely),
        ("10,000 jobs every minute", 10_000 * 60 * 24 * 30, 10_000, minutely),
        ("10,000 jobs every hour", 10_000 * 24 * 30, 10_000, hourly),
    )
    for title, invocations, jobs, usage in scenarios:
        items = monthly_cost(invocations, usage, assume=assume)
        total = sum(items.values())
        parts = ", ".join(f"{name} ${value:,.2f}" for name, value in items.items())
        print(f"  {title}: ${total:,.2f}  ({parts})")
        if jobs is not None:
            print(f"    Cloud Scheduler for the same {jobs:,} jobs: ${scheduler_cost(jobs):,.2f}"
                  f" (needs {-(-jobs // 5_000)}+ regions at its 5,000-job maximum)")
    marginal = monthly_cost(101_000_000, minutely, assume=assume)
    base = monthly_cost(1_000_000, minutely, assume=assume)
    per_million = (sum(marginal.values()) - sum(base.values())) / 100
    print(f"  marginal cost per million invocations: ${per_million:,.2f}")
