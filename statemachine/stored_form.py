"""The stored form of a job's policy and of instants, as the job record keeps them
(statemachine/record.py's `record_to_dict` and `record_from_dict`)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, Mapping

from statemachine.calendars import calendars_from_list, calendars_to_list
from statemachine.durations import UTC, parse_instant
from statemachine.policy import Catchup, FanoutPolicy, JobPolicy, Overlap, RetryPolicy

Data = dict[str, Any]  # a JSON-ready dict, as stored


def stored_time(value: datetime | None) -> str | None:
    return None if value is None else _utc_text(value)


@lru_cache(maxsize=4096)  # equal instants in any zone give the same text, so one entry serves them all
def _utc_text(value: datetime) -> str:
    # Microseconds, not the millis of the API: a stored instant must compare
    # exactly as it did before it was stored.
    if value.tzinfo is not UTC:  # astimezone(UTC) of a UTC instant is that instant
        value = value.astimezone(UTC)
    if value.year < 1000:  # strftime does not pad the year to four digits
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    # strftime's text, in half the time of isoformat (a first import spells three per job)
    return "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ" % (value.year, value.month, value.day, value.hour, value.minute,
                                                   value.second, value.microsecond)


def parse_stored_time(value: str | None) -> datetime | None:
    return None if value is None else parse_instant(value)


def required_time(value: str) -> datetime:
    return parse_instant(value)


def millis(value: timedelta) -> int:
    return round(value.total_seconds() * 1000)


def policy_to_dict(policy: JobPolicy) -> Data:
    data = _policy_fields(policy)
    # Written only when set, so that a record of a job without them stays as it was.
    if policy.jitter:
        data["jitter_ms"] = millis(policy.jitter)
    if policy.start is not None:
        data["start"] = stored_time(policy.start)
    if policy.end is not None:
        data["end"] = stored_time(policy.end)
    if policy.exclude:
        data["exclude"] = calendars_to_list(policy.exclude)
    if policy.triggers_on_failure:
        data["triggers_on_failure"] = list(policy.triggers_on_failure)
    if policy.after:
        data["after"] = [list(policy.after), millis(policy.after_window)]
    if policy.reports_to:
        data["reports_to"] = list(policy.reports_to)
    return with_later(data, policy.later)


def later_fields(data: Mapping[str, Any], known: frozenset[str]) -> str:
    """The items of a stored dict that a later release wrote and this one does not know,
    as JSON text with sorted keys ("" for none): what a reader one release ahead of its
    writers ignores and keeps, to write back as they were (`with_later`)."""
    unknown = data.keys() - known
    if not unknown:
        return ""
    return json.dumps({key: data[key] for key in sorted(unknown)}, separators=(",", ":"))


def with_later(data: Data, later: str) -> Data:
    """`data` with the kept fields of a later release (`later_fields`) after its own."""
    if later:
        data.update(json.loads(later))
    return data


def _policy_fields(policy: JobPolicy) -> Data:
    return {
        "schedule": policy.schedule_text,
        "timezone": policy.timezone,
        "at": [stored_time(t) for t in policy.at],
        "overlap": policy.overlap.value,
        "max_concurrent": policy.max_concurrent,
        "catchup": policy.catchup.value,
        "catchup_window_ms": millis(policy.catchup_window),
        "timeout_ms": millis(policy.timeout),
        "attempt_timeout_ms": millis(policy.attempt_timeout),
        "retry": [
            policy.retry.max_attempts,
            millis(policy.retry.min_backoff),
            millis(policy.retry.max_backoff),
        ],
        "fanout": [policy.fanout.count, millis(policy.fanout.spread)],
        "triggers": list(policy.triggers),
        "throttle": policy.throttle,
        "pause_after_failures": policy.pause_after_failures,
        "notify_failures": policy.notify_failures,
        "notify_recoveries": policy.notify_recoveries,
        "revision": policy.revision,
    }


def policy_from_dict(data: Data) -> JobPolicy:
    attempts, min_backoff, max_backoff = data["retry"]
    count, spread = data["fanout"]
    return JobPolicy(
        schedule_text=data["schedule"],
        timezone=data["timezone"],
        at=tuple(required_time(t) for t in data["at"]),
        overlap=Overlap(data["overlap"]),
        max_concurrent=data["max_concurrent"],
        catchup=Catchup(data["catchup"]),
        catchup_window=timedelta(milliseconds=data["catchup_window_ms"]),
        timeout=timedelta(milliseconds=data["timeout_ms"]),
        attempt_timeout=timedelta(milliseconds=data["attempt_timeout_ms"]),
        retry=RetryPolicy(attempts, timedelta(milliseconds=min_backoff), timedelta(milliseconds=max_backoff)),
        fanout=FanoutPolicy(count, timedelta(milliseconds=spread)),
        triggers=tuple(data["triggers"]),
        # Records written before these fields existed read as "not set".
        throttle=data.get("throttle", ""),
        pause_after_failures=data.get("pause_after_failures", 0),
        notify_failures=data.get("notify_failures", False),
        notify_recoveries=data.get("notify_recoveries", False),
        jitter=timedelta(milliseconds=data.get("jitter_ms", 0)),
        start=parse_stored_time(data.get("start")),
        end=parse_stored_time(data.get("end")),
        exclude=calendars_from_list(data.get("exclude", ())),
        triggers_on_failure=tuple(data.get("triggers_on_failure", ())),
        **_fan_in(data),
        revision=data["revision"],
        later=later_fields(data, _POLICY_KEYS),
    )


def _fan_in(data: Data) -> Data:
    """The fan-in fields, absent from the records of jobs without them."""
    found: Data = {}
    if "after" in data:
        upstream, window_ms = data["after"]
        found.update(after=tuple(upstream), after_window=timedelta(milliseconds=window_ms))
    if "reports_to" in data:
        found["reports_to"] = tuple(data["reports_to"])
    return found


# Every key policy_to_dict writes; any other is a later release's, kept as it was.
_POLICY_KEYS = frozenset({
    "schedule", "timezone", "at", "overlap", "max_concurrent", "catchup", "catchup_window_ms", "timeout_ms",
    "attempt_timeout_ms", "retry", "fanout", "triggers", "throttle", "pause_after_failures", "notify_failures",
    "notify_recoveries", "revision", "jitter_ms", "start", "end", "exclude", "triggers_on_failure",
    "after", "reports_to",
})
