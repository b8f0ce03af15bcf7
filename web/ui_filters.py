"""The jobs list's state filters (`/p/PROJECT?state=NAME`) and the job page's time and
refresh choices (docs/REFERENCE.md section 7): no Flask, no I/O.

A filtered list is read a store page at a time, as the unfiltered one is, and each
request reads at most FILTER_SCAN_PAGES of them: a project of 10,000 jobs with three
paused ones costs a few requests to page through, never one request reading it all. A
page may so show fewer jobs than it could; its "Next page" link goes on from where the
reading stopped.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Callable

from engine.ports import InvocationRow, StoredJob
from statemachine.record import JobState
from statemachine.schedule import load_zone
from statemachine.shown import shown_state, under_way
from statemachine.vocabulary import ON_THE_CLOCK
from web.attention import facts, kinds_of

FILTER_SCAN_PAGES = 10
REFRESH_CHOICES = (10, 30, 60, 300)  # seconds a page may reload itself after


def _late(job: StoredJob, now: datetime) -> bool:
    return any("late" in kinds_of(fact, now) for fact in facts([job]))  # the attention list's rule


# name -> whether a job is shown under it, at `now`: as the list shows it then (an
# occurrence staged ahead of its time is not running yet, statemachine/shown.py)
JOB_FILTERS: dict[str, Callable[[StoredJob, datetime], bool]] = {
    "failing": lambda job, now: job.record.consecutive_failures > 0 and not job.record.disabled,
    "late": _late,
    "paused": lambda job, now: job.record.paused,
    "running": lambda job, now: under_way(job.record, now),
    "disabled": lambda job, now: job.record.disabled,
    "done": lambda job, now: shown_state(job.record, now) == JobState.DONE,
}

Page = Callable[[str | None], tuple[list[StoredJob], str | None]]  # token -> (jobs, next token)


def filtered_page(read: Page, token: str | None, wanted: Callable[[StoredJob], bool],
                  size: int) -> tuple[list[StoredJob], str | None]:
    """Up to `size` jobs that `wanted` keeps, reading at most FILTER_SCAN_PAGES store
    pages from `token`; and the token to go on from (None: nothing is left)."""
    shown: list[StoredJob] = []
    for _ in range(FILTER_SCAN_PAGES):
        page, token = read(token)
        shown += filter(wanted, page)
        if token is None or len(shown) >= size:
            break
    return shown, token


def lateness(row: InvocationRow) -> timedelta | None:
    """Its first attempt's start after its scheduled time; None before it started, and for
    a trigger that is not on the clock (a backfill is days "late" by design)."""
    if row.started_time is None or row.trigger not in ON_THE_CLOCK:
        return None
    return row.started_time - row.scheduled_time


def duration_text(value: timedelta | None) -> str:
    """`0.042s`, `12.5s`, `3m 20s`, `2h 5m`; "" for None."""
    if value is None:
        return ""
    seconds = value.total_seconds()
    if abs(seconds) < 10:
        return f"{seconds:.3f}s"
    if abs(seconds) < 60:
        return f"{seconds:.1f}s"
    sign, rest = ("-" if seconds < 0 else ""), int(abs(seconds))
    if rest < 3600:
        return f"{sign}{rest // 60}m {rest % 60}s"
    return f"{sign}{rest // 3600}h {rest % 3600 // 60}m"


def zoned_text(value: datetime | None, zone: str) -> str:
    """`2026-01-05 02:00:00 PST` in `zone` (an IANA name, or UTC)."""
    if value is None:
        return ""
    return value.astimezone(load_zone(zone)).strftime("%Y-%m-%d %H:%M:%S %Z")


def refresh_seconds(text: str | None) -> int | None:
    """`?refresh=30`: seconds between reloads, one of REFRESH_CHOICES; None: off.

    :raises ValueError: anything else, naming the choices."""
    if not text:
        return None
    if text.isdigit() and int(text) in REFRESH_CHOICES:
        return int(text)
    raise ValueError(f"refresh must be one of {', '.join(map(str, REFRESH_CHOICES))} (seconds), not {text!r}")
