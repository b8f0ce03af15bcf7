"""Cron expressions: parse Unix and Quartz text into expanded fields, search wall times.

Everything here works on NAIVE local wall times; schedule.py maps them to instants
under a time zone's daylight-saving rules.

Why not croniter: its 6-field form puts seconds last, it numbers Quartz days of week from
0, it rejects `5L`, `LW` and `L-3`, it clamps `31W` into short months, and it is too slow
to call on every tick (each construction re-parses). A matcher over expanded, sorted
fields is short, exact for Quartz and cheap to query, so the core uses its own.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from calendar import isleap
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

FIRST_YEAR, LAST_YEAR = 1970, 2099  # Quartz's year field range
_SEARCH_YEARS = 400  # the Gregorian calendar repeats every 400 years
_MONTH_DAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTH_NAMES = {n: i for i, n in enumerate(
    "JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split(), start=1)}
_DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_OPEN = ("*", "?", "*/1", "?/1")  # day fields that restrict nothing
_ITEM = re.compile(r"(\*|\w+)(?:-(\w+))?(?:/(\w+))?$", re.ASCII)


class ScheduleError(ValueError):
    """A schedule that cannot be parsed; the message names the problem and the input."""


@dataclass(frozen=True)
class _Field:
    """How to read one cron field: its name, value range and names."""

    name: str
    low: int
    high: int
    names: dict[str, int]
    hint: str = ""


def _fields(quartz: bool) -> list[_Field]:
    if quartz:  # Quartz numbers days 1-7 from Sunday
        dow = _Field("day-of-week", 1, 7, {n: i + 1 for i, n in enumerate(_DAY_NAMES)},
                     " (Quartz: 1 = Sunday)")
    else:
        dow = _Field("day-of-week", 0, 7, {n: i for i, n in enumerate(_DAY_NAMES)},
                     " (Unix: 0 and 7 = Sunday)")
    return [
        _Field("second", 0, 59, {}),
        _Field("minute", 0, 59, {}),
        _Field("hour", 0, 23, {}),
        _Field("day-of-month", 1, 31, {}),
        _Field("month", 1, 12, _MONTH_NAMES),
        dow,
        _Field("year", FIRST_YEAR, LAST_YEAR, {}),
    ]


@dataclass(frozen=True)
class DayRule:
    """Which days of a month match. Weekdays are numbered 0 = Sunday .. 6 = Saturday.

    A month's matching days depend only on its length and the weekday of its first day,
    so CronSpec evaluates the rule once for each of the 28 shapes a month can have.
    """

    days: frozenset[int] = frozenset()          # plain day-of-month numbers
    last_minus: frozenset[int] = frozenset()    # `L` is 0, `L-3` is 3
    near_weekday: frozenset[int] = frozenset()  # `15W`
    last_weekday: bool = False                  # `LW`
    weekdays: frozenset[int] = frozenset()      # plain day-of-week values
    nth: frozenset[tuple[int, int]] = frozenset()  # `6#3` as (weekday, 3)
    last_of: frozenset[int] = frozenset()       # `5L`: the last such weekday of the month
    dom_restricted: bool = False
    dow_restricted: bool = False

    def matching_days(self, length: int, first_weekday: int) -> tuple[int, ...]:
        """The days of a month with `length` days whose 1st falls on `first_weekday`."""
        every = range(1, length + 1)
        if not (self.dom_restricted or self.dow_restricted):
            return tuple(every)
        chosen: set[int] = set()
        # Unix cron ORs two restricted day fields; Quartz never gets here with both.
        if self.dom_restricted:
            chosen |= self._by_day_of_month(length, first_weekday)
        if self.dow_restricted:
            chosen |= self._by_day_of_week(length, first_weekday)
        return tuple(sorted(d for d in chosen if 1 <= d <= length))

    def _by_day_of_month(self, length: int, first: int) -> set[int]:
        chosen = set(self.days)
        chosen.update(length - n for n in self.last_minus)
        chosen.update(_nearest_weekday(n, length, first) for n in self.near_weekday
                      if n <= length)  # like a plain `31`, `31W` skips shorter months
        if self.last_weekday:
            chosen.add(_nearest_weekday(length, length, first))
        return chosen

    def _by_day_of_week(self, length: int, first: int) -> set[int]:
        chosen = {d for d in range(1, length + 1) if (first + d - 1) % 7 in self.weekdays}
        chosen.update(1 + (wd - first) % 7 + 7 * (n - 1) for wd, n in self.nth)
        last = (first + length - 1) % 7
        chosen.update(length - (last - wd) % 7 for wd in self.last_of)
        return chosen


def _nearest_weekday(day: int, length: int, first: int) -> int:
    """Quartz's `W`: the weekday nearest `day`, never leaving the month."""
    weekday = (first + day - 1) % 7
    if weekday == 6:  # Saturday: Friday before, or Monday the 3rd if the 1st
        return day + 2 if day == 1 else day - 1
    if weekday == 0:  # Sunday: Monday after, or Friday before if the month ends
        return day - 2 if day == length else day + 1
    return day


