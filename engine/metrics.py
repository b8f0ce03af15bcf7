"""Counters and a lateness histogram, exposed in Prometheus' text format.

Each process counts what it did itself. `serve --processes N` adds its children's
counts (their snapshots, which they send the parent every second) to its own, so
one scrape of the parent covers every process; the gauges (queue depth, jobs per
project) are read at scrape time.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from datetime import datetime
from typing import Any, Callable, Iterable, Sequence

from engine.ports import StoredJob
from statemachine.periods import expected_period
from statemachine.shown import next_run

# Seconds between an occurrence's scheduled time and its first attempt's start.
LATENESS_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

HELP = {
    "sundial_deliveries_total": ("counter", "Delivery attempts by outcome."),
    "sundial_skips_total": ("counter", "Occurrences recorded SKIPPED, by reason."),
    "sundial_invocations_finished_total": ("counter", "Invocations that reached a terminal status."),
    "sundial_watchdog_repairs_total": ("counter", "Jobs the watchdog repaired."),
    "sundial_watchdog_repair_failures_total": ("counter", "Watchdog repairs that failed; tried again later."),
    "sundial_cleanup_removed_total": ("counter", "History rows the clean-up removed."),
    "sundial_maintenance_budget_spent_total": ("counter", "Watchdog or clean-up runs that stopped at their time "
                                               "budget with work left for the next run."),
    "sundial_attempts_interrupted_total": ("counter", "Attempts settled because their process was gone."),
    "sundial_storage_errors_total": ("counter", "Writes to the embedded database that failed, by operation "
                                     "(begin, commit, probe)."),
    "sundial_lateness_seconds": ("histogram", "Scheduled time to first attempt start (schedule and catch-up)."),
    "sundial_queue_depth": ("gauge", "Tasks waiting in the embedded queue."),
    "sundial_jobs": ("gauge", "Job rows by project (those being deleted too)."),
    "sundial_project_config_errors": ("gauge", "Errors in the project's config file as last imported: 1 for a "
                                      "file that does not load, else its invalid job entries."),
    "sundial_job_last_success_timestamp_seconds": ("gauge", "When the job's last SUCCEEDED invocation "
                                                   "finished (Unix time); absent before its first."),
    "sundial_job_consecutive_failures": ("gauge", "FAILED invocations of the job since its last SUCCEEDED one "
                                         "(or its last resume)."),
    "sundial_job_next_run_timestamp_seconds": ("gauge", "When the job next runs (Unix time; its Job's "
                                               "next_run_time); absent while it is paused, disabled or has "
                                               "nothing scheduled."),
    "sundial_job_paused": ("gauge", "1 while the job is paused, else 0."),
    "sundial_job_expected_period_seconds": ("gauge", "How often the job is expected to run, from its schedule: "
                                            "the longer of the gaps between fire times around now (cron), the "
                                            "interval (every), interval plus timeout (with X interval, "
                                            "continuously); absent while it is paused or has no clock-driven "
                                            "run ahead (triggered, at, ended)."),
}

UNLABELLED_COUNTERS = ("sundial_watchdog_repairs_total", "sundial_watchdog_repair_failures_total",
                       "sundial_cleanup_removed_total", "sundial_attempts_interrupted_total")

# One row of the exposition: (name, labels, value).
Series = tuple[str, dict[str, str], float]
# A counter's key: its name and its labels, sorted.
_CounterKey = tuple[str, tuple[tuple[str, str], ...]]


class Metrics:
    def __init__(self, other_processes: Sequence[Callable[[], list[dict[str, Any]]]] = ()) -> None:
        """`other_processes`: each returns other processes' snapshots, added to this one's counts."""
        self._lock = threading.Lock()
        self._counters: dict[_CounterKey, float] = defaultdict(float)
        self._buckets = [0] * (len(LATENESS_BUCKETS) + 1)
        self._lateness_sum = 0.0
        self.other_processes = tuple(other_processes)

    def inc(self, name: str, amount: float = 1, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._counters[key] += amount

    def observe_lateness(self, seconds: float) -> None:
        index = next((i for i, bound in enumerate(LATENESS_BUCKETS) if seconds <= bound), len(LATENESS_BUCKETS))
        with self._lock:
            self._buckets[index] += 1
            self._lateness_sum += seconds

    def counter(self, name: str, **labels: str) -> float:
        with self._lock:
            return self._counters.get((name, tuple(sorted(labels.items()))), 0.0)

    def snapshot(self) -> dict[str, Any]:
        """This process's counts as JSON-ready data, for `render` in another process."""
        with self._lock:
            counters = [[name, [list(pair) for pair in labels], value]
                        for (name, labels), value in self._counters.items()]
            return {"counters": counters, "buckets": list(self._buckets), "sum": self._lateness_sum}

    def render(self, gauges: list[Series]) -> str:
        """The exposition text: the counters and the histogram of this process and of
        `other_processes`, then `gauges` as (name, labels, value) rows."""
        with self._lock:
            counters = defaultdict(float, self._counters)
            buckets, total = list(self._buckets), self._lateness_sum
        for snapshot in (s for source in self.other_processes for s in source()):
            for name, labels, value in snapshot["counters"]:
                counters[(name, tuple(tuple(pair) for pair in labels))] += value
            buckets = [mine + theirs for mine, theirs in zip(buckets, snapshot["buckets"])]
            total += snapshot["sum"]
        for name in UNLABELLED_COUNTERS:  # shown from 0, so that rate() and increase() see the first one
            counters[(name, ())] += 0
        rows = [(name, dict(labels), value) for (name, labels), value in sorted(counters.items())]
        rows += _histogram_rows(buckets, total)
        rows += gauges
        return _exposition(rows)


