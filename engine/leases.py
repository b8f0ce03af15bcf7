"""Leases as the process that holds them counts them: on its own monotonic clock.

A process acts on a lease (sends an attempt, steps or settles a leased task) only
while it still holds it (docs/RELIABILITY.md, "A process that stalls past its
leases"). The other processes judge a lease by the times the store keeps; the holder
judges it by `time.monotonic`, from a reading taken *before* the transaction that
took or renewed the lease, so its own deadline is never later than theirs, and a jump
of the wall clock cannot stretch it. A margin is kept back for what happens between
the check and the act (a request being written to its socket): what a process that
stalls inside that window still does is the one duplicate the invocation id is for.

The leases: a task's (the embedded dispatcher's lease on its queue row, or the
dispatch deadline of a Cloud Tasks request), an attempt's (its attempt timeout plus
the start grace from the commit that issued it; after that the watchdog issues it
again), and, on the embedded backend, the process's own (its last heartbeat plus the
heartbeat timeout; after that another process settles what it holds).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Callable

from engine.logs import log_event
from engine.metrics import Metrics

Monotonic = Callable[[], float]

MARGIN_SHARE = 0.1  # of the lease's length ...
MARGIN_MOST = 1.0  # ... and at most this many seconds
NEVER = float("inf")


def held_until(taken_at: float, length: timedelta) -> float:
    """The monotonic instant up to which a lease taken at `taken_at` (read before the
    transaction that took it) for `length` may be acted on, the margin kept back."""
    seconds = length.total_seconds()
    return taken_at + seconds - min(seconds * MARGIN_SHARE, MARGIN_MOST)


def first_lost(now: float, leases: dict[str, float | None]) -> str:
    """The name of the first lease (name -> held until; None: unbounded) that has run out at `now`; "" if none."""
    return next((name for name, until in leases.items() if until is not None and now >= until), "")


def give_up(log: logging.Logger, metrics: Metrics, step: str, lease: str, **fields: object) -> None:
    """Log and count work left undone because its lease ran out (`step`: what was not done)."""
    metrics.inc("sundial_leases_lost_total", step=step, lease=lease)
    log_event(log, "lease ran out; work given up", level=logging.WARNING, step=step, lease=lease, **fields)
