"""One job entry -> JobConfig: fields checked, defaults applied, policy and definition built.

Defaults, where neither the entry nor the project's `defaults` block sets a field, are
`config.model.BUILTIN_DEFAULTS`, which are JobPolicy's field defaults (statemachine/policy.py).

How defaults combine: a job's field replaces the project default, except in the maps
catchup, retry and fanout, which combine field by field (a job's `retry: {max_attempts: 5}`
keeps the project's backoffs). A field set to null counts as not set.

Checks on what a field refers to (throttle names, triggered jobs) are made only against
the names the caller supplies; `None` means "not known here, do not check".
`max_concurrent` above 1 is an error unless the job's overlap is `allow`.

The definition (a JobDefinition) spells durations canonically (`90s` -> `1m30s`), schedules
with single spaces, `at` times as sorted, de-duplicated RFC 3339 UTC strings
(`2027-01-04T08:00:00Z`, with a fraction only when one was given), and has every field,
defaults included; the canonical JSON of its `to_dict()` hashes to `policy.revision`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import cached_property, partial
from typing import Any, Collection, Mapping

from config import job_extras, limits
from config.calendars import parse_exclude
from config.checks import Checker, Invalid, Parser
from config.fanin import AFTER_FIELDS, known_upstream, parse_fan_in
from config.job_results import build_definition, build_policy, revision_of
from config.model import BUILTIN_DEFAULTS, JOB_ID, SUCCEEDED, TRIGGER_CONDITIONS, JobConfig
from config.targets import TargetRules, parse_target
from config.yamlsource import Path
from statemachine.calendars import Calendar, calendars_to_list
from statemachine.durations import UTC, format_duration, parse_instant
from statemachine.policy import Catchup, Overlap
from statemachine.schedule import AtSchedule, ScheduleError, load_zone, parse_schedule

__all__ = [
    "JOB_FIELDS", "JobContext", "PER_JOB_FIELDS", "defaults_json", "entry_id",
    "parse_defaults", "parse_entry", "revision_of", "trigger_name",
]

JOB_FIELDS = ("id", "schedule", "at", "timezone", "disabled", "overlap", "max_concurrent",
              "catchup", "timeout", "retry", "fanout", "throttle", "triggers", "target",
              "pause_after_failures", "on_failure", "on_recovery", "exclude") + job_extras.EXTRA_FIELDS + AFTER_FIELDS
HOOK_FIELDS = ("on_failure", "on_recovery")
PER_JOB_FIELDS = ("id", "schedule", "at", "target", *HOOK_FIELDS, "exclude") + job_extras.PER_JOB + AFTER_FIELDS
_NESTED = ("catchup", "retry", "fanout")


@dataclass(frozen=True)
class JobContext:
    """What a job entry is checked against besides itself."""

    defaults: dict[str, Any]  # from parse_defaults: the fields the project's defaults block sets
    rules: TargetRules
    throttles: Collection[str] | None = None  # None: references are not checked
    known_jobs: Collection[str] | None = None  # None: triggers are not checked
    calendars: Mapping[str, Calendar] = field(default_factory=dict)  # what `exclude` may name

    @cached_property
    def resolved(self) -> dict[str, Any]:
        """What a job that sets none of the defaultable fields has (`_resolve`): built
        once for the project's jobs, shared by them and never changed."""
        return _resolve_defaults(self.defaults)


# --- one field at a time -------------------------------------------------------------

def _timezone(check: Checker, path: Path, value: Any) -> str:
    name = check.string(path, value, empty=False)
    try:
        load_zone(name)
    except ScheduleError as error:
        check.fail(path, str(error))
    return name


def _name(check: Checker, path: Path, value: Any) -> str:
    name = check.string(path, value, empty=False)
    if not JOB_ID.fullmatch(name):
        check.fail(path, f"{name!r} is not a valid name (letters, digits, '_', '.', '-'; "
                         "not only dots)")
    return name


def _triggers(check: Checker, path: Path, value: Any) -> tuple[str | dict[str, str], ...]:
    """Each entry an id (`on: succeeded`, as before conditions existed) or {job, on}; kept
    as an id when its condition is `succeeded`, so such a job's definition is unchanged."""
    items = check.listing(path, value)
    edges = [check.attempt(lambda: _trigger(check, path + (index,), item)) for index, item in enumerate(items)]
    kept = {json.dumps(edge, sort_keys=True): edge for edge in edges if edge is not None}
    return tuple(kept.values())