def job_gauges(jobs: Iterable[StoredJob], now: datetime) -> list[Series]:
    """The per-job series of jobs read through engine/queries.py (so a finish written
    only to its invocation's row is already counted), at `now` (the next run of a job
    whose occurrence is staged is that occurrence's time: statemachine/shown.py).
    Everything comes from the job's record: no read per job. Disabled jobs (removed
    from their file) are left out."""
    rows: list[Series] = []
    for stored in jobs:
        record = stored.record
        if record.disabled:
            continue
        labels = {"project": record.project, "job": record.job_id}
        if record.last_succeeded_at is not None:
            rows.append(("sundial_job_last_success_timestamp_seconds", labels, record.last_succeeded_at.timestamp()))
        rows.append(("sundial_job_consecutive_failures", labels, record.consecutive_failures))
        upcoming = next_run(record, now)
        if upcoming is not None:
            rows.append(("sundial_job_next_run_timestamp_seconds", labels, upcoming.timestamp()))
        rows.append(("sundial_job_paused", labels, 1 if record.paused else 0))
        period = None if record.paused or record.policy is None else expected_period(record.policy, now)
        if period is not None:
            rows.append(("sundial_job_expected_period_seconds", labels, period.total_seconds()))
    # One family's rows together: Prometheus' text format wants them so.
    rows.sort(key=lambda row: row[0])
    return rows


class JobSeriesCache:
    """Each project's per-job rows, read again at most every `ttl` seconds.

    The rows come from every job's record: on Datastore one entity read per job, so
    10,000 jobs scraped every 15 s would be 57.6 million reads a day. Kept for a
    minute, they cost a quarter of that, and an alert on them waits at most a minute
    more. A project of fewer than `small` jobs is read afresh at every scrape: its reads
    cost little, and what was just paused or failed shows at once. Which projects a
    caller sees is decided per request, never cached."""

    def __init__(self, ttl: float = 60.0, clock: Callable[[], float] = time.monotonic, small: int = 1000, *,
                 summarize: Callable[[list[StoredJob]], list[Any]]):
        """`summarize`: what is kept of a project's jobs: the gauge rows (`job_gauges` at
        the time of the read) for /metrics, its own facts for the UI's attention list
        (web/attention.py)."""
        self.ttl, self.clock, self.small, self.summarize = ttl, clock, small, summarize
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[float, list[Any]]] = {}

    def rows(self, project: str, jobs: Callable[[], Iterable[StoredJob]]) -> list[Any]:
        now = self.clock()
        with self._lock:
            kept = self._rows.get(project)
        if kept is not None and now - kept[0] < self.ttl:
            return kept[1]
        stored = list(jobs())
        rows = self.summarize(stored)
        if len(stored) >= self.small:
            with self._lock:
                self._rows[project] = (now, rows)
        return rows


def is_snapshot(value: object) -> bool:
    """Whether `value` has the shape `Metrics.snapshot` gives, as read back from JSON."""
    return (isinstance(value, dict) and isinstance(value.get("counters"), list)
            and isinstance(value.get("buckets"), list) and isinstance(value.get("sum"), (int, float))
            and all(isinstance(row, list) and len(row) == 3 for row in value["counters"]))


def _histogram_rows(buckets: list[int], total: float) -> list[Series]:
    rows: list[Series] = []
    running = 0
    for bound, count in zip(LATENESS_BUCKETS, buckets):
        running += count
        rows.append(("sundial_lateness_seconds_bucket", {"le": repr(bound)}, running))
    running += buckets[-1]
    rows.append(("sundial_lateness_seconds_bucket", {"le": "+Inf"}, running))
    rows.append(("sundial_lateness_seconds_sum", {}, total))
    rows.append(("sundial_lateness_seconds_count", {}, running))
    return rows


def _family(name: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name[: -len(suffix)] in HELP:
            return name[: -len(suffix)]
    return name


def _exposition(rows: list[Series]) -> str:
    lines, announced = [], set()
    for name, labels, value in rows:
        family = _family(name)
        if family not in announced and family in HELP:
            kind, text = HELP[family]
            lines += [f"# HELP {family} {text}", f"# TYPE {family} {kind}"]
            announced.add(family)
        label_text = ",".join(f'{key}="{_escape(str(val))}"' for key, val in labels.items())
        lines.append(f"{name}{{{label_text}}} {_number(value)}" if label_text else f"{name} {_number(value)}")
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
