"""Schedules (CONTRACT section 3): parse every form, compute fire times in a time zone.

Cron expressions are matched against naive local wall times (statemachine.cron); this
module maps those wall times to UTC instants by the contract's daylight-saving rules:

- a wall time inside a spring-forward gap fires once at the first instant after the gap
  (fixed hours) or not at all (hourly-wild);
- a wall time that occurs twice fires at its first occurrence (fixed hours) or at both
  (hourly-wild).

Around a fall-back the UTC order of fire times differs from the order of their wall
times, so the search has two passes: first occurrences (plus gap fires), whose UTC
order does follow wall order, and the second occurrences inside the nearest repeated
hour. The answer is the earlier of the two.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Iterator, Sequence, Union
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from statemachine.cron import CronSpec, ScheduleError, compile_cron
from statemachine.durations import UTC, format_duration, parse_duration, parse_instant

__all__ = [
    "AtSchedule", "CronSchedule", "EverySchedule", "IntervalSchedule", "Schedule",
    "ScheduleError", "TriggeredSchedule", "describe", "fire_times", "is_clock_driven",
    "is_hourly_wild", "load_zone", "next_fire", "parse_at", "parse_schedule",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)
_DAY = timedelta(days=1)
_MILLISECOND = timedelta(milliseconds=1)
# Zones whose offset never changes: their wall time is UTC plus a constant.
_FIXED_ZONE = re.compile(r"(Etc/)?(UTC|UCT|GMT|GMT0|GMT[+-]\d{1,2}|Universal|Zulu|Greenwich)")
_EVERY = re.compile(r"every\s+(\S+)(?:\s+offset\s+(\S+))?", re.IGNORECASE)
# A clock-driven schedule fires at most once per second (CONTRACT section 6): finer
# rates are a load one project could put on every other project's jobs.
MIN_PERIOD = timedelta(seconds=1)
_INTERVAL = re.compile(r"with\s+(\S+)\s+interval", re.IGNORECASE)


@dataclass(frozen=True)
class _Zone:
    tz: ZoneInfo
    fixed: timedelta | None  # the constant offset of a zone without transitions


@lru_cache(maxsize=512)
def _zone(name: str) -> _Zone:
    # `localtime` resolves to the machine's own zone: a job must not depend on the host.
    if not isinstance(name, str) or name in ("", "localtime"):
        raise ScheduleError(f"unknown time zone {name!r}; use an IANA name such as "
                            "'America/Los_Angeles' or 'UTC'")
    try:
        tz = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(f"unknown time zone '{name}'; use an IANA name such as "
                            "'America/Los_Angeles' or 'UTC'") from None
    fixed = tz.utcoffset(datetime(2000, 1, 1)) if _FIXED_ZONE.fullmatch(name) else None
    return _Zone(tz, fixed)


def load_zone(name: str) -> ZoneInfo:
    """The IANA time zone `name`; ScheduleError naming it if there is no such zone."""
    return _zone(name).tz


_compile = lru_cache(maxsize=4096)(compile_cron)


@dataclass(frozen=True)
class CronSchedule:
    """A Unix (5 fields), Quartz (6 or 7 fields) or macro expression in a time zone."""

    text: str
    timezone: str = "UTC"
    _spec: CronSpec = field(init=False, repr=False, compare=False)
    _zone: _Zone = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise ScheduleError(f"cron expression must be a string, got {self.text!r}")
        text = " ".join(self.text.split())  # one spelling per expression, for equality
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "_spec", _compile(text))
        object.__setattr__(self, "_zone", _zone(self.timezone))


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
    _zone(timezone)  # a bad zone is an error whatever the schedule's form
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
            return _next_cron(schedule._spec, schedule._zone, after)
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


def _next_cron(spec: CronSpec, zone: _Zone, after: datetime) -> datetime | None:
    if zone.fixed is not None:  # fast path: no daylight saving to think about
        wall = after.astimezone(UTC).replace(tzinfo=None) + zone.fixed
        hit = spec.first_match(_next_second(wall))
        return None if hit is None else (hit - zone.fixed).replace(tzinfo=UTC)
    local = after.astimezone(zone.tz)
    after_utc = after.astimezone(UTC).replace(tzinfo=None)
    found = _first_occurrence_pass(spec, zone.tz, local)
    if spec.hourly_wild:
        repeat = _repeated_hour_pass(spec, zone.tz, local, after_utc)
        if found is None or (repeat is not None and repeat < found):
            found = repeat
    return None if found is None else found.replace(tzinfo=UTC)


def _first_occurrence_pass(spec: CronSpec, tz: ZoneInfo, local: datetime) -> datetime | None:
    """The earliest fire after `local` at a wall time's first (or only) occurrence, or
    at the end of a gap; naive UTC. These instants follow the wall times' order."""
    wall = local.replace(tzinfo=None, fold=0)
    start = _next_second(wall)
    if local.fold:  # inside the repeat: the first occurrences of this hour are past
        start = max(start, _end_of_repeat(tz, wall))
    while True:
        hit = spec.first_match(start)
        if hit is None:
            return None
        first, second = _offsets(tz, hit)
        if first >= second:  # the wall time exists: take its (first) occurrence
            return hit - first
        gap_end = _transition(tz, hit - second, hit - first)
        if not spec.hourly_wild:
            return gap_end  # fixed hours: the missing time fires once, after the gap
        start = gap_end + second  # hourly-wild: nothing inside the gap