def _trigger(check: Checker, path: Path, item: Any) -> str | dict[str, str]:
    if not isinstance(item, dict):
        return _name(check, path, item)
    check.known_fields(path, item, ("job", "on"))
    if item.get("job") is None:
        check.fail(path, "needs job, e.g. {job: notify-failure, on: failed}")
    name = _name(check, path + ("job",), item["job"])
    on = check.choice(path + ("on",), item.get("on", SUCCEEDED), TRIGGER_CONDITIONS)
    return name if on == SUCCEEDED else {"job": name, "on": on}


def trigger_name(edge: str | dict[str, str]) -> str:
    return edge if isinstance(edge, str) else edge["job"]


def _submap(fields: dict[str, Parser], example: str) -> Parser:
    """A parser for a map of sub-fields; returns only those given (for field-wise merges)."""
    def parse(check: Checker, path: Path, value: Any) -> dict[str, Any]:
        given = check.mapping(path, value, example)
        check.known_fields(path, given, fields)
        parsed = {}
        for key, sub in given.items():
            if key in fields and sub is not None:
                result = check.attempt(lambda: fields[key](check, path + (key,), sub), _MISSING)
                if result is not _MISSING:
                    parsed[key] = result
        return parsed
    return parse


def _duration(check: Checker, path: Path, value: Any) -> timedelta:
    return check.duration(path, value)


def _positive(check: Checker, path: Path, value: Any) -> int:
    return check.integer(path, value, 1)


def _min_backoff(check: Checker, path: Path, value: Any) -> timedelta:
    backoff = check.duration(path, value)
    if backoff < limits.MIN_BACKOFF:
        check.fail(path, f"must be at least {format_duration(limits.MIN_BACKOFF)}, got "
                         f"{format_duration(backoff)} (a failing target is not retried flat out)")
    return backoff


def _check_timeout(check: Checker, path: Path, timeout: timedelta, backend: str) -> None:
    most = limits.MAX_JOB_TIMEOUT[backend]
    if timeout > most:
        check.report(path + ("timeout",), f"{format_duration(timeout)} is more than the {format_duration(most)} "
                                          f"an invocation may run on the {backend} backend")


_MISSING = object()

_SHARED: dict[str, Parser] = {
    "timezone": _timezone,
    "disabled": lambda check, path, value: check.boolean(path, value),
    "overlap": lambda check, path, value: Overlap(
        check.choice(path, value, [item.value for item in Overlap])),
    "max_concurrent": _positive,
    "catchup": _submap({
        "policy": lambda check, path, value: Catchup(
            check.choice(path, value, [item.value for item in Catchup])),
        "window": _duration,
    }, "{policy: latest, window: 1h}"),
    "timeout": lambda check, path, value: check.duration(path, value, positive=True),
    "retry": _submap({
        "max_attempts": lambda check, path, value: check.integer(path, value, 1, limits.MAX_ATTEMPTS),
        "min_backoff": _min_backoff,
        "max_backoff": _duration,
    }, "{max_attempts: 3, min_backoff: 1s, max_backoff: 5m}"),
    "fanout": _submap({
        "count": lambda check, path, value: check.integer(path, value, 1, 10_000),
        "spread": _duration,
    }, "{count: 10, spread: 1m}"),
    "throttle": _name,
    "triggers": _triggers,
    "pause_after_failures": _positive,
    "jitter": job_extras.parse_jitter,
    "labels": job_extras.parse_labels,
}


def _shared_fields(check: Checker, path: Path, entry: dict[str, Any]) -> dict[str, Any]:
    """The shared (defaultable) fields `entry` sets validly; errors for the others."""
    parsed: dict[str, Any] = {}
    present = entry.keys() & _SHARED.keys()  # most entries set none of them
    if not present:
        return parsed
    for key, parse in _SHARED.items():
        if key in present and entry[key] is not None:
            result = check.attempt(lambda: parse(check, path + (key,), entry[key]), _MISSING)
            if result is not _MISSING:
                parsed[key] = result
    return parsed


