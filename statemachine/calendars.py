"""Exclusion calendars: named sets of local dates and time ranges in which a job's
clock-driven occurrences do not run (they are recorded SKIPPED/`excluded`).

A calendar is read in its own time zone, not the job's: a Berlin holiday calendar
excludes the Berlin day whatever zone the job's schedule is in. A date excludes that
whole local day, from its midnight to the next; a range excludes local wall times in
[start, end). Local wall times, not instants, because a holiday is a day on the wall
calendar: the day of a DST change is 23 or 25 hours long, and it is still the day.

The JSON form (`to_dict`) is what a job's definition and its stored policy hold: each
calendar a job names is copied into it when the project file is read, so the job's
revision changes when the calendar does, and the machine needs nothing but the job.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from functools import cached_property
from typing import Any, Iterable, Mapping

from statemachine.schedule import Schedule, load_zone, next_fire

__all__ = ["Calendar", "calendars_from_list", "calendars_to_list", "excluded_by", "next_included"]

# How many exclusions `next_included` steps over before it gives up: enough for years
# of daily holidays in a row, and a bound on a read that must not loop.
MOST_STEPS = 1_000


@dataclass(frozen=True)
class Calendar:
    """One named exclusion calendar."""

    name: str
    timezone: str  # the IANA zone its dates and ranges are read in
    dates: tuple[date, ...] = ()  # each a whole local day
    ranges: tuple[tuple[datetime, datetime], ...] = ()  # naive local [start, end)

    @cached_property
    def _day_set(self) -> frozenset[date]:
        return frozenset(self.dates)

    def excludes(self, instant: datetime) -> bool:
        """Whether the aware `instant` falls on one of its dates or in one of its ranges."""
        return self.excluded_until(instant) is not None

    def excluded_until(self, instant: datetime) -> datetime | None:
        """The local wall time at which the exclusion holding `instant` ends (the latest,
        when several hold it), or None when none does."""
        local = instant.astimezone(load_zone(self.timezone)).replace(tzinfo=None)
        ends = [end for start, end in self.ranges if start <= local < end]
        if local.date() in self._day_set:
            ends.append(datetime.combine(local.date() + timedelta(days=1), time()))
        return max(ends, default=None)

    def aware(self, local: datetime) -> datetime:
        return local.replace(tzinfo=load_zone(self.timezone))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "timezone": self.timezone,
                "dates": [day.isoformat() for day in self.dates],
                "ranges": [{"start": start.isoformat(), "end": end.isoformat()} for start, end in self.ranges]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calendar:
        """:raises ValueError: a field is missing or not in the form `to_dict` writes."""
        try:
            return cls(str(data["name"]), str(data["timezone"]),
                       tuple(date.fromisoformat(day) for day in data["dates"]),
                       tuple((datetime.fromisoformat(item["start"]), datetime.fromisoformat(item["end"]))
                             for item in data["ranges"]))
        except (KeyError, TypeError) as error:
            raise ValueError(f"exclusion calendar: {error!r}") from None


def excluded_by(calendars: Iterable[Calendar], instant: datetime) -> str | None:
    """The name of the first calendar that excludes `instant`, or None."""
    return next((calendar.name for calendar in calendars if calendar.excludes(instant)), None)


def next_included(schedule: Schedule, calendars: tuple[Calendar, ...], moment: datetime | None,
                  ) -> datetime | None:
    """`moment` (a fire time of `schedule`) if no calendar excludes it, else the first fire
    time after the exclusions that hold it: what a reader is shown as the next run. Each
    step jumps to the end of an exclusion, so a week excluded from `every 1s` is one step.
    None when the schedule has no fire time left (or after MOST_STEPS exclusions)."""
    for _ in range(MOST_STEPS):
        if moment is None:
            return None
        ends = [calendar.aware(end) for calendar in calendars
                if (end := calendar.excluded_until(moment)) is not None]
        if not ends:
            return moment
        moment = next_fire(schedule, max(max(ends) - timedelta(microseconds=1), moment))  # always forward
    return None


def calendars_to_list(calendars: Iterable[Calendar]) -> list[dict[str, Any]]:
    return [calendar.to_dict() for calendar in calendars]


def calendars_from_list(data: Iterable[Mapping[str, Any]]) -> tuple[Calendar, ...]:
    return tuple(Calendar.from_dict(item) for item in data)

