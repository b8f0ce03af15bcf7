"""When the embedded dispatcher hands a leased task over to be run (dispatcher.py).

A task runs at its time, on the dispatcher's grain. A staging tick, queued ahead of its
occurrence's time (statemachine/staging.py), may run a little early (EARLY_SLACK, which
the core is told through its Tuning.early_slack by `local_tuning`):
those due within one EARLY_GRAIN are handed over together at its start, so a steady
spread load steps a tenth of a second of occurrences in one transaction instead of a few.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from engine.ports import Task
from statemachine.policy import Tuning

EARLY_GRAIN = timedelta(milliseconds=100)
# How early the core accepts a staging tick: a grain, and room for the transaction that
# steps the grain's ticks together.
EARLY_SLACK = timedelta(milliseconds=250)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def released_at(task: Task) -> datetime:
    """When a leased task goes to be run: at its time, or for a staging tick still more
    than EARLY_GRAIN ahead of its occurrence at the start of its EARLY_GRAIN (one handed
    back to wait for the occurrence's time runs at it)."""
    occurrence_ms = task.payload.get("at_ms")
    since_epoch = task.eta - _EPOCH
    if occurrence_ms is None or since_epoch > timedelta(milliseconds=occurrence_ms) - EARLY_GRAIN:
        return task.eta
    return task.eta - since_epoch % EARLY_GRAIN  # (in whole microseconds: no float rounds it)


def local_tuning(tuning: Tuning) -> Tuning:
    """The chain's tuning as this dispatcher runs it: a tick handed over at the start of
    its grain is up to EARLY_GRAIN early, which the core must accept rather than hand back.

    :raises ValueError: the slack does not cover the grain (a tick would bounce).
    """
    if not EARLY_GRAIN <= EARLY_SLACK:
        raise ValueError(f"EARLY_SLACK {EARLY_SLACK} must cover EARLY_GRAIN {EARLY_GRAIN}")
    return replace(tuning, early_slack=EARLY_SLACK)
