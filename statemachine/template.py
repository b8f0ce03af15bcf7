"""`${variable}` substitution in delivery targets (docs/REFERENCE.md section 4).

Values come from the occurrence's *scheduled* time, seen in the job's time zone, so a
delivery that is retried or caught up hours later still says which period it is about.

Syntax: `${name}` is a variable, `$${` is a literal `${`, and any other `$` is literal.
The text is scanned left to right once, so `$$${x}` is a literal `$${x}` (the first `$`
is plain text, then `$${` is the escape). Substitution is a single pass: a value that
itself contains `${...}` is never expanded again, and nothing is ever evaluated.

Time-of-day values use calendar arithmetic, not fixed 24-hour steps: "start of the
previous day" is the previous local date's first instant, whatever the length of the
days in between, and every timestamp carries the UTC offset in force at that instant.
A day whose midnight is skipped (DST at 00:00) starts at its first instant; a day that
was skipped entirely (Samoa, 2011-12-30) is empty and starts when the next one does.
The start of an hour is the start of the local wall hour, in the same pass of a repeated
hour as the scheduled time.

Hook templates (`on_failure`, `on_recovery`) may also use HOOK_VARIABLES, which describe
how the invocation ended (`HookValues`). In a hook's JSON body each substituted value is
JSON-string-escaped (`render(..., escape=json_escape)`, chosen by engine/rendering.py), so
a reason quoting the target's own answer can neither break the JSON nor add fields.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Callable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from statemachine.durations import UTC, rfc3339_millis

_MILLISECOND = timedelta(milliseconds=1)

# `$${` is tried first at each position so that it wins over the `${` inside it. A name
# is a run of word characters (plus `.:-`, so `${foo-bar}` is reported as an unknown
# variable rather than as a broken reference); a missing `}` right after the name makes
# the reference unterminated.
_TOKEN = re.compile(r"\$\$\{|\$\{([\w.:-]*)(\})?")
_ESCAPE = "$${"


class TemplateError(ValueError):
    """A template that uses an unknown variable or leaves a `${` unterminated."""


@dataclass(frozen=True)
class HookValues:
    """How the invocation a hook (`on_failure`, `on_recovery`) tells about ended."""

    status: str  # FAILED or SUCCEEDED
    reason: str = ""  # why it failed; "" for a success
    attempts: int = 1  # attempts made (of its first event, for a fan-out: the most made)
    failures: int = 0  # FAILED invocations in a row: up to this one (on_failure), before it (on_recovery)
    invocation_url: str = ""  # its page in the web UI ("" when the server has no service URL)


@dataclass(frozen=True)
class TemplateContext:
    """Everything a template may refer to, for one delivery of one occurrence."""

    scheduled_time: datetime
    """The occurrence's scheduled time (aware); for manual triggers the trigger time."""
    timezone: str = "UTC"
    """IANA name of the job's time zone; the date and time variables are local to it."""
    project: str = ""
    job_id: str = ""
    invocation_id: str = ""
    attempt: int = 1
    """1 for the first attempt of the invocation."""
    event_index: int = 0
    """Which fan-out event this is, from 0."""
    event_count: int = 1
    """How many fan-out events the occurrence has."""
    service_host: str = ""
    """host:port of the Sundial server itself (its service URL's), for targets it serves."""
    hook: HookValues | None = None
    """Set only when rendering a hook: the values of HOOK_VARIABLES."""

    def __post_init__(self) -> None:
        if self.scheduled_time.tzinfo is None or self.scheduled_time.utcoffset() is None:
            raise ValueError(
                f"scheduled_time must be timezone-aware, got {self.scheduled_time!r}"
            )
        _zone(self.timezone)  # fail at construction, not halfway through a render


@functools.lru_cache(maxsize=256)
def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise TemplateError(f"unknown time zone {name!r}") from None


# --- local calendar arithmetic -------------------------------------------------------


