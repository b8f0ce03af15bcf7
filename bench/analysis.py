"""Figures from what the receiver recorded, the same for every scheduler under test:
Sundial's server and APScheduler both send X-Sundial-Job, X-Sundial-Invocation,
X-Sundial-Scheduled-Time and X-Sundial-Attempt, so one piece of code counts
missing, duplicates and lateness for both. Each function returns a dict of
figures; the `print_*` functions print them one aligned line each."""

from __future__ import annotations

import time
from collections import Counter

from bench.output import line, ms, note, percentile

STEADY_P99_GOAL = 0.100  # goal: steady lateness p99 under 100 ms


def occurrence(arrival) -> tuple[str, int]:
    """(job, scheduled time in ms): the spread steady variant has times off the second."""
    return arrival.job, round(arrival.scheduled * 1000)


def duplicates(counter: Counter) -> int:
    return sum(c - 1 for c in counter.values() if c > 1)


# --- burst ----------------------------------------------------------------------------------

def wait_for_burst(receiver, n: int, fire_at: float, timeout: float, settle: float) -> None:
    """Until n requests arrived, nothing arrived for 30 s, or `timeout` after T; then
    `settle` seconds more for late duplicates."""
    deadline = fire_at + timeout
    progress, last_count, last_change = time.time() + 5, 0, time.time()
    while time.time() < deadline:
        count = receiver.count()
        if count >= n:
            break
        if count != last_count:
            last_count, last_change = count, time.time()
        elif time.time() - last_change > 30 and count:
            note("no delivery for 30 s: giving up")
            break
        if time.time() >= progress:
            note(f"T+{time.time() - fire_at:5.1f} s: {count:,} delivered")
            progress += 5
        time.sleep(0.1)
    time.sleep(settle)


