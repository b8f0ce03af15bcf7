"""Exclusion calendars in a project file: the top-level `calendars` block, and a job's
`exclude` list naming them (docs/REFERENCE.md section 2, "Exclusion calendars").

```yaml
calendars:
  holidays:
    timezone: Europe/Berlin                 # default UTC
    dates: ["2026-12-24", "2026-12-25"]     # whole local days
    ranges: [{start: "2026-12-27T00:00:00", end: "2026-12-31T00:00:00"}]   # local [start, end)
jobs:
  - id: payroll
    exclude: [holidays]                     # or an inline calendar: {name, timezone, dates, ranges}
```

Dates and ranges are normalized (sorted, duplicates dropped), so reordering a
calendar's lines changes no job's revision. A job's `exclude` copies each calendar in
full into its definition (statemachine/calendars.py says why); an API job names the
calendars of its project's file, or gives its own inline.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Mapping

from config import limits
from config.checks import Checker, Invalid
from config.model import JOB_ID
from config.yamlsource import Path
from statemachine.calendars import Calendar
from statemachine.schedule import ScheduleError, load_zone

__all__ = ["CALENDAR_FIELDS", "parse_calendars", "parse_exclude"]

CALENDAR_FIELDS = ("timezone", "dates", "ranges")
_EXAMPLE = '{timezone: Europe/Berlin, dates: ["2026-12-24"], ranges: [{start: "2026-12-27T00:00:00", end: ...}]}'


def parse_calendars(top: Checker, value: Any) -> dict[str, Calendar]:
    """Name -> calendar for the project's `calendars` block; errors recorded in `top`
    (a broken calendar is left out, and the jobs naming it fail as naming an unknown one)."""
    given = top.mapping(("calendars",), value or {}, "{holidays: " + _EXAMPLE + "}")
    result: dict[str, Calendar] = {}
    for name, spec in given.items():
        path = ("calendars", name)
        if not isinstance(name, str) or not JOB_ID.fullmatch(name):
            top.report(path, f"{name!r} is not a valid calendar name (letters, digits, '_', '.', '-')",
                       named=False)
            continue
        calendar = top.attempt(lambda: _calendar(top, path, name, spec, CALENDAR_FIELDS))
        if calendar is not None:
            result[name] = calendar
    return result


def parse_exclude(check: Checker, path: Path, value: Any,
                  calendars: Mapping[str, Calendar]) -> tuple[Calendar, ...]:
    """A job's `exclude`: names of the project's calendars, or inline calendars."""
    items = check.listing(path, value)
    if len(items) > limits.MAX_EXCLUDE_CALENDARS:
        check.fail(path, limits.count_error("calendars", len(items), limits.MAX_EXCLUDE_CALENDARS))
    found = [check.attempt(lambda: _one(check, path + (index,), item, calendars))
             for index, item in enumerate(items)]
    if None in found:
        raise Invalid("bad exclude")  # each one is already reported at its own line
    return tuple({calendar.name: calendar for calendar in found}.values())


def _one(check: Checker, path: Path, item: Any, calendars: Mapping[str, Calendar]) -> Calendar:
    if isinstance(item, dict):
        name = check.string(path + ("name",), item.get("name"), empty=False)
        return _calendar(check, path, name, {k: v for k, v in item.items() if k != "name"},
                         CALENDAR_FIELDS)
    name = check.string(path, item, empty=False)
    if name not in calendars:
        defined = ", ".join(sorted(calendars)) or "none"
        check.fail(path, f"unknown calendar '{name}' (the project's calendars: {defined})")
    return calendars[name]


def _calendar(check: Checker, path: Path, name: str, spec: Any, fields: tuple[str, ...]) -> Calendar:
    spec = check.mapping(path, spec, _EXAMPLE)
    check.known_fields(path, spec, fields)
    zone = spec.get("timezone") or "UTC"
    check.string(path + ("timezone",), zone, empty=False)
    try:
        load_zone(zone)
    except ScheduleError as error:
        check.fail(path + ("timezone",), str(error))
    dates = check.listing(path + ("dates",), spec.get("dates") or [])
    ranges = check.listing(path + ("ranges",), spec.get("ranges") or [])
    for what, listed in (("dates", dates), ("ranges", ranges)):
        if len(listed) > limits.MAX_CALENDAR_ENTRIES:
            check.fail(path + (what,), limits.count_error(what, len(listed), limits.MAX_CALENDAR_ENTRIES))
    days = [check.attempt(lambda: _date(check, path + ("dates", i), item)) for i, item in enumerate(dates)]
    spans = [check.attempt(lambda: _range(check, path + ("ranges", i), item)) for i, item in enumerate(ranges)]
    if None in days or None in spans:
        raise Invalid("bad calendar")
    return Calendar(name, zone, tuple(sorted(set(days))), tuple(sorted(set(spans))))


def _date(check: Checker, path: Path, value: Any) -> date:
    # YAML reads an unquoted 2026-12-24 as a date; quoted YAML and JSON give text.
    if isinstance(value, date) and not isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            pass
    check.fail(path, f"expected a date such as 2026-12-24, got {value!r}")


def _range(check: Checker, path: Path, value: Any) -> tuple[datetime, datetime]:
    spec = check.mapping(path, value, '{start: "2026-12-27T00:00:00", end: "2026-12-31T00:00:00"}')
    check.known_fields(path, spec, ("start", "end"))
    start, end = (_local(check, path + (key,), spec.get(key)) for key in ("start", "end"))
    if end <= start:
        check.fail(path + ("end",), f"must be after start ({start.isoformat()}), got {end.isoformat()}")
    return start, end


def _local(check: Checker, path: Path, value: Any) -> datetime:
    """A wall time in the calendar's zone: no offset (the zone gives it)."""
    moment = value
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            moment = None
    elif isinstance(value, date) and not isinstance(value, datetime):
        moment = datetime.combine(value, datetime.min.time())
    if not isinstance(moment, datetime):
        check.fail(path, f"expected a local time such as 2026-12-27T00:00:00, got {value!r}")
    if moment.utcoffset() is not None:
        check.fail(path, f"{value!r} has an offset; write the wall time alone: the calendar's "
                         "timezone places it")
    return moment