def _first_instant_at_or_after(wall: datetime, zone: ZoneInfo) -> datetime:
    """The first instant whose local wall time is `wall` or later, as a local datetime.

    `wall` is naive; its `fold` picks the occurrence when the wall time happens twice.
    When `wall` falls in a spring-forward gap the answer is the transition itself (the
    first instant after the gap): that is when the local day or hour actually began.
    """
    candidate = wall.replace(tzinfo=zone).astimezone(UTC).astimezone(zone)
    if candidate.replace(tzinfo=None) == wall:  # naive comparison ignores fold
        return candidate
    # In a gap, zoneinfo maps fold=1 through the offset after the transition (an instant
    # before it) and fold=0 through the offset before it (an instant after it). The
    # transition lies between; tz database transitions fall on whole seconds.
    low = int(wall.replace(tzinfo=zone, fold=1).timestamp())
    high = int(wall.replace(tzinfo=zone, fold=0).timestamp()) + 1
    while low < high:
        middle = (low + high) // 2
        local = datetime.fromtimestamp(middle, zone).replace(tzinfo=None)
        if local >= wall:
            high = middle
        else:
            low = middle + 1
    return datetime.fromtimestamp(low, zone)


@functools.lru_cache(maxsize=4096)  # many occurrences share a day; the answer never changes
def _start_of_local_day(day: date, zone: ZoneInfo) -> datetime:
    """Local midnight of `day`, or the first instant of `day` where midnight is skipped."""
    return _first_instant_at_or_after(datetime.combine(day, time()), zone)


class _Moments:
    """The local instants derived from one scheduled time, each computed at most once."""

    def __init__(self, context: TemplateContext) -> None:
        self._zone = _zone(context.timezone)
        self.local = context.scheduled_time.astimezone(self._zone)
        self.today = self.local.date()

    @functools.cached_property
    def start_of_hour(self) -> datetime:
        # Keep the fold: 01:30 PST on the fall-back day starts its hour at 01:00 PST,
        # not at 01:00 PDT an hour earlier.
        wall = self.local.replace(tzinfo=None, minute=0, second=0, microsecond=0)
        return _first_instant_at_or_after(wall, self._zone)

    @functools.cached_property
    def start_of_day(self) -> datetime:
        return _start_of_local_day(self.today, self._zone)

    def start_of_day_before(self, days: int) -> datetime:
        return _start_of_local_day(self.today - timedelta(days=days), self._zone)

    @property
    def end_of_previous_day(self) -> datetime:
        # Subtract in UTC: aware-datetime arithmetic in Python is wall-clock arithmetic,
        # which is wrong when the day began right after a transition.
        return (self.start_of_day.astimezone(UTC) - _MILLISECOND).astimezone(self._zone)


def _iso_millis(local: datetime) -> str:
    """`2018-03-21T17:09:00.000-07:00`: local time, milliseconds, offset at that instant."""
    return local.isoformat(timespec="milliseconds")


_Getter = Callable[[TemplateContext, _Moments], str]

_GETTERS: dict[str, _Getter] = {
    "processTime": lambda c, m: _iso_millis(m.local),
    "startOfHour": lambda c, m: _iso_millis(m.start_of_hour),
    "startOfDay": lambda c, m: _iso_millis(m.start_of_day),
    "startOfPreviousDay": lambda c, m: _iso_millis(m.start_of_day_before(1)),
    "endOfPreviousDay": lambda c, m: _iso_millis(m.end_of_previous_day),
    "startOfDayOneWeekAgo": lambda c, m: _iso_millis(m.start_of_day_before(7)),
    "todaysDate": lambda c, m: m.today.isoformat(),
    "yesterdaysDate": lambda c, m: (m.today - timedelta(days=1)).isoformat(),
    "project": lambda c, m: c.project,
    "jobId": lambda c, m: c.job_id,
    "invocationId": lambda c, m: c.invocation_id,
    "scheduledTime": lambda c, m: rfc3339_millis(c.scheduled_time),
    "attempt": lambda c, m: str(c.attempt),
    "eventIndex": lambda c, m: str(c.event_index),
    "eventCount": lambda c, m: str(c.event_count),
    "serviceHost": lambda c, m: c.service_host,
}


def _hook(context: TemplateContext) -> HookValues:
    if context.hook is None:  # config validation refuses them in targets; never render them empty
        raise TemplateError(f"{', '.join('${' + n + '}' for n in sorted(HOOK_VARIABLES))} "
                            "are only for on_failure and on_recovery templates")
    return context.hook


