"""The embedded path's timing and size knobs, in one place, with the relations they keep.

The dispatcher (dispatcher.py, early_ticks.py), its pipeline (pipeline.py), the staged
requests' path (staged_sends.py, stager.py) and the release marks (release_marks.py)
each used to keep their own constants, and the relations between them lived only in
their prose. app/bootstrap.py builds one `LocalTuning` and hands it down through the
constructors; a test shrinks the knobs it needs small. The defaults are the values the
measurements in docs/PERFORMANCE.md were taken with.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from engine.retry import RECORD_BACKOFF, Backoff


@dataclass(frozen=True)
class LocalTuning:
    # --- the dispatcher (dispatcher.py, early_ticks.py) ---
    leased_per_worker: int = 4
    """Tasks leased per worker: the next ones wait in memory, not in SQLite."""
    burst_tasks: int = 1_000
    """Tasks in flight from which the collector waits: its full passes would walk every held request."""
    lease_lookahead: timedelta = timedelta(milliseconds=150)
    """Chain tasks due this much later are leased with those due now: a look takes dozens, not one or two."""
    handover_grain: timedelta = timedelta(milliseconds=10)
    """A task leased ahead is handed over at the next multiple of this: tasks due close together share a step."""
    early_grain: timedelta = timedelta(milliseconds=100)
    """Staging ticks due within this go over together at its start: a tenth of a second's occurrences per step."""
    early_slack: timedelta = timedelta(milliseconds=250)
    """How early the core accepts a staging tick (its Tuning.early_slack): a grain, and the step that runs it."""

    # --- the pipeline (pipeline.py) ---
    record_linger: timedelta = timedelta(milliseconds=50)
    """The record stage waits this for more results: about 25 per transaction at 500/s, not 5."""
    record_tries: int = 12
    """Commits of one result at least (about 11 s of a store that is down); storage trouble is
    tried on while the attempt's lease holds, after which the watchdog issues the attempt again."""
    record_backoff: Backoff = RECORD_BACKOFF
    """Between those commits, 0.5 s then 1 s: one failing commit a second per result costs little,
    and a store that comes back has the results recorded within a second."""
    writes_first: timedelta = timedelta(seconds=2)
    """Results wait at most this for the due requests to be written: a result a second late is not late."""
    last_commits: timedelta = timedelta(milliseconds=500)
    """Stopping: past the deadline, this for the last results to commit (a few hundred rows take milliseconds)."""

    # --- staged requests (staged_sends.py, stager.py) ---
    release_part: int = 64
    """Requests of one instant checked (one read of their jobs) and handed over at a time: the first leave early."""
    most_held: int = 10_000
    """Staged requests held at most (about 9 KiB each): beyond, early ticks wait for their time."""
    instant_requests: int = 256
    """Requests due at one instant from which the collector waits until all are written."""
    mark_lead: timedelta = timedelta(milliseconds=50)
    """A held time's release mark is stored this much before it: at T nothing is left but the sends."""
    gather: timedelta = timedelta(milliseconds=4)
    """Times this close after the earliest due leave with it: wakeups and GIL hand-offs were most of the CPU."""
    gather_most: int = 64
    """Beyond this many within `gather`, those due leave at once: a burst's instant shares its wakeups already."""

    # --- release marks (release_marks.py) ---
    release_mark_span: timedelta = timedelta(milliseconds=250)
    """A stored mark covers this much past the time it was needed for: a few writes a second, not one a request."""

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, Backoff):
                value = min(value.first, value.most)
            if value <= (timedelta(0) if isinstance(value, timedelta) else 0):
                raise ValueError(f"LocalTuning.{name} must be positive, not {value}")
        # The core lets a staging tick run at most `early_slack` early; handing early
        # ticks over at the start of their grain must stay within it (or a tick bounces).
        _require(self.early_grain <= self.early_slack, "early_grain must not exceed early_slack")
        # A tick is handed over at the start of its early grain only if it was leased by then.
        _require(self.early_grain <= self.lease_lookahead, "early_grain must not exceed lease_lookahead")
        _require(self.handover_grain <= self.lease_lookahead, "handover_grain must not exceed lease_lookahead")
        # Nothing is gathered past the stored mark: a gather wider than what one mark
        # covers would be cut short by it every time (or want a write at T).
        _require(self.gather < self.release_mark_span, "gather must be shorter than release_mark_span")
        _require(self.mark_lead < self.release_mark_span, "mark_lead must be shorter than release_mark_span")
        # The record stage lingers for company, then waits for the writes; a linger as
        # long as the writes' wait would hold every result up longer than a burst does.
        _require(self.record_linger < self.writes_first, "record_linger must be shorter than writes_first")
        _require(self.release_part <= self.most_held, "release_part must not exceed most_held")


def _require(holds: bool, what: str) -> None:
    if not holds:
        raise ValueError(f"LocalTuning: {what}")


DEFAULT_LOCAL_TUNING = LocalTuning()
