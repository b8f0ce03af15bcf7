"""Schedules (CONTRACT section 3): parse every form, compute fire times in a time zone.

Cron expressions are matched against naive local wall times (statemachine.cron);
statemachine.zones maps those wall times to UTC instants by the contract's
daylight-saving rules.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Iterator, Sequence, Union

from statemachine.cron import CronSpec, ScheduleError, compile_cron
from statemachine.durations import UTC, format_duration, parse_duration, parse_instant
from statemachine.zones import Zone, load_zone, next_cron, zone

__all__ = [
    "AtSchedule", "CronSchedule", "EverySchedule", "IntervalSchedule", "Schedule",
    "ScheduleError", "TriggeredSchedule", "describe", "fire_times", "is_clock_driven",
    "is_hourly_wild", "load_zone", "next_fire", "parse_at", "parse_schedule",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)
_EVERY = re.compile(r"every\s+(\S+)(?:\s+offset\s+(\S+))?", re.IGNORECASE)
# A clock-driven schedule fires at most once per second (CONTRACT section 6): finer
# rates are a load one project could put on every other project's jobs.
MIN_PERIOD = timedelta(seconds=1)
_INTERVAL = re.compile(r"with\s+(\S+)\s+interval", re.IGNORECASE)


_compile = lru_cache(maxsize=4096)(compile_cron)


@dataclass(frozen=True)
class CronSchedule:
    """A Unix (5 fields), Quartz (6 or 7 fields) or macro expression in a time zone."""

    text: str
    timezone: str = "UTC"
    _spec: CronSpec = field(init=False, repr=False, compare=False)
    _zone: Zone = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise ScheduleError(f"cron expression must be a string, got {self.text!r}")
        text = " ".join(self.text.split())  # one spelling per expression, for equality
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "_spec", _compile(text))
        object.__setattr__(self, "_zone", zone(self.timezone))


@dataclass(frozen=True)
class EverySchedule:
    """Fixed rate: fires at Unix epoch (UTC) + offset + k * period, for every integer k."""

    period: timedelta
    offset: timedelta = timedelta(0)

    def __post_init__(self) -> None:
        _require_duration("period", self.period)
        _require_duration("offset", self.offset)
        if self.period < MIN_PERIOD:
            raise ScheduleError(f"'every' fires at most once per second: the period must be "
                                f"at least {format_duration(MIN_PERIOD)}, got "
                                f"{format_duration(self.period)}")
        if not timedelta(0) <= self.offset < self.period:
            raise ScheduleError(f"offset {format_duration(self.offset)} must be less than "
                                f"the period {format_duration(self.period)}")


@dataclass(frozen=True)
class IntervalSchedule:
    """LUCI's relative schedule: `interval` after the previous invocation ends."""

    interval: timedelta

    def __post_init__(self) -> None:
        _require_duration("interval", self.interval)
        if self.interval < timedelta(0):
            raise ScheduleError("interval must not be negative")


@dataclass(frozen=True)
class TriggeredSchedule:
    """Never fires by the clock; only the API, the UI or another job's `triggers`."""


@dataclass(frozen=True)
class AtSchedule:
    """One-off occurrences: sorted, de-duplicated, aware UTC instants."""

    times: tuple[datetime, ...]

    def __post_init__(self) -> None:
        for index, value in enumerate(self.times):
            if not isinstance(value, datetime) or value.utcoffset() is None:
                raise ScheduleError(f"at[{index}] {value!r} is not a timestamp with an offset")
        normal = tuple(sorted({value.astimezone(UTC) for value in self.times}))
        object.__setattr__(self, "times", normal)


Schedule = Union[CronSchedule, EverySchedule, IntervalSchedule, TriggeredSchedule, AtSchedule]


def _require_duration(name: str, value: object) -> None:
    if not isinstance(value, timedelta):
        raise ScheduleError(f"{name} must be a timedelta, got {value!r}")
    # Whole milliseconds, so that describe() spells it exactly (format_duration's unit).
    if value % _MILLISECOND:
        raise ScheduleError(f"{name} must be a whole number of milliseconds, got {value}")


# --- Parsing -----------------------------------------------------------------------------

def parse_schedule(text: str, timezone: str = "UTC") -> Schedule:
    """Parse any string form of CONTRACT section 3 (every form but `at`)."""
    if not isinstance(text, str):
        raise ScheduleError(f"schedule must be a string, got {text!r}")
    if not isinstance(timezone, str):
        raise ScheduleError(f"time zone must be a string, got {timezone!r}")
    return _parse_normalized(" ".join(text.split()), timezone)


@lru_cache(maxsize=4096)
def _parse_normalized(text: str, timezone: str) -> Schedule:
    zone(timezone)  # a bad zone is an error whatever the schedule's form
    lowered = text.lower()
    if not text:
        raise ScheduleError("schedule is empty; write e.g. '0 * * * *', 'every 10m' "
                            "or 'triggered'")
    if lowered == "triggered":
        return TriggeredSchedule()
    if lowered == "continuously":
        return IntervalSchedule(timedelta(0))
    if lowered.startswith("every"):
        return _parse_every(text)
    if lowered.startswith("with"):
        match = _INTERVAL.fullmatch(text)
        if not match:
            raise ScheduleError(f"bad schedule '{text}': write e.g. 'with 10m interval'")
        return IntervalSchedule(_duration(match.group(1), text))
    if text.startswith("@") or re.search(r"[\d*?]", text):
        return CronSchedule(text, timezone)
    raise ScheduleError(
        f"unrecognised schedule '{text}': expected a cron expression (5, 6 or 7 fields), "
        "a macro such as '@daily', 'every 10m', 'every 1h offset 15m', "
        "'with 10m interval', 'continuously' or 'triggered'")