def _repeated_hour_pass(spec: CronSpec, tz: ZoneInfo, local: datetime,
                        after_utc: datetime) -> datetime | None:
    """The earliest fire after `after_utc` at the second occurrence of a repeated wall
    time, looking at the fall-back `local` is in or the next one within a day."""
    wall = local.replace(tzinfo=None, fold=0)
    if local.fold:
        before, after_change = _offsets(tz, wall)
        change = _transition(tz, wall - before, after_utc)
    else:
        before = _offset(local)
        probe = after_utc + _DAY
        after_change = _offset_at(tz, probe)
        if after_change >= before:
            return None  # no fall-back within a day
        change = _transition(tz, after_utc, probe)
    repeat_start, repeat_end = change + after_change, change + before  # wall times
    hit = spec.first_match(max(repeat_start, _next_second(after_utc + after_change)))
    if hit is None or hit >= repeat_end:
        return None
    return hit - after_change


def _end_of_repeat(tz: ZoneInfo, wall: datetime) -> datetime:
    """The wall time at which the repeated hour containing `wall` ends."""
    first, second = _offsets(tz, wall)
    return _transition(tz, wall - first, wall - second) + first


def _offsets(tz: ZoneInfo, wall: datetime) -> tuple[timedelta, timedelta]:
    """UTC offsets for a naive wall time at fold=0 and fold=1 (PEP 495): equal when the
    time exists once, first > second when it repeats, first < second in a gap."""
    return _offset(wall.replace(tzinfo=tz, fold=0)), _offset(wall.replace(tzinfo=tz, fold=1))


def _offset_at(tz: ZoneInfo, instant: datetime) -> timedelta:
    return _offset(tz.fromutc(instant.replace(tzinfo=tz)))


def _offset(aware: datetime) -> timedelta:
    """The UTC offset of an aware datetime (a ZoneInfo always has one)."""
    offset = aware.utcoffset()
    if offset is None:
        raise ValueError(f"{aware!r} has no UTC offset")
    return offset


def _transition(tz: ZoneInfo, low: datetime, high: datetime) -> datetime:
    """The instant (naive UTC) in (low, high] at which the offset changes to high's.

    Bisects to one second; time zone transitions fall on whole seconds.
    """
    target = _offset_at(tz, high)
    while high - low > _SECOND:
        middle = low + (high - low) / 2
        if _offset_at(tz, middle) == target:
            high = middle
        else:
            low = middle
    return low.replace(microsecond=0) + _SECOND


def _next_second(moment: datetime) -> datetime:
    """The first whole second strictly after `moment`."""
    return moment.replace(microsecond=0) + _SECOND


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
