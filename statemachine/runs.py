"""Runs: occurrences of a clock-driven schedule that wait, held as a range of its fire
times instead of one by one.

A run is every fire time of its schedule in (after, through], all with one trigger
(`schedule`, `catchup` or `backfill`); each is the occurrence with the deterministic id of
its time (a backfill's ids also hold the backfill's `key`, its request id, so that they
differ from the ids of the same times' scheduled occurrences). The schedule is the
run's own, written into it when it is made, so a run keeps the times it was given
whatever the job's schedule becomes. Its size does not depend
on how many times it holds, except for an `at` schedule, whose run lists its times
(no more than the job's definition lists).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Iterator

from statemachine.policy import JobPolicy
from statemachine.schedule import AtSchedule, BoundedSchedule, Schedule, fire_times, next_fire, parse_schedule

_MICROSECOND = timedelta(microseconds=1)  # the resolution of every instant


@dataclass(frozen=True)
class Run:
    """The fire times of a schedule in (after, through], waiting in order."""

    after: datetime
    through: datetime
    trigger: str
    schedule_text: str
    timezone: str
    # For an `at` schedule: its times in (after, through], which are the run's schedule.
    at: tuple[datetime, ...] | None = None
    key: str = ""  # a backfill's request id; empty for the schedule's own occurrences

    @property
    def schedule(self) -> Schedule:
        if self.at is not None:
            return AtSchedule(self.at)
        return parse_schedule(self.schedule_text, self.timezone)

    def first(self) -> datetime | None:
        """The earliest time still waiting; None for a run with nothing left."""
        moment = next_fire(self.schedule, self.after)
        return moment if moment is not None and moment <= self.through else None

    def times(self, limit: int | None = None) -> Iterator[datetime]:
        return fire_times(self.schedule, self.after, self.through, limit)

    def without_through(self, moment: datetime) -> Run | None:
        """The run without its times up to `moment`; None if nothing is left."""
        at = None if self.at is None else tuple(t for t in self.at if t > moment)
        rest = replace(self, after=moment, at=at)
        return rest if rest.first() is not None else None

    def joined(self, later: Run) -> Run | None:
        """One run holding this one's times, then `later`'s, if nothing lies between them."""
        if (later.trigger, later.key) != (self.trigger, self.key) or (later.at is None) != (self.at is None):
            return None
        if self.at is not None and later.at is not None:  # its own times are its schedule: any later ones follow
            return replace(self, through=later.through, at=self.at + later.at)
        same = (later.schedule_text, later.timezone) == (self.schedule_text, self.timezone)
        if not same or next_fire(self.schedule, self.through) != later.first():
            return None
        return replace(self, through=later.through)


def of_policy(policy: JobPolicy, after: datetime, through: datetime, trigger: str, key: str = "") -> Run | None:
    """The fire times of the policy's (clock-driven) schedule in (after, through]; None if there are none."""
    schedule = policy.schedule
    if isinstance(schedule, BoundedSchedule):
        # A run names its schedule by text, without the job's bounds: its range holds them.
        if schedule.start is not None:
            after = max(after, before(schedule.start))
        if schedule.end is not None:
            through = min(through, schedule.end)
        if through <= after:
            return None
        schedule = schedule.inner
    at = tuple(t for t in schedule.times if after < t <= through) if isinstance(schedule, AtSchedule) else None
    run = Run(after, through, trigger, policy.schedule_text, policy.timezone, at, key)
    return run if run.first() is not None else None


def single(policy: JobPolicy, moment: datetime, trigger: str) -> Run | None:
    """The run of one fire time of the policy's schedule."""
    return of_policy(policy, moment - _MICROSECOND, moment, trigger)


def before(moment: datetime) -> datetime:
    """The last instant before `moment`: (x, before(m)] holds the times of (x, m)."""
    return moment - _MICROSECOND