def burst_figures(arrivals, n: int, fire_at: float) -> dict:
    first_by_job: dict[str, float] = {}
    by_job, by_invocation = Counter(), Counter()
    lateness = []
    for a in sorted(arrivals, key=lambda a: a.at):
        by_job[a.job] += 1
        by_invocation[a.invocation] += 1
        if a.job not in first_by_job:
            first_by_job[a.job] = a.at
            lateness.append(a.at - a.scheduled)
    fig = {"jobs": n, "delivered": len(first_by_job), "missing": n - len(first_by_job),
           "dup_invocation": duplicates(by_invocation), "dup_job": duplicates(by_job),
           "retries": sum(1 for a in arrivals if a.attempt not in ("1", ""))}
    if first_by_job:
        ordered = sorted(first_by_job.values())
        drain = max(ordered[-1] - fire_at, 1e-9)
        lo, hi = ordered[len(ordered) // 10], ordered[(len(ordered) * 9) // 10]
        fig.update(drain_s=drain, rate=len(ordered) / drain,
                   sustained=0.8 * len(ordered) / max(hi - lo, 1e-9), first_s=ordered[0] - fire_at,
                   p50=percentile(lateness, 0.5), p99=percentile(lateness, 0.99), max=max(lateness))
    return fig


def print_burst(prefix: str, fig: dict) -> None:
    if fig["delivered"]:
        missing = fig["missing"]
        line(f"{prefix} time from T until all delivered", f"{fig['drain_s']:,.2f} s for {fig['delivered']:,} jobs"
             + ("" if not missing else f" (NOT all: {missing:,} missing)"))
        rate = fig["rate"]
        line(f"{prefix} deliveries per second", f"{rate:,.0f}/s from T (goal >= 1,000/s: "
             f"{'MET' if rate >= 1000 else 'MISSED'}, ratio {rate / 1000:.2f})")
        line(f"{prefix} sustained rate (10th-90th percentile)", f"{fig['sustained']:,.0f}/s")
        line(f"{prefix} lateness p50 / p99 / max", f"{ms(fig['p50'])} / {ms(fig['p99'])} / {ms(fig['max'])}")
        line(f"{prefix} first delivery after T", ms(fig["first_s"]))
    line(f"{prefix} missing", f"{fig['missing']:,} of {fig['jobs']:,}")
    line(f"{prefix} duplicates by invocation / by job",
         f"{fig['dup_invocation']:,} / {fig['dup_job']:,}  (attempts > 1: {fig['retries']})")


# --- steady ---------------------------------------------------------------------------------

def expected_occurrences(jobs: list[str], start: int, end: int, period: int, offset_ms) -> set:
    """Every (job, scheduled ms) in [start, end): job i is due at t + offset_ms(i)."""
    return {(job, t * 1000 + offset_ms(i)) for i, job in enumerate(jobs) for t in range(start, end, period)}


def wait_for_occurrences(receiver, expected: set, grace: float, settle: float) -> None:
    """Stragglers of the window's last occurrences, up to `grace` seconds."""
    grace_end = time.time() + grace
    while time.time() < grace_end:
        if len(expected & {occurrence(a) for a in receiver.arrivals()}) >= len(expected):
            break
        time.sleep(0.5)
    time.sleep(settle)


def steady_figures(arrivals, expected: set, start: int, end: int) -> dict:
    first: dict[tuple, float] = {}
    by_invocation, by_occurrence = Counter(), Counter()
    for a in sorted(arrivals, key=lambda a: a.at):
        key = occurrence(a)
        if key not in expected:
            continue  # before or after the window
        by_invocation[a.invocation] += 1
        by_occurrence[key] += 1
        first.setdefault(key, a.at - a.scheduled)
    fig = {"expected": len(expected), "delivered": len(first), "missing": len(expected) - len(first),
           "window_s": end - start, "dup_invocation": duplicates(by_invocation),
           "dup_occurrence": duplicates(by_occurrence)}
    if first:
        lateness = list(first.values())
        head = [v for (_, t), v in first.items() if t < (start + 10) * 1000]
        tail = [v for (_, t), v in first.items() if t >= (end - 10) * 1000]
        fig.update(p50=percentile(lateness, 0.5), p99=percentile(lateness, 0.99), max=max(lateness),
                   head_p50=percentile(head, 0.5) if head else None,
                   tail_p50=percentile(tail, 0.5) if tail else None)
    return fig


def print_steady(prefix: str, fig: dict) -> None:
    if "p99" in fig:
        p99 = fig["p99"]
        line(f"{prefix} lateness p50 / p99 / max",
             f"{ms(fig['p50'])} / {ms(p99)} / {ms(fig['max'])} (goal p99 < {ms(STEADY_P99_GOAL)}: "
             f"{'MET' if p99 < STEADY_P99_GOAL else 'MISSED'}, ratio {p99 / STEADY_P99_GOAL:.2f})")
        if fig["head_p50"] is not None and fig["tail_p50"] is not None:
            line(f"{prefix} lateness p50 first 10 s / last 10 s", f"{ms(fig['head_p50'])} / {ms(fig['tail_p50'])}")
    delivered, expected = fig["delivered"], fig["expected"]
    line(f"{prefix} delivered / expected", f"{delivered:,} / {expected:,} = {delivered / max(expected, 1):.1%} "
                                           f"({delivered / fig['window_s']:,.0f}/s)")
    line(f"{prefix} missing", f"{fig['missing']:,}")
    line(f"{prefix} duplicates by invocation / by occurrence",
         f"{fig['dup_invocation']:,} / {fig['dup_occurrence']:,}")


# --- overlap --------------------------------------------------------------------------------

def overlap_figures(arrivals, concurrency: dict[str, int], jobs: list[str], start: int, end: int) -> dict:
    """Calls that arrived for occurrences in [start, end), and the most calls of one job
    that were in flight at once over the whole run."""
    window = [a for a in arrivals if a.job in concurrency and start <= a.scheduled < end]
    by_invocation = Counter(a.invocation for a in window)
    by_occurrence = Counter(occurrence(a) for a in window)
    peaks = [concurrency.get(job, 0) for job in jobs]
    return {"occurrences": len(jobs) * (end - start), "delivered": len(by_occurrence), "window_s": end - start,
            "max_concurrency": max(peaks, default=0),
            "jobs_over_1": sum(1 for peak in peaks if peak > 1),
            "dup_invocation": duplicates(by_invocation), "dup_occurrence": duplicates(by_occurrence)}


def print_overlap(prefix: str, fig: dict) -> None:
    peak = fig["max_concurrency"]
    line(f"{prefix} max concurrent calls of one job", f"{peak} ({'OK' if peak <= 1 else 'OVERLAPPED'}; "
                                                      f"{fig['jobs_over_1']} jobs above 1)")
    line(f"{prefix} deliveries in the window", f"{fig['delivered']:,} of {fig['occurrences']:,} occurrences "
                                               f"in {fig['window_s']} s")
    line(f"{prefix} duplicates by invocation / by occurrence",
         f"{fig['dup_invocation']:,} / {fig['dup_occurrence']:,}")