def _parse_every(text: str) -> EverySchedule:
    match = _EVERY.fullmatch(text)
    if not match:
        raise ScheduleError(f"bad schedule '{text}': write e.g. 'every 10m' or "
                            "'every 1h offset 15m'")
    period = _duration(match.group(1), text)
    offset = _duration(match.group(2), text) if match.group(2) else timedelta(0)
    return EverySchedule(period, offset)


def _duration(value: str, text: str) -> timedelta:
    try:
        return parse_duration(value)
    except ValueError as error:
        raise ScheduleError(f"{error} in '{text}'") from None


def parse_at(values: Sequence[str]) -> AtSchedule:
    """One-off times: ISO-8601 strings, each with an offset or `Z`."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ScheduleError(f"'at' must be a list of ISO-8601 timestamps, got {values!r}")
    if not values:
        raise ScheduleError("'at' needs at least one timestamp")
    times = []
    for index, value in enumerate(values):
        if isinstance(value, datetime):  # YAML may hand over timestamps already parsed
            if value.utcoffset() is None:
                raise ScheduleError(f"at[{index}] {value.isoformat()!r} has no offset; "
                                    "add 'Z' or an offset such as '+02:00'")
            times.append(value)
            continue
        try:
            times.append(parse_instant(value))
        except ValueError as error:
            raise ScheduleError(f"at[{index}]: {error}") from None
    return AtSchedule(tuple(times))


# --- Fire times ----------------------------------------------------------------------------

def next_fire(schedule: Schedule, after: datetime) -> datetime | None:
    """The first fire time strictly after `after`, in UTC; None if it never fires again."""
    _require_aware("after", after)
    try:
        if isinstance(schedule, CronSchedule):
            return next_cron(schedule._spec, schedule._zone, after)
        if isinstance(schedule, EverySchedule):
            start = EPOCH + schedule.offset
            return start + ((after - start) // schedule.period + 1) * schedule.period
    except OverflowError:  # past year 9999 nothing can fire
        return None
    if isinstance(schedule, AtSchedule):
        index = bisect_right(schedule.times, after)
        return schedule.times[index] if index < len(schedule.times) else None
    if isinstance(schedule, (IntervalSchedule, TriggeredSchedule)):
        return None
    raise TypeError(f"not a schedule: {schedule!r}")


def fire_times(schedule: Schedule, after: datetime, until: datetime,
               limit: int | None = None) -> Iterator[datetime]:
    """Fire times in (after, until], increasing, in UTC; at most `limit` of them."""
    _require_aware("after", after)
    _require_aware("until", until)
    if limit is not None and limit < 0:
        raise ValueError(f"limit must not be negative, got {limit}")
    return _fire_times(schedule, after, until, limit)


def _fire_times(schedule: Schedule, after: datetime, until: datetime,
                limit: int | None) -> Iterator[datetime]:
    count = 0
    moment = next_fire(schedule, after)
    while moment is not None and moment <= until and (limit is None or count < limit):
        yield moment
        count += 1
        moment = next_fire(schedule, moment)


def _require_aware(name: str, value: object) -> None:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {value!r}")


# --- Properties ------------------------------------------------------------------------------

def is_clock_driven(schedule: Schedule) -> bool:
    """Whether the schedule fires by the clock (cron, every, at)."""
    return isinstance(schedule, (CronSchedule, EverySchedule, AtSchedule))


def is_hourly_wild(schedule: Schedule) -> bool:
    """CONTRACT section 3: the hour field allows every hour (`*`, `*/1`, `0/1`, `0-23`)."""
    return isinstance(schedule, CronSchedule) and schedule._spec.hourly_wild


def describe(schedule: Schedule) -> str:
    """The canonical text: parse_schedule(describe(s), tz) == s (At: a summary)."""
    if isinstance(schedule, CronSchedule):
        return schedule.text
    if isinstance(schedule, EverySchedule):
        text = f"every {format_duration(schedule.period)}"
        if schedule.offset:
            text += f" offset {format_duration(schedule.offset)}"
        return text
    if isinstance(schedule, IntervalSchedule):
        if not schedule.interval:
            return "continuously"
        return f"with {format_duration(schedule.interval)} interval"
    if isinstance(schedule, TriggeredSchedule):
        return "triggered"
    if isinstance(schedule, AtSchedule):
        shown = [t.isoformat().replace("+00:00", "Z") for t in schedule.times[:5]]
        more = len(schedule.times) - len(shown)
        return "at " + ", ".join(shown) + (f" and {more} more" if more else "")
    raise TypeError(f"not a schedule: {schedule!r}")
