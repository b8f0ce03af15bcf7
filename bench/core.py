"""Throughput of the pure core: next-fire computations and state-machine steps.

    python bench/core.py [--seconds S]

Prints one line per figure. Goals: at least 20,000 next-fire
computations per second for `*/5 * * * *`, 100,000 machine steps per second.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from statemachine import events as ev  # noqa: E402
from statemachine.durations import UTC  # noqa: E402
from statemachine.machine import step  # noqa: E402
from statemachine.policy import JobPolicy  # noqa: E402
from statemachine.record import new_record  # noqa: E402
from statemachine.schedule import next_fire, parse_schedule  # noqa: E402

START = datetime(2026, 1, 1, tzinfo=UTC)


def rate(work, seconds: float) -> tuple[float, int]:
    """Calls of work(i) per second over about `seconds`."""
    count, began = 0, time.perf_counter()
    deadline = began + seconds
    while time.perf_counter() < deadline:
        for _ in range(200):
            work(count)
            count += 1
    return count / (time.perf_counter() - began), count


def bench_next_fire(text: str, zone: str, seconds: float) -> None:
    schedule = parse_schedule(text, zone)
    # A fresh `after` every call (spread over ~2 years) so no result is cached.
    per_second, count = rate(lambda i: next_fire(schedule, START + timedelta(minutes=7 * i)), seconds)
    print(f"next_fire  {text!r:28} {zone:22} {per_second:>10,.0f}/s  ({count:,} calls)")


def bench_steps(seconds: float) -> None:
    """Whole occurrences: the tick (which also starts the attempt) and the result."""
    policy = JobPolicy(schedule_text="every 1s", revision="r")
    state = {"record": step(new_record("p", "j"), ev.JobEnabled(policy), START).record}

    def occurrence(i: int) -> None:
        record = state["record"]
        now = record.tick_at
        transition = step(record, ev.TickArrived(record.tick_nonce), now)
        invocation = transition.actions[1].invocation_id
        state["record"] = step(transition.record, ev.InvocationFinished(invocation, True), now).record

    per_second, count = rate(occurrence, seconds)
    print(f"steps      tick+finish cycle (one occurrence)            {2 * per_second:>10,.0f}/s  "
          f"({2 * count:,} steps, {per_second:,.0f} occurrences/s)")


def bench_cheap_steps(seconds: float) -> None:
    """Steps that need no schedule arithmetic: a duplicate start and a watchdog check."""
    policy = JobPolicy(schedule_text="every 1s", revision="r")
    record = step(new_record("p", "j"), ev.JobEnabled(policy), START).record
    tick = step(record, ev.TickArrived(record.tick_nonce), record.tick_at)
    invocation = tick.actions[1].invocation_id
    running = step(tick.record, ev.InvocationStarting(invocation), record.tick_at).record
    events = [ev.InvocationStarting(invocation), ev.WatchdogFired(), ev.Resumed()]
    per_second, count = rate(lambda i: step(running, events[i % 3], record.tick_at), seconds)
    print(f"steps      duplicate start / watchdog / no-op resume     {per_second:>10,.0f}/s  ({count:,} steps)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per figure")
    args = parser.parse_args()
    bench_next_fire("*/5 * * * *", "UTC", args.seconds)
    bench_next_fire("*/5 * * * *", "America/Los_Angeles", args.seconds)
    bench_next_fire("0 15 10 ? * 6L", "America/Los_Angeles", args.seconds)
    bench_next_fire("0 0/5 14,18 * * ?", "Europe/London", args.seconds)
    bench_steps(args.seconds)
    bench_cheap_steps(args.seconds)


if __name__ == "__main__":
    main()
