"""The optional job fields that describe a job and bound its occurrences:
`description`, `labels`, `jitter`, `start` and `end` (docs/REFERENCE.md section 2).

`jitter` and `labels` may also be given in the project's `defaults` (a job's labels are
merged over the default ones key by key; a job's jitter replaces the default one); the
other three belong to one job. None of them is stored when not set, so a definition
written before they existed reads, and hashes, as it did.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from config.checks import Checker, Invalid
from config.yamlsource import Path
from statemachine.durations import UTC, format_duration
from statemachine.schedule import EverySchedule, is_clock_driven, parse_schedule

__all__ = ["DEFAULTABLE", "EXTRA_FIELDS", "Extras", "LABEL_KEY", "MAX_DESCRIPTION", "MAX_JITTER",
           "MAX_LABEL_VALUE", "MAX_LABELS", "PER_JOB", "parse_extras"]

MAX_DESCRIPTION = 1_000  # characters
LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
MAX_LABEL_VALUE = 63  # characters, as Kubernetes label values
MAX_LABELS = 64
# A fixed bound: jitter spreads load over seconds or minutes, and a longer delay would
# hold an invocation QUEUED (and its job's overlap slot) for longer than any use needs.
MAX_JITTER = timedelta(hours=1)

PER_JOB = ("description", "start", "end")
DEFAULTABLE = ("jitter", "labels")
EXTRA_FIELDS = ("description", "labels", "jitter", "start", "end")


@dataclass(frozen=True)
class Extras:
    """The fields as the definition spells them and as the policy reads them."""

    description: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    jitter: timedelta = timedelta(0)
    start: datetime | None = None
    end: datetime | None = None

    def definition_fields(self) -> dict[str, Any]:
        return {"description": self.description, "labels": dict(self.labels) or None,
                "jitter": format_duration(self.jitter) if self.jitter else None,
                "start": _rfc3339(self.start), "end": _rfc3339(self.end)}

    def policy_fields(self) -> dict[str, Any]:
        return {"jitter": self.jitter, "start": self.start, "end": self.end}


def parse_jitter(check: Checker, path: Path, value: Any) -> timedelta:
    jitter = check.duration(path, value)
    if jitter > MAX_JITTER:
        check.fail(path, f"must be at most {format_duration(MAX_JITTER)}, got {format_duration(jitter)}")
    return jitter


def parse_labels(check: Checker, path: Path, value: Any) -> dict[str, str]:
    given = check.mapping(path, value, "{team: data, tier: \"1\"}")
    if len(given) > MAX_LABELS:
        check.fail(path, f"{len(given):,} labels; at most {MAX_LABELS} are allowed")
    labels = {}
    for key, item in given.items():
        where = path + (key,)
        if not isinstance(key, str) or not LABEL_KEY.fullmatch(key):
            check.report(where, f"label key {key!r} must match ^[a-z][a-z0-9_-]{{0,62}}$")
        elif not isinstance(item, str):
            check.report(where, f"label value must be a string (quote it: \"{item}\"), got {item!r}")
        elif len(item) > MAX_LABEL_VALUE:
            check.report(where, f"label value has {len(item)} characters; at most {MAX_LABEL_VALUE}")
        else:
            labels[key] = item
    if len(labels) != len(given):
        raise Invalid("bad labels")  # each one is already reported at its own line
    return labels


def parse_extras(check: Checker, path: Path, entry: dict[str, Any], own: dict[str, Any], defaults: dict[str, Any],
                 timing: tuple[str, Any] | None, timezone: str,
                 instant: Any) -> Extras:
    """The entry's extras, defaults applied; errors recorded in `check`. `own` holds the
    defaultable fields the entry sets, parsed; `instant` parses one timestamp field."""
    description = None
    if entry.get("description") is not None:
        description = check.attempt(lambda: _description(check, path + ("description",), entry["description"]))
    start, end = (check.attempt(lambda: instant(check, path + (name,), entry[name]))
                  if entry.get(name) is not None else None for name in ("start", "end"))
    if start is not None and end is not None and start >= end:
        check.report(path + ("end",), f"must be after start ({_rfc3339(start)}), got {_rfc3339(end)}")
    jitter = own.get("jitter", defaults.get("jitter", timedelta(0)))
    schedule = _schedule(timing, timezone)
    if (start or end) and schedule is not None and not is_clock_driven(schedule):
        check.report(path + ("start" if start else "end",), "only applies to a clock-driven schedule "
                     "(cron, every or at), not to this job's schedule")
    if isinstance(schedule, EverySchedule) and jitter >= schedule.period:
        check.report(path + ("jitter",), f"{format_duration(jitter)} must be less than the schedule's "
                     f"period {format_duration(schedule.period)}")
    labels = {**defaults.get("labels", {}), **own.get("labels", {})}
    return Extras(description, labels, jitter, start, end)


def _description(check: Checker, path: Path, value: Any) -> str:
    text = check.string(path, value)
    if len(text) > MAX_DESCRIPTION:
        check.fail(path, f"has {len(text):,} characters; at most {MAX_DESCRIPTION:,} are allowed")
    return text


def _schedule(timing: tuple[str, Any] | None, timezone: str) -> Any:
    if timing is None or timing[0] != "schedule":
        return None  # `at` is clock-driven; a bad schedule is reported already
    return parse_schedule(timing[1], timezone)


def _rfc3339(instant: datetime | None) -> str | None:
    return None if instant is None else instant.astimezone(UTC).isoformat().replace("+00:00", "Z")
