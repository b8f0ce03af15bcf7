"""Cloud Tasks' ramp for cold queue groups, as bench/scale_simulation.py applies it.

Cloud Tasks' "Manage scaling risks" guidance: a queue, or a queue group (a contiguous
set of queue names, such as queue0001 .. queue0099), that is cold should be given at most
500 operations a second, then 50% more every 5 minutes (the "500/50/5" pattern), or it
shows higher task-creation latency, more creation errors and a lower dispatch rate. Both
operations count: creating a task and dispatching one.

The chain's shards today are `sundial`, `sundial-1` .. `sundial-(N-1)`: consecutive names,
one group, so a cold `:00` gets 500 operations a second for all N queues together.
Names that are not consecutive (`scattered`) make each queue its own group of 500. How
Cloud Tasks draws a group's bounds is not documented beyond "contiguous", so the
scattered case is the documented rule applied per queue, not a measured one.

The model: each group has a FIFO budget of operations (like the database's in
scale_simulation): an operation ready at `t` goes through once the group's rate since
its burst began lets it. `warm` groups have no budget beyond each queue's 500 dispatches
a second (the token bucket in scale_simulation).
"""

from __future__ import annotations

import math

COLD_RATE = 500.0  # operations a second a cold queue or group should get
STEP = 300.0  # seconds between the 50% steps
GROWTH = 1.5


def cold_rate(elapsed: float) -> float:
    """Operations a second a cold group takes `elapsed` seconds into its burst."""
    return COLD_RATE * GROWTH ** math.floor(max(elapsed, 0.0) / STEP)


def cold_seconds(operations: float) -> float:
    """Seconds a cold group needs for `operations` under the ramp (the closed form the
    docs' table rule comes from)."""
    elapsed, left = 0.0, operations
    while left > cold_rate(elapsed) * STEP:
        left -= cold_rate(elapsed) * STEP
        elapsed += STEP
    return elapsed + left / cold_rate(elapsed)


class QueueGroups:
    """The groups of `shards` chain queues: one group for consecutive names, one per
    queue for scattered names; with `cold`, each group's operations follow the ramp."""

    def __init__(self, shards: int, scattered: bool, cold: bool):
        self.scattered, self.cold = scattered, cold
        self.free_at = [0.0] * (shards if scattered else 1)

    def group_of(self, shard: int) -> int:
        return shard if self.scattered else 0

    def take(self, shard: int, ready: float) -> float:
        """When one operation (a creation or a dispatch) on `shard`'s queue, ready at
        `ready`, goes through; the group's burst is taken to begin at 0 (`:00`)."""
        if not self.cold:
            return ready
        group = self.group_of(shard)
        start = max(self.free_at[group], ready)
        self.free_at[group] = start + 1.0 / cold_rate(start)
        return start

    def next_free(self, shard: int) -> float:
        return self.free_at[self.group_of(shard)] if self.cold else 0.0
