"""A job's one pending tick, named by a nonce.

A nonce is `f"{generation}.{counter}"`: arming a new tick makes every older one stale,
and a stale tick changes nothing when it comes (ticks cannot be unscheduled and may
come more than once, as in LUCI's cron machine).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from statemachine import actions as act
from statemachine.record import JobRecord, evolve


def arm(record: JobRecord, at: datetime | None, **changes: Any) -> tuple[JobRecord, list[act.Action]]:
    """Point the record at a new tick (fresh nonce), or at none; `changes` are
    other fields to set in the same copy."""
    if at is None:
        return evolve(record, tick_at=None, tick_nonce=None, **changes), []
    counter = record.nonce_counter + 1
    nonce = f"{record.generation}.{counter}"
    record = evolve(record, nonce_counter=counter, tick_at=at, tick_nonce=nonce, **changes)
    return record, [act.ScheduleTick(at, nonce)]
