"""When the embedded dispatcher hands a leased task over to be run (dispatcher.py).

A task runs at its time, on the dispatcher's grain. A staging tick, queued ahead of its
occurrence's time (statemachine/staging.py), may run a little early (tuning.py's
`early_slack`, which `local_tuning` tells the core through its Tuning.early_slack): those
due within one early grain (`early_grain`) are handed over together at its start, so a
steady spread load steps a tenth of a second of occurrences in one transaction instead
of a few.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from engine.adapters.local.tuning import LocalTuning
from engine.ports import Task
from statemachine.policy import Tuning

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def released_at(task: Task, grain: timedelta) -> datetime:
    """When a leased task goes to be run: at its time, or for a staging tick still more
    than `grain` (LocalTuning.early_grain) ahead of its occurrence at the start of its
    grain (one handed back to wait for the occurrence's time runs at it)."""
    occurrence_ms = task.payload.get("at_ms")
    since_epoch = task.eta - _EPOCH
    if occurrence_ms is None or since_epoch > timedelta(milliseconds=occurrence_ms) - grain:
        return task.eta
    return task.eta - since_epoch % grain  # (in whole microseconds: no float rounds it)


def local_tuning(tuning: Tuning, local: LocalTuning) -> Tuning:
    """The chain's tuning as this dispatcher runs it: a tick handed over at the start of
    its grain is up to `local.early_grain` early, which the core must accept rather than
    hand back (LocalTuning holds early_grain <= early_slack)."""
    return replace(tuning, early_slack=local.early_slack)
