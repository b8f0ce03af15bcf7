"""Schedules in plain language, for people: "at 03:00 every day, America/Los_Angeles".

Pure. Covers the common forms (fixed times of day, steps of seconds, minutes and hours,
days of the week and of the month, macros, `every`, `with ... interval`, `continuously`,
`triggered`, `at`); anything else (L, W, #, odd lists) returns None, and the caller shows
the expression itself, which is never wrong.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from statemachine.cron import MACROS
from statemachine.durations import parse_duration

__all__ = ["describe_schedule", "describe_at", "spell_duration"]

_DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
_DAY_NAMES = {name[:3].upper(): index for index, name in enumerate(_DAYS)}
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December"]
_MONTH_NAMES = {name[:3].upper(): index + 1 for index, name in enumerate(_MONTHS)}
_STEP = re.compile(r"(?:\*|0)/(\d+)")
_UNITS = (("d", "day"), ("h", "hour"), ("m", "minute"), ("s", "second"), ("ms", "millisecond"))


def spell_duration(value: timedelta) -> str:
    """`1h30m` -> "1 hour 30 minutes"; zero -> "0 seconds"."""
    millis = round(value.total_seconds() * 1000)
    parts = []
    for size, (_, word) in zip((86_400_000, 3_600_000, 60_000, 1000, 1), _UNITS):
        amount, millis = divmod(millis, size)
        if amount:
            parts.append(f"{amount} {word}{'' if amount == 1 else 's'}")
    return " ".join(parts) or "0 seconds"


def _every(value: timedelta) -> str:
    """"every 10 minutes", and "every hour" rather than "every 1 hour"."""
    spelled = spell_duration(value).split()
    return "every " + (spelled[1] if spelled[0] == "1" and len(spelled) == 2 else " ".join(spelled))


def describe_schedule(text: str, timezone: str = "UTC") -> str | None:
    """A sentence for a schedule string, or None when it has no simple reading."""
    words = " ".join(str(text).split())
    lowered = words.lower()
    try:
        if lowered == "triggered":
            return "only when triggered (by hand, the API or another job)"
        if lowered == "continuously":
            return "continuously: again as soon as the previous run ends"
        match = re.fullmatch(r"with (\S+) interval", lowered)
        if match:
            return f"{spell_duration(parse_duration(match.group(1)))} after the previous run ends"
        match = re.fullmatch(r"every (\S+)(?: offset (\S+))?", lowered)
        if match:
            sentence = _every(parse_duration(match.group(1)))
            if match.group(2):
                sentence += f", offset {spell_duration(parse_duration(match.group(2)))}"
            return sentence
    except ValueError:
        return None
    described = _describe_cron(MACROS.get(lowered, words))
    if described is None or re.fullmatch(r"every (\d+ (seconds|minutes)|second|minute|hour)", described) \
            or re.fullmatch(r"at seconds [:\d, …and]+ of every minute", described):
        return described  # steps under an hour read the same in every time zone
    return f"{described}, {timezone}"


def describe_at(times: list[str], timezone: str = "UTC") -> str:
    """One-off times: "once, at 2020-12-24 14:00 UTC" or "at 3 set times"."""
    del timezone  # `at` times carry their own offsets; shown in UTC
    if len(times) == 1:
        return f"once, at {_utc_text(times[0])}"
    return f"at {len(times)} set times, from {_utc_text(times[0])} to {_utc_text(times[-1])}"


def _utc_text(value: str) -> str:
    try:
        instant = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    return instant.strftime("%Y-%m-%d %H:%M") + (f":{instant:%S}" if instant.second else "") + " UTC"


# --- cron -----------------------------------------------------------------------------------

def _describe_cron(expression: str) -> str | None:
    fields = expression.split()
    if len(fields) == 5:
        fields, quartz = ["0", *fields], False
    elif len(fields) in (6, 7):
        if len(fields) == 7 and fields[6] != "*":
            return None
        fields, quartz = fields[:6], True
    else:
        return None
    second, minute, hour, dom, month, dow = (field.upper() for field in fields)
    days = _day_phrase(dom, month, dow, quartz)
    clock = _clock_phrase(second, minute, hour)
    if days is None or clock is None:
        return None
    if days == "every day" and "every" in clock:
        return clock  # "every 15 minutes", not "every 15 minutes every day"
    return f"{clock} {days}"


def _clock_phrase(second: str, minute: str, hour: str) -> str | None:
    """The time-of-day part: "at 03:00", "every 15 minutes", "at minute 5 of every hour"."""
    hours, minutes, seconds = _numbers(hour, 23), _numbers(minute, 59), _numbers(second, 59)
    if hours and minutes and seconds and len(minutes) * len(seconds) == 1:
        sec = f":{seconds[0]:02d}" if seconds[0] else ""
        return "at " + _join([f"{h:02d}:{minutes[0]:02d}{sec}" for h in hours])
    for field, rest, unit in ((second, (minute, hour), "second"), (minute, (hour,), "minute"),
                              (hour, (), "hour")):
        step = _STEP.fullmatch(field) if field != "*" else None
        if (field == "*" or step) and all(part == "*" for part in rest):
            smaller = [second, minute][:("second", "minute", "hour").index(unit)]
            if any(part != "0" for part in smaller):
                break  # e.g. minute 15 of every hour: read below
            count = int(step.group(1)) if step else 1
            if (24 if unit == "hour" else 60) % count:
                return _uneven_step(unit, count)
            return f"every {unit}" if count == 1 else f"every {count} {unit}s"
    if hour == "*" and minutes and seconds and len(minutes) * len(seconds) == 1:
        sec = f" and {seconds[0]} seconds" if seconds[0] else ""
        return f"at minute {minutes[0]}{sec} of every hour"
    return None


def _uneven_step(unit: str, count: int) -> str:
    """A step that does not divide its field restarts at 0 each minute, hour or day: `*/7`
    seconds fires at :49, :56 and then :00, so "every 7 seconds" would be wrong."""
    values = range(0, 24 if unit == "hour" else 60, count)
    if unit == "hour":
        return "at " + _join([f"{h:02d}:00" for h in values])
    shown = [f":{v:02d}" for v in values]
    listed = _join(shown) if len(shown) <= 3 else f"{shown[0]}, {shown[1]} … {shown[-1]}"
    return f"at {unit}s {listed} of every {'minute' if unit == 'second' else 'hour'}"


def _day_phrase(dom: str, month: str, dow: str, quartz: bool) -> str | None:
    """The calendar part: "every day", "on Monday to Friday", "on day 1 of every month"."""
    any_dom, any_dow = dom in ("*", "?"), dow in ("*", "?")
    if month != "*":
        months = _numbers(month, 12, _MONTH_NAMES)
        days = _numbers(dom, 31)
        if not (months and days and len(days) == 1 and any_dow):
            return None
        return f"on {days[0]} {_join([_MONTHS[m - 1] for m in months])}"
    if any_dom and any_dow:
        return "every day"
    if any_dow:
        days = _numbers(dom, 31)
        return None if not days else f"on day {_join([str(d) for d in days])} of every month"
    if any_dom:
        weekdays = _weekdays(dow, quartz)
        return None if weekdays is None else f"on {weekdays}"
    return None


def _weekdays(dow: str, quartz: bool) -> str | None:
    range_match = re.fullmatch(r"(\w+)-(\w+)", dow)
    if range_match:
        first, last = (_weekday(part, quartz) for part in range_match.groups())
        if first is None or last is None:
            return None
        return f"{_DAYS[first]} to {_DAYS[last]}"
    days = [_weekday(part, quartz) for part in dow.split(",")]
    return None if None in days else _join([_DAYS[d] for d in days if d is not None])


def _weekday(part: str, quartz: bool) -> int | None:
    """0 = Sunday. Quartz numbers days 1-7 from Sunday, Unix 0-7 (0 and 7 Sunday)."""
    if part in _DAY_NAMES:
        return _DAY_NAMES[part]
    if not part.isdigit():
        return None
    number = int(part)
    if quartz:
        return number - 1 if 1 <= number <= 7 else None
    return number % 7 if 0 <= number <= 7 else None


def _numbers(field: str, top: int, names: dict[str, int] | None = None) -> list[int] | None:
    """A comma list of plain numbers (or names), else None."""
    values = []
    for part in field.split(","):
        if names and part in names:
            values.append(names[part])
        elif part.isdigit() and int(part) <= top:
            values.append(int(part))
        else:
            return None
    return values


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
