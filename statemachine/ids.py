"""Invocation ids: made without a round trip, newest sorting first, and
deterministic for an occurrence so that every retry of a transaction, and every
duplicate task, names the same invocation.

Layout: 11 hex digits of (2**44 - scheduled milliseconds), one letter for the
kind, 10 hex digits of a hash of what makes the invocation unique. Ascending
string order is newest first; 2**44 ms reaches the year 2527.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

_MILLIS_SPAN = 2**44

OCCURRENCE = "o"  # a scheduled time of the job's schedule, on time or caught up
MANUAL = "m"  # a trigger through the API or the UI
JOB = "j"  # a trigger by another job's success
BACKFILL = "b"  # a fire time of a backfill; its key is the backfill's request id
AFTER = "a"  # a fan-in job's run for a scheduled time every upstream job succeeded for


def invocation_id(project: str, job_id: str, scheduled_time: datetime, kind: str, key: str = "") -> str:
    """The id of the invocation for (job, scheduled time, kind, key).

    For occurrences `key` is empty: one occurrence, one id. Manual triggers pass
    the request id, job triggers the triggering invocation's id and backfills their
    request id, so that a backfill of times that already ran makes invocations of its own.
    """
    millis = int(scheduled_time.timestamp() * 1000)
    inverted = _MILLIS_SPAN - millis
    digest = hashlib.blake2b(
        f"{project}/{job_id}/{kind}/{key}/{millis}".encode(), digest_size=5
    ).hexdigest()
    return f"{inverted:011x}{kind}{digest}"


def scheduled_millis(invocation: str) -> int:
    """The scheduled time, in Unix milliseconds, encoded in an invocation id."""
    return _MILLIS_SPAN - int(invocation[:11], 16)
