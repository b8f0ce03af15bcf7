"""A job entry's fan-in fields: `after` (the upstream jobs of the same project that must
each succeed for one scheduled time) and `after_window` (how long after the first
upstream's report for that time the others have; default 1h).

A job with `after` has no schedule of its own: it runs only when its upstream jobs
succeeded (or when a person triggers it), so `schedule` is left out or `triggered`,
and `at` is an error. Neither field is stored for a job without `after`, so such a
job's definition, and its revision, are as they were.

The whole project's part (who reports to whom, cycles through `after` as through
`triggers`) is config/validate.py's: it sees every job.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Mapping

from config.checks import Checker
from config.model import JOB_ID, JobConfig
from config.yamlsource import Path
from statemachine.durations import format_duration

__all__ = ["AFTER_FIELDS", "DEFAULT_WINDOW", "MAX_UPSTREAM", "FanIn", "after_edges", "known_upstream",
           "parse_fan_in", "with_reports"]

AFTER_FIELDS = ("after", "after_window")
DEFAULT_WINDOW = timedelta(hours=1)
# Upstream jobs of one fan-in job: each is named in every waiting time's entry of its record.
MAX_UPSTREAM = 20
# The window bounds how long a time waits; beyond a week a missing run is long forgotten.
MAX_WINDOW = timedelta(days=7)


@dataclass(frozen=True)
class FanIn:
    after: tuple[str, ...] = ()
    window: timedelta = DEFAULT_WINDOW

    def definition_fields(self) -> dict[str, Any]:
        if not self.after:
            return {"after": None, "after_window": None}
        return {"after": self.after, "after_window": format_duration(self.window)}

    def policy_fields(self) -> dict[str, Any]:
        return {"after": self.after, "after_window": self.window} if self.after else {}


def parse_fan_in(check: Checker, path: Path, entry: dict[str, Any], job_id: str) -> FanIn:
    """The entry's fan-in fields; errors recorded in `check` (FanIn() then)."""
    if entry.get("after") is None:
        if entry.get("after_window") is not None:
            check.report(path + ("after_window",), "only meaningful with after")
        return FanIn()
    where = path + ("after",)
    items = check.listing(where, entry["after"])
    if not items:
        check.report(where, "needs at least one job, e.g. [extract-a, extract-b]")
    if len(items) > MAX_UPSTREAM:
        check.report(where, f"names {len(items)} jobs; at most {MAX_UPSTREAM} are allowed")
    names = [check.attempt(lambda: _upstream(check, where + (index,), item, job_id))
             for index, item in enumerate(items)]
    window = DEFAULT_WINDOW
    if entry.get("after_window") is not None:
        window = check.attempt(lambda: _window(check, path + ("after_window",), entry["after_window"]),
                               DEFAULT_WINDOW)
    _check_timing(check, path, entry)
    return FanIn(tuple(dict.fromkeys(name for name in names if name is not None)), window)


def _upstream(check: Checker, path: Path, item: Any, job_id: str) -> str:
    name = check.string(path, item, empty=False)
    if not JOB_ID.fullmatch(name):
        check.fail(path, f"'{name}' is not a job id")
    if name == job_id:
        check.fail(path, "a job cannot wait on itself")
    return name


def _window(check: Checker, path: Path, value: Any) -> timedelta:
    window = check.duration(path, value)
    if window <= timedelta(0) or window > MAX_WINDOW:
        check.fail(path, f"must be more than 0s and at most {format_duration(MAX_WINDOW)}, "
                         f"got {format_duration(window)}")
    return window


def _check_timing(check: Checker, path: Path, entry: dict[str, Any]) -> None:
    """A fan-in job runs when its upstream jobs succeeded, never by a clock of its own."""
    if entry.get("at") is not None:
        check.report(path + ("at",), "a job with after has no times of its own; remove at")
    schedule = entry.get("schedule")
    if schedule is not None and (not isinstance(schedule, str) or schedule.strip() != "triggered"):
        check.report(path + ("schedule",), "a job with after runs when its upstream jobs succeed; "
                     "remove schedule (or write schedule: triggered)")


def known_upstream(check: Checker, path: Path, entry: dict[str, Any], fan_in: FanIn, known_jobs: Any) -> None:
    """Each upstream job must be a job of the project (`known_jobs`; None: not checked)."""
    if known_jobs is None:
        return
    raw = entry["after"] if isinstance(entry.get("after"), list) else []
    for name in fan_in.after:
        if name not in known_jobs:
            check.report(path + ("after", raw.index(name)), f"unknown job '{name}' in this project")


def after_edges(jobs: Mapping[str, JobConfig]) -> dict[str, tuple[str, ...]]:
    """Upstream job -> the fan-in jobs of `jobs` whose `after` names it: the edges a
    trigger cycle may also run through."""
    edges: dict[str, list[str]] = {}
    for job_id, job in jobs.items():
        for upstream in job.policy.after:
            edges.setdefault(upstream, []).append(job_id)
    return {upstream: tuple(following) for upstream, following in edges.items()}


def with_reports(jobs: list[JobConfig]) -> list[JobConfig]:
    """The jobs, each upstream one's policy naming the fan-in jobs it reports to. Its
    revision (its definition's) stays: the import compares whole policies."""
    edges = after_edges({job.id: job for job in jobs})
    return [replace(job, policy=replace(job.policy, reports_to=edges[job.id])) if job.id in edges else job
            for job in jobs]