_HOOK_GETTERS: dict[str, _Getter] = {
    "status": lambda c, m: _hook(c).status,
    "reason": lambda c, m: _hook(c).reason,
    "attempts": lambda c, m: str(_hook(c).attempts),
    "failures": lambda c, m: str(_hook(c).failures),
    "invocationUrl": lambda c, m: _hook(c).invocation_url,
}
_GETTERS.update(_HOOK_GETTERS)

# Only hook templates may use these (config/targets.py refuses them in a job's target).
HOOK_VARIABLES: frozenset[str] = frozenset(_HOOK_GETTERS)
KNOWN_VARIABLES: frozenset[str] = frozenset(_GETTERS)
_KNOWN_LIST = (", ".join(sorted(KNOWN_VARIABLES - HOOK_VARIABLES))
               + "; in on_failure and on_recovery also: " + ", ".join(sorted(HOOK_VARIABLES)))


# --- parsing -------------------------------------------------------------------------

# A compiled template: (literal text, variable name or None) pairs, in order.
_Pieces = tuple[tuple[str, str | None], ...]


@functools.lru_cache(maxsize=1024)
def _compile(text: str) -> _Pieces:
    """Split a template into literal text and variable names; raise on any error."""
    pieces: list[tuple[str, str | None]] = []
    literal: list[str] = []
    position = 0
    for match in _TOKEN.finditer(text):
        literal.append(text[position : match.start()])
        position = match.end()
        if match.group(0) == _ESCAPE:
            literal.append("${")
            continue
        name, closed = match.group(1), match.group(2)
        if closed is None:
            raise TemplateError(
                f"unterminated ${{ at offset {match.start()}: expected a variable name"
                " and '}'; write $${ for a literal ${"
            )
        if name not in KNOWN_VARIABLES:
            raise TemplateError(
                f"unknown variable ${{{name}}} at offset {match.start()}; known: {_KNOWN_LIST}"
            )
        pieces.append(("".join(literal), name))
        literal = []
    literal.append(text[position:])
    pieces.append(("".join(literal), None))
    return tuple(pieces)


def validate_template(text: str) -> None:
    """Raise TemplateError for an unknown variable or an unterminated `${`."""
    if "${" in text:
        _compile(text)


def hook_only_variables(text: str) -> list[str]:
    """The HOOK_VARIABLES `text` uses (an error anywhere but in a hook); none in a
    template that does not validate, whose own error says more."""
    try:
        return [name for name in template_variables(text) if name in HOOK_VARIABLES]
    except TemplateError:
        return []


def json_escape(value: str) -> str:
    """`value` as the inside of a JSON string: quotes, backslashes and control characters
    escaped, so it can neither end the string it sits in nor add a field. Non-ASCII is
    escaped too (`\\uXXXX`): a lone surrogate from a decoded report then stays sendable."""
    return json.dumps(value)[1:-1]


def template_variables(text: str) -> list[str]:
    """The variable names `text` uses, each once, in order of first use."""
    if "${" not in text:
        return []
    names = (name for _, name in _compile(text) if name is not None)
    return list(dict.fromkeys(names))


def variables(context: TemplateContext) -> dict[str, str]:
    """Every variable's value for `context` (for previews and debugging); the hook
    variables only for a hook's context."""
    moments = _Moments(context)
    return {name: getter(context, moments) for name, getter in _GETTERS.items()
            if context.hook is not None or name not in HOOK_VARIABLES}


def render(text: str, context: TemplateContext, escape: Callable[[str], str] | None = None) -> str:
    """Substitute the variables in `text`; raise TemplateError if it does not validate.

    `escape`, if given, is applied to every substituted value (never to the literal text).
    Only the variables the template uses are computed, and a template is parsed once.
    """
    if "${" not in text:  # also covers any text without variables or escapes
        return text
    pieces = _compile(text)
    moments = _Moments(context)
    out: list[str] = []
    for literal, name in pieces:
        out.append(literal)
        if name is not None:
            value = _GETTERS[name](context, moments)
            out.append(escape(value) if escape is not None else value)
    return "".join(out)
