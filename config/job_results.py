"""A checked job entry's results: its definition (what the stores keep and the API
shows), the revision that hashes it, and its policy (what the machine reads). Built by
config/jobs.py from the entry's fields with every default resolved.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, TypeVar

from statemachine.definition import CatchupSpec, FanoutSpec, JobDefinition, RetrySpec
from statemachine.durations import UTC, format_duration
from statemachine.policy import FanoutPolicy, JobPolicy, Overlap, RetryPolicy

__all__ = ["build_definition", "build_policy", "revision_of"]

T = TypeVar("T")


def build_definition(job_id: str, timing: tuple[str, Any], resolved: dict[str, Any], target: dict[str, Any],
                hooks: dict[str, dict[str, Any]], extras: dict[str, Any]) -> JobDefinition:
    kind, when = timing
    catchup, retry, fanout = resolved["catchup"], resolved["retry"], resolved["fanout"]
    allow = resolved["overlap"] is Overlap.ALLOW
    return JobDefinition(
        id=job_id,
        schedule=when if kind == "schedule" else None,
        at=tuple(_rfc3339(t) for t in when) if kind == "at" else None,
        timezone=resolved["timezone"],
        disabled=resolved["disabled"],
        overlap=resolved["overlap"],
        max_concurrent=resolved["max_concurrent"] if allow else 1,
        catchup=_shared(CatchupSpec, catchup["policy"], format_duration(catchup["window"])),
        timeout=format_duration(resolved["timeout"]),
        retry=_shared(RetrySpec, retry["max_attempts"], format_duration(retry["min_backoff"]),
                      format_duration(retry["max_backoff"])),
        fanout=_shared(FanoutSpec, fanout["count"], format_duration(fanout["spread"])),
        throttle=resolved["throttle"],
        triggers=tuple(resolved["triggers"]),
        target=target,
        pause_after_failures=resolved["pause_after_failures"],
        on_failure=hooks.get("on_failure"),
        on_recovery=hooks.get("on_recovery"),
        **extras,
    )


def build_policy(timing: tuple[str, Any], resolved: dict[str, Any], attempt_timeout: timedelta,
            revision: str, hooks: dict[str, Any], extras: dict[str, Any]) -> JobPolicy:
    kind, when = timing
    allow = resolved["overlap"] is Overlap.ALLOW
    return JobPolicy(
        # An `at` job has no schedule text; JobPolicy.schedule reads its times instead.
        schedule_text=when if kind == "schedule" else "",
        timezone=resolved["timezone"],
        at=when if kind == "at" else (),
        overlap=resolved["overlap"],
        max_concurrent=resolved["max_concurrent"] if allow else 1,
        catchup=resolved["catchup"]["policy"],
        catchup_window=resolved["catchup"]["window"],
        timeout=resolved["timeout"],
        attempt_timeout=attempt_timeout,
        retry=_shared(RetryPolicy, **resolved["retry"]),
        fanout=_shared(FanoutPolicy, **resolved["fanout"]),
        triggers=_following(resolved["triggers"], ("succeeded", "finished")),
        triggers_on_failure=_following(resolved["triggers"], ("failed", "finished")),
        throttle=resolved["throttle"] or "",
        pause_after_failures=resolved["pause_after_failures"] or 0,
        notify_failures="on_failure" in hooks,
        notify_recoveries="on_recovery" in hooks,
        revision=revision,
        **extras,
    )


def _following(edges: Any, conditions: tuple[str, ...]) -> tuple[str, ...]:
    """The ids of the `triggers` entries whose condition is one of `conditions` (an id alone
    is `succeeded`)."""
    names = (edge if isinstance(edge, str) else edge["job"] for edge in edges
             if (edge["on"] if isinstance(edge, dict) else "succeeded") in conditions)
    return tuple(dict.fromkeys(names))


@lru_cache(maxsize=256)  # one frozen part for the jobs that spell it alike: fewer objects to build and send
def _shared(kind: type[T], *fields: Any, **named: Any) -> T:
    return kind(*fields, **named)


def _rfc3339(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def revision_of(definition: JobDefinition) -> str:
    """The first 16 hex digits of the sha256 of the definition's canonical JSON."""
    return hashlib.sha256(definition.canonical_json.encode("utf-8")).hexdigest()[:16]