def _resolve(own: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """Each field of BUILTIN_DEFAULTS as the entry (`own`) or else the defaults block sets
    it, or else builtin; the nested maps merged field by field."""
    return _over(_resolve_defaults(defaults), own)


def _resolve_defaults(defaults: dict[str, Any]) -> dict[str, Any]:
    return {key: {**builtin, **defaults.get(key, {})} if key in _NESTED else defaults.get(key, builtin)
            for key, builtin in BUILTIN_DEFAULTS.items()}


def _over(base: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """`base` (resolved defaults) with what the entry sets; `base` itself, shared and
    never changed, when it sets nothing of it (most entries)."""
    if not own.keys() & BUILTIN_DEFAULTS.keys():
        return base
    resolved = dict(base)
    for key in own.keys() & BUILTIN_DEFAULTS.keys():
        resolved[key] = {**base[key], **own[key]} if key in _NESTED else own[key]
    return resolved


def _check_backoff(check: Checker, path: Path, retry: dict[str, Any]) -> None:
    if retry["min_backoff"] > retry["max_backoff"]:
        check.report(path + ("retry",),
                     f"min_backoff {format_duration(retry['min_backoff'])} is more than "
                     f"max_backoff {format_duration(retry['max_backoff'])}")


# --- the defaults block --------------------------------------------------------------

def parse_defaults(check: Checker, path: Path, value: Any) -> dict[str, Any]:
    """The fields a `defaults` block sets, parsed; errors recorded in `check`."""
    if value is None:
        return {}
    block = check.mapping(path, value, "{timezone: America/Los_Angeles}")
    for key in block:
        if key in PER_JOB_FIELDS:
            named = "id, schedule, at and target are" if key in PER_JOB_FIELDS[:4] else f"{key} is"
            check.report(path + (key,), f"cannot have a default: {named} set in each job")
    check.known_fields(path, {k: v for k, v in block.items() if k not in PER_JOB_FIELDS},
                       _SHARED)
    parsed = _shared_fields(check, path, block)
    _check_backoff(check, path, _resolve(parsed, {})["retry"])
    return parsed


def defaults_json(parsed: dict[str, Any]) -> dict[str, Any]:
    """parse_defaults' result as JSON-ready data (parse_defaults reads it back)."""
    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: plain(item) for key, item in value.items()}
        if isinstance(value, timedelta):
            return format_duration(value)
        if isinstance(value, (Overlap, Catchup)):
            return value.value
        if isinstance(value, tuple):
            return list(value)
        return value
    return {key: plain(item) for key, item in parsed.items()}


# --- a job entry ---------------------------------------------------------------------

def entry_id(check: Checker, path: Path, entry: dict[str, Any]) -> str | None:
    """The entry's `id` if it is valid (an error otherwise)."""
    value = entry.get("id")
    if value is None:
        check.report(path, "needs an id", named=False)
        return None
    if not isinstance(value, str) or not JOB_ID.fullmatch(value):
        shown = repr(value) if isinstance(value, str) else str(value)
        check.report(path + ("id",), f"{shown} is not a valid job id: use 1 to 100 letters, "
                                     "digits, '_', '.' or '-', not only dots")
        return None
    return value


def parse_entry(check: Checker, path: Path, entry: dict[str, Any], job_id: str,
                context: JobContext) -> JobConfig | None:
    """The job, or None with its errors recorded in `check`."""
    check.known_fields(path, entry, JOB_FIELDS)
    own = _shared_fields(check, path, entry)
    resolved = _over(context.resolved, own)
    timing = check.attempt(lambda: _timing(check, path, entry, resolved["timezone"]))
    target = check.attempt(lambda: parse_target(check, path + ("target",),
                                                entry.get("target"), context.rules))
    hooks = {name: check.attempt(partial(parse_target, check, path + (name,), entry[name], context.rules, hook=True))
             for name in HOOK_FIELDS if entry.get(name) is not None}
    if "retry" in own:
        _check_backoff(check, path, resolved["retry"])
    _check_timeout(check, path, resolved["timeout"], context.rules.backend)
    if own.get("max_concurrent", 1) > 1 and resolved["overlap"] is not Overlap.ALLOW:
        check.report(path + ("max_concurrent",), "only meaningful with overlap: allow "
                     f"(this job's overlap is {resolved['overlap'].value})")
    _check_references(check, path, entry, own, context)
    extras = job_extras.parse_extras(check, path, entry, own, context.defaults, timing, resolved["timezone"], _instant)
    exclude = () if entry.get("exclude") is None else check.attempt(
        lambda: parse_exclude(check, path + ("exclude",), entry["exclude"], context.calendars), ())
    fan_in = parse_fan_in(check, path, entry, job_id)
    known_upstream(check, path, entry, fan_in, context.known_jobs)
    if check.errors or timing is None or target is None:
        return None
    definition = build_definition(job_id, timing, resolved, target[0], {n: h[0] for n, h in hooks.items()},
                                  {**extras.definition_fields(), "exclude": tuple(calendars_to_list(exclude)) or None,
                                   **fan_in.definition_fields()})
    policy = build_policy(timing, resolved, target[1], revision_of(definition), hooks,
                          {**extras.policy_fields(), "exclude": exclude, **fan_in.policy_fields()})
    return JobConfig(job_id, policy, definition, resolved["disabled"], check.lines.line(path))


def _timing(check: Checker, path: Path, entry: dict[str, Any], timezone: str) -> tuple[str, Any]:
    """("schedule", normalized text) or ("at", sorted UTC instants)."""
    has_schedule, has_at = entry.get("schedule") is not None, entry.get("at") is not None
    if has_schedule and has_at:
        check.fail(path + ("at",), "has both schedule and at; give exactly one", named=False)
    if not has_schedule and not has_at and entry.get("after") is not None:
        return "schedule", "triggered"  # a fan-in job's only timing (config/fanin.py)
    if not has_schedule and not has_at:
        check.fail(path, "needs a schedule or at (write schedule: triggered for a job that "
                         "runs only when triggered)", named=False)
    if has_at:
        return "at", _at(check, path + ("at",), entry["at"])
    where = path + ("schedule",)
    text = " ".join(check.string(where, entry["schedule"], empty=False).split())
    try:
        parse_schedule(text, timezone)
    except ScheduleError as error:
        check.fail(where, str(error))
    return "schedule", text


def _at(check: Checker, path: Path, value: Any) -> tuple[datetime, ...]:
    items = check.listing(path, value)
    if not items:
        check.fail(path, "needs at least one timestamp, e.g. [\"2027-01-04T09:00:00Z\"]")
    if len(items) > limits.MAX_AT_TIMES:
        check.fail(path, limits.count_error("timestamps", len(items), limits.MAX_AT_TIMES))
    times = [check.attempt(lambda: _instant(check, path + (index,), item))
             for index, item in enumerate(items)]
    if None in times:
        raise Invalid("bad timestamps")  # each one is already reported at its own line
    return AtSchedule(tuple(times)).times


def _instant(check: Checker, path: Path, value: Any) -> datetime:
    # YAML turns unquoted timestamps into datetimes (naive ones when they have no offset)
    # and dates; strings come from quoted YAML and from JSON.
    if isinstance(value, datetime):
        if value.utcoffset() is None:
            check.fail(path, f"timestamp '{value.isoformat()}' has no offset; add 'Z' or an "
                             "offset such as '+02:00'")
        return value.astimezone(UTC)
    if isinstance(value, date):
        check.fail(path, f"{value.isoformat()} is a date; write a time with an offset, "
                         f"e.g. {value.isoformat()}T09:00:00Z")
    if not isinstance(value, str):
        check.fail(path, f"expected a timestamp such as 2027-01-04T09:00:00Z, got {value!r}")
    try:
        return parse_instant(value)
    except ValueError as error:
        check.fail(path, str(error))


def _check_references(check: Checker, path: Path, entry: dict[str, Any], own: dict[str, Any],
                      context: JobContext) -> None:
    throttle = own.get("throttle")
    if throttle is not None and context.throttles is not None \
            and throttle not in context.throttles:
        defined = ", ".join(sorted(context.throttles)) or "none"
        check.report(path + ("throttle",),
                     f"unknown throttle '{throttle}' (the project's throttles: {defined})")
    if context.known_jobs is None:
        return
    raw = entry.get("triggers") or []
    for edge in own.get("triggers", ()):
        name = trigger_name(edge)
        if name not in context.known_jobs:
            index = next(i for i, item in enumerate(raw) if name in (item, isinstance(item, dict) and item.get("job")))
            check.report(path + ("triggers", index), f"unknown job '{name}' in this project")
