"""Durations as users write them (`90s`, `1h30m`, `250ms`) and time formats.

Shared by schedules (`every 10m`), job policies (`timeout: 10m`) and templates.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from functools import lru_cache

_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
}
# `ms` must come before `m` so that `250ms` is not read as 250 minutes and an `s`.
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")

UTC = timezone.utc


class DurationError(ValueError):
    """A duration string that does not follow `<number><unit>...`."""


def parse_duration(text: str) -> timedelta:
    """Parse `<number><unit>` parts (units ms s m h d), e.g. `1h30m` or `0s`."""
    if not isinstance(text, str):
        raise DurationError(f"duration must be a string like '90s', got {text!r}")
    compact = text.strip()
    if not compact:
        raise DurationError("duration is empty; write e.g. '90s' or '1h30m'")
    total = timedelta(0)
    position = 0
    for match in _PART.finditer(compact):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if position != len(compact):
        raise DurationError(
            f"bad duration {text!r}: use <number><unit> with units ms s m h d, e.g. '1h30m'"
        )
    return total


def format_duration(value: timedelta) -> str:
    """The shortest `1h30m`-style spelling of a duration (inverse of parse_duration)."""
    millis = round(value.total_seconds() * 1000)
    if millis == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, millis = divmod(millis, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def parse_instant(text: str) -> datetime:
    """An ISO-8601 timestamp that carries an offset or `Z`, returned in UTC."""
    if not isinstance(text, str):
        raise ValueError(f"timestamp must be a string, got {text!r}")
    return _parse_instant_text(text)


# Instants repeat (a job's times are read and written on every step of its chain), and
# datetimes are immutable, so both directions keep the recent ones.
@lru_cache(maxsize=4096)
def _parse_instant_text(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise ValueError(f"bad ISO-8601 timestamp {text!r}") from None
    if value.tzinfo is None:
        raise ValueError(
            f"timestamp {text!r} has no offset; add 'Z' or an offset such as '+02:00'"
        )
    return value.astimezone(UTC)


@lru_cache(maxsize=4096)
def rfc3339_millis(instant: datetime) -> str:
    """RFC 3339 in UTC with milliseconds: `2018-03-22T00:09:00.000Z`."""
    utc = instant.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
