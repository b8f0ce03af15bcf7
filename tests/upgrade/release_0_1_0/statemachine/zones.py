"""Cron in a time zone: IANA zones, and the wall times of a cron expression mapped to
UTC instants by the contract's daylight-saving rules (CONTRACT section 3):

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
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from statemachine.cron import CronSpec, ScheduleError
from statemachine.durations import UTC

_SECOND = timedelta(seconds=1)
_DAY = timedelta(days=1)
# Zones whose offset never changes: their wall time is UTC plus a constant.
_FIXED_ZONE = re.compile(r"(Etc/)?(UTC|UCT|GMT|GMT0|GMT[+-]\d{1,2}|Universal|Zulu|Greenwich)")


@dataclass(frozen=True)
class Zone:
    """An IANA zone, and its constant offset if it never changes (the fast path)."""

    tz: ZoneInfo
    fixed: timedelta | None  # the constant offset of a zone without transitions


@lru_cache(maxsize=512)
def zone(name: str) -> Zone:
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
    return Zone(tz, fixed)


def load_zone(name: str) -> ZoneInfo:
    """The IANA time zone `name`; ScheduleError naming it if there is no such zone."""
    return zone(name).tz


def next_cron(spec: CronSpec, zone: Zone, after: datetime) -> datetime | None:
    """The first fire of `spec` strictly after `after` on `zone`'s wall clock, as naive UTC
    made aware; None if it never fires again."""
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