@dataclass(frozen=True, eq=False)
class CronSpec:
    """An expanded cron expression: sorted allowed values per field."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: tuple[int, ...]
    years: tuple[int, ...] | None  # None: every year
    rule: DayRule
    hourly_wild: bool
    quartz: bool
    shapes: dict[tuple[int, int], tuple[int, ...]]  # (length, first weekday) -> days

    def can_ever_fire(self) -> bool:
        """Whether some allowed month (of some allowed year) has a matching day."""
        if self.years is None:
            lengths = {m: (29, 28) if m == 2 else (_MONTH_DAYS[m],) for m in self.months}
            return any(self.shapes[n, w] for m in self.months for n in lengths[m]
                       for w in range(7))
        return any(self._days(y, m) for y in self.years for m in self.months)

    def _days(self, year: int, month: int) -> tuple[int, ...]:
        length = 29 if month == 2 and isleap(year) else _MONTH_DAYS[month]
        first = (date(year, month, 1).weekday() + 1) % 7
        return self.shapes[length, first]

    def _time_at_or_after(self, h: int, m: int, s: int) -> tuple[int, int, int] | None:
        """The first allowed time of day at or after h:m:s, if any."""
        hours, minutes, seconds = self.hours, self.minutes, self.seconds
        i = bisect_left(hours, h)
        if i < len(hours) and hours[i] == h:
            j = bisect_left(minutes, m)
            if j < len(minutes) and minutes[j] == m:
                k = bisect_left(seconds, s)
                if k < len(seconds):
                    return h, m, seconds[k]
                j += 1
            if j < len(minutes):
                return h, minutes[j], seconds[0]
            i += 1
        if i < len(hours):
            return hours[i], minutes[0], seconds[0]
        return None

    def first_match(self, start: datetime) -> datetime | None:
        """The earliest matching wall time at or after naive `start` (whole seconds)."""
        first_year = start.year
        if self.years is None:
            years: range | tuple[int, ...] = range(
                first_year, min(first_year + _SEARCH_YEARS, 9999) + 1)
        else:
            years = self.years[bisect_left(self.years, first_year):]
        for year in years:
            in_first_year = year == first_year
            month_from = start.month if in_first_year else 1
            for month in self.months[bisect_left(self.months, month_from):]:
                in_first_month = in_first_year and month == start.month
                days = self._days(year, month)
                for day in days[bisect_left(days, start.day):] if in_first_month else days:
                    if in_first_month and day == start.day:
                        tod = self._time_at_or_after(start.hour, start.minute, start.second)
                        if tod is None:
                            continue
                    else:
                        tod = self.hours[0], self.minutes[0], self.seconds[0]
                    return datetime(year, month, day, *tod)
        return None


def compile_cron(text: str) -> CronSpec:
    """Parse a cron expression (5, 6 or 7 fields, or a macro) into a CronSpec."""
    expanded = MACROS.get(text.lower(), text)
    if expanded.startswith("@"):
        raise ScheduleError(
            f"unknown macro '{text}'; use one of {', '.join(sorted(MACROS))}")
    parts = expanded.split()
    if len(parts) not in (5, 6, 7):
        raise ScheduleError(
            f"cron expression '{text}' has {len(parts)} fields; expected 5 (Unix: m h dom "
            "mon dow), 6 (Quartz: s m h dom mon dow) or 7 (Quartz with a year)")
    quartz = len(parts) > 5
    if not quartz:
        parts = ["0", *parts]
    return _build(_FieldReader(text, quartz), parts)


def _build(reader: "_FieldReader", parts: list[str]) -> CronSpec:
    seconds, minutes, hours = (reader.plain(i, parts[i]) for i in range(3))
    months = reader.plain(4, parts[4])
    years = reader.plain(6, parts[6]) if len(parts) == 7 and parts[6] != "*" else None
    rule = reader.day_rule(parts[3], parts[5])
    shapes = {(n, w): rule.matching_days(n, w) for n in (28, 29, 30, 31) for w in range(7)}
    spec = CronSpec(tuple(seconds), tuple(minutes), tuple(hours), tuple(months),
                    tuple(years) if years is not None else None, rule,
                    hourly_wild=len(hours) == 24, quartz=reader.quartz, shapes=shapes)
    if not spec.can_ever_fire():
        raise ScheduleError(f"cron expression '{reader.text}' can never fire: "
                            "no allowed month has a matching day")
    return spec


class _FieldReader:
    """Reads the fields of one expression; errors quote the whole expression."""

    def __init__(self, text: str, quartz: bool) -> None:
        self.text = text
        self.quartz = quartz
        self.fields = _fields(quartz)

    def fail(self, message: str) -> ScheduleError:
        return ScheduleError(f"{message} in '{self.text}'")

    def plain(self, index: int, part: str) -> list[int]:
        """A field of values, ranges, steps and names; sorted and de-duplicated."""
        field = self.fields[index]
        if part == "?":
            raise self.fail(f"'?' is only allowed in day-of-month or day-of-week, "
                            f"not in the {field.name} field")
        values: set[int] = set()
        for item in part.split(","):
            values.update(self._item(field, item))
        return sorted(values)

    def _item(self, field: _Field, item: str) -> list[int]:
        match = _ITEM.match(item)
        if not match:
            raise self.fail(f"bad {field.name} field '{item}'")
        start_text, end_text, step_text = match.groups()
        step = self._step(field, step_text) if step_text is not None else 1
        if start_text == "*":
            if end_text is not None:
                raise self.fail(f"bad {field.name} field '{item}'")
            low, high = field.low, field.high
        else:
            low = self._value(field, start_text)
            high = self._value(field, end_text) if end_text is not None else low
            if end_text is None and step_text is not None:
                high = field.high  # Quartz `0/5`: from 0 to the end, every 5
        return self._walk(field, item, low, high, step)

    def _walk(self, field: _Field, item: str, low: int, high: int, step: int) -> list[int]:
        if low <= high:
            return list(range(low, high + 1, step))
        if field.name == "year":
            raise self.fail(f"year range '{item}' goes backwards")
        # A wrapping range such as `FRI-MON` or `22-2`: walk round the cycle.
        size = field.high - field.low + 1
        count = ((high - low) % size) // step + 1
        return [field.low + (low - field.low + k * step) % size for k in range(count)]

    def _step(self, field: _Field, text: str) -> int:
        if not text.isdigit() or int(text) == 0:
            raise self.fail(f"bad step '/{text}' in the {field.name} field; "
                            "use a positive whole number")
        return int(text)

    def _value(self, field: _Field, text: str) -> int:
        if text.isdigit():
            value = int(text)
        elif text.upper() in field.names:
            return field.names[text.upper()]
        elif field.names:
            raise self.fail(f"unknown {field.name} name '{text}'; use "
                            f"{'JAN-DEC' if field.name == 'month' else 'SUN-SAT'}")
        else:
            raise self.fail(f"bad {field.name} value '{text}'")
        if not field.low <= value <= field.high:
            raise self.fail(f"{field.name} value {value} out of range "
                            f"{field.low}-{field.high}{field.hint}")
        return value

    def day_rule(self, dom: str, dow: str) -> DayRule:
        # Only `*` or `?` (step 1) leaves a day field open, as in robfig/cron (Kubernetes
        # CronJob) and Quartz: `0 0 1-31 * MON` is every day (Unix OR), and an error in
        # Quartz. croniter instead decides by whether the other field contains a `*`.
        dom_parts = self._day_of_month(dom)
        dow_parts = self._day_of_week(dow)
        if self.quartz and dom_parts["dom_restricted"] and dow_parts["dow_restricted"]:
            raise self.fail("both day-of-month and day-of-week are restricted; Quartz "
                            "needs '?' in one of them")
        return DayRule(**dom_parts, **dow_parts)

    def _day_of_month(self, part: str) -> dict[str, Any]:
        days: set[int] = set()
        last_minus: set[int] = set()
        near: set[int] = set()
        last_weekday = False
        if part in _OPEN:
            return {"dom_restricted": False}
        for item in part.upper().split(","):
            if item == "LW":
                last_weekday = True
            elif item == "L" or item.startswith("L-"):
                last_minus.add(self._bounded("offset from the last day", item[2:] or "0", 0, 30))
            elif item.endswith("W") and item[:-1].isdigit():
                near.add(self._bounded("day-of-month", item[:-1], 1, 31))
            else:
                days.update(self._item(self.fields[3], item))
        return {"days": frozenset(days), "last_minus": frozenset(last_minus),
                "near_weekday": frozenset(near), "last_weekday": last_weekday,
                "dom_restricted": True}

    def _day_of_week(self, part: str) -> dict[str, Any]:
        plain: set[int] = set()
        nth: set[tuple[int, int]] = set()
        last_of: set[int] = set()
        if part in _OPEN:
            return {"dow_restricted": False}
        field = self.fields[5]
        for item in part.upper().split(","):
            if "#" in item:
                day_text, _, n_text = item.partition("#")
                nth.add((self._weekday(field, day_text), self._bounded("'#' week", n_text, 1, 5)))
            elif item == "L":
                plain.add(6)  # Quartz: `L` alone in day-of-week is just Saturday (7)
            elif item.endswith("L") and len(item) > 1:
                last_of.add(self._weekday(field, item[:-1]))
            else:
                plain.update(self._to_sunday0(v) for v in self._item(field, item))
        return {"weekdays": frozenset(plain), "nth": frozenset(nth),
                "last_of": frozenset(last_of), "dow_restricted": True}

    def _weekday(self, field: _Field, text: str) -> int:
        return self._to_sunday0(self._value(field, text))

    def _to_sunday0(self, value: int) -> int:
        return value - 1 if self.quartz else value % 7

    def _bounded(self, what: str, text: str, low: int, high: int) -> int:
        if not text.isdigit():
            raise self.fail(f"bad {what} '{text}'")
        value = int(text)
        if not low <= value <= high:
            raise self.fail(f"{what} value {value} out of range {low}-{high}")
        return value

