"""The job record: the whole persisted state of one job, frozen.

The shell stores a record as `record_to_dict(record)` and loads it with
`record_from_dict`; nothing else about a job's scheduling lives anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from enum import Enum
from functools import lru_cache
from typing import Any, TypeVar

from statemachine.durations import UTC, parse_instant
from statemachine.policy import (
    Catchup,
    FanoutPolicy,
    JobPolicy,
    Overlap,
    RetryPolicy,
)

RECORD_VERSION = 1

_FIELD_NAMES: dict[type, frozenset[str]] = {}


Frozen = TypeVar("Frozen")
Data = dict[str, Any]  # a JSON-ready dict, as stored


def evolve(instance: Frozen, **changes: Any) -> Frozen:
    """A copy of a frozen dataclass with some fields changed.

    What `dataclasses.replace` does, without re-running `__init__`: a step copies
    the record several times, and this is ten times faster. Unknown field names
    are still refused.
    """
    kind = type(instance)
    names = _FIELD_NAMES.get(kind)
    if names is None:
        names = _FIELD_NAMES[kind] = frozenset(f.name for f in fields(kind))  # type: ignore[arg-type]
    if not changes.keys() <= names:
        raise TypeError(f"{kind.__name__} has no field {sorted(changes.keys() - names)}")
    clone: Frozen = object.__new__(kind)
    clone.__dict__.update(instance.__dict__)
    clone.__dict__.update(changes)
    return clone


class JobState(str, Enum):
    SCHEDULED = "SCHEDULED"  # waiting for its next tick
    QUEUED = "QUEUED"  # an invocation is created, no attempt has started yet
    RUNNING = "RUNNING"  # an attempt of an invocation has started
    PAUSED = "PAUSED"
    DISABLED = "DISABLED"
    DONE = "DONE"  # nothing will ever fire again by the clock (e.g. all `at` times passed)


@dataclass(frozen=True)
class Occurrence:
    """An occurrence waiting in the overlap buffer."""

    invocation_id: str
    scheduled_time: datetime
    trigger: str


@dataclass(frozen=True)
class ActiveInvocation:
    """An invocation that has not reached a terminal status.

    Per-event progress is kept in bit masks (bit i = event i) so that a fan-out
    of many events stays a few integers.
    """

    invocation_id: str
    scheduled_time: datetime
    trigger: str
    deadline: datetime
    event_count: int = 1
    attempts: tuple[int, ...] = (1,)  # the current attempt of each event
    started_mask: int = 0  # the current attempt has started (delivery in flight or done)
    accepted_mask: int = 0  # the target answered 202: the event waits for its completion
    done_mask: int = 0  # the event reached its final outcome
    failed_mask: int = 0  # ... and that outcome was a failure
    failure_reason: str = ""  # the first final failure, shown as the invocation's reason
    started_at: datetime | None = None  # when the latest attempt of any event started
    # By when every event not yet started should have started; the watchdog
    # re-issues start tasks past it. None while nothing is waiting to start.
    expect_by: datetime | None = None

    @property
    def all_events_mask(self) -> int:
        return (1 << self.event_count) - 1

    @property
    def finished(self) -> bool:
        return self.done_mask == self.all_events_mask

    @property
    def has_started(self) -> bool:
        """Some attempt of some event has begun (a retry waiting, or an attempt lost
        and re-issued by the watchdog, counts)."""
        return (bool(self.started_mask | self.done_mask) or any(a > 1 for a in self.attempts)
                or self.started_at is not None)

    def event_done(self, index: int) -> bool:
        return bool(self.done_mask >> index & 1)


@dataclass(frozen=True)
class JobRecord:
    project: str
    job_id: str
    state: JobState = JobState.DISABLED
    policy: JobPolicy | None = None
    disabled: bool = True
    paused: bool = False
    pause_reason: str = ""
    paused_at: datetime | None = None
    # Bumped when the timing of the job changes; ticks carry it in their nonce.
    generation: int = 0
    # Counts every nonce handed out, so that no two ticks share one.
    nonce_counter: int = 0
    tick_at: datetime | None = None
    tick_nonce: str | None = None
    # Every fire time at or before this instant has been handled.
    scheduled_until: datetime | None = None
    # Set on resume: fire times up to here fell due during the pause and are
    # recorded SKIPPED/paused as the following ticks come to them.
    paused_through: datetime | None = None
    active: tuple[ActiveInvocation, ...] = ()
    buffered: tuple[Occurrence, ...] = ()
    watchdog_at: datetime | None = None
    consecutive_failures: int = 0
    last_finished_at: datetime | None = None

    @property
    def live_policy(self) -> JobPolicy:
        """The policy of a job that has been enabled: every step that plans or runs an
        invocation has one (a record without a policy is only ever enabled)."""
        if self.policy is None:
            raise ValueError(f"job {self.project}/{self.job_id} has no policy yet")
        return self.policy

    def find_active(self, invocation_id: str) -> ActiveInvocation | None:
        for entry in self.active:
            if entry.invocation_id == invocation_id:
                return entry
        return None

    def with_active(self, entry: ActiveInvocation) -> "JobRecord":
        """Replace the active entry with the same id."""
        return evolve(
            self,
            active=tuple(entry if e.invocation_id == entry.invocation_id else e for e in self.active),
        )

    def without_active(self, invocation_id: str) -> "JobRecord":
        return evolve(self, active=tuple(e for e in self.active if e.invocation_id != invocation_id))


def new_record(project: str, job_id: str) -> JobRecord:
    """A job that exists but was never enabled: it waits for JobEnabled."""
    return JobRecord(project=project, job_id=job_id)


# --- serialization -------------------------------------------------------------

def _time(value: datetime | None) -> str | None:
    return None if value is None else _utc_text(value)


@lru_cache(maxsize=4096)  # equal instants in any zone give the same text, so one entry serves them all
def _utc_text(value: datetime) -> str:
    # Microseconds, not the millis of the API: a stored instant must compare
    # exactly as it did before it was stored.
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(value: str | None) -> datetime | None:
    return None if value is None else parse_instant(value)


def _required_time(value: str) -> datetime:
    return parse_instant(value)


def _millis(value: timedelta) -> int:
    return round(value.total_seconds() * 1000)


def policy_to_dict(policy: JobPolicy) -> Data:
    return {
        "schedule": policy.schedule_text,
        "timezone": policy.timezone,
        "at": [_time(t) for t in policy.at],
        "overlap": policy.overlap.value,
        "max_concurrent": policy.max_concurrent,
        "catchup": policy.catchup.value,
        "catchup_window_ms": _millis(policy.catchup_window),
        "timeout_ms": _millis(policy.timeout),
        "attempt_timeout_ms": _millis(policy.attempt_timeout),
        "retry": [
            policy.retry.max_attempts,
            _millis(policy.retry.min_backoff),
            _millis(policy.retry.max_backoff),
        ],
        "fanout": [policy.fanout.count, _millis(policy.fanout.spread)],
        "triggers": list(policy.triggers),
        "throttle": policy.throttle,
        "pause_after_failures": policy.pause_after_failures,
        "notify_failures": policy.notify_failures,
        "revision": policy.revision,
    }


def policy_from_dict(data: Data) -> JobPolicy:
    attempts, min_backoff, max_backoff = data["retry"]
    count, spread = data["fanout"]
    return JobPolicy(
        schedule_text=data["schedule"],
        timezone=data["timezone"],
        at=tuple(_required_time(t) for t in data["at"]),
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
        revision=data["revision"],
    )


def _active_to_dict(entry: ActiveInvocation) -> Data:
    return {
        "id": entry.invocation_id,
        "scheduled_time": _time(entry.scheduled_time),
        "trigger": entry.trigger,
        "deadline": _time(entry.deadline),
        "event_count": entry.event_count,
        "attempts": list(entry.attempts),
        # Masks as hex strings: JSON numbers lose precision past 2**53.
        "started": format(entry.started_mask, "x"),
        "accepted": format(entry.accepted_mask, "x"),
        "done": format(entry.done_mask, "x"),
        "failed": format(entry.failed_mask, "x"),
        "failure_reason": entry.failure_reason,
        "started_at": _time(entry.started_at),
        "expect_by": _time(entry.expect_by),
    }


def _active_from_dict(data: Data) -> ActiveInvocation:
    return ActiveInvocation(
        invocation_id=data["id"],
        scheduled_time=_required_time(data["scheduled_time"]),
        trigger=data["trigger"],
        deadline=_required_time(data["deadline"]),
        event_count=data["event_count"],
        attempts=tuple(data["attempts"]),
        started_mask=int(data["started"], 16),
        accepted_mask=int(data["accepted"], 16),
        done_mask=int(data["done"], 16),
        failed_mask=int(data["failed"], 16),
        failure_reason=data["failure_reason"],
        started_at=_parse_time(data["started_at"]),
        expect_by=_parse_time(data["expect_by"]),
    )


def record_to_dict(record: JobRecord) -> Data:
    """A JSON-ready dict of the record; `record_from_dict` is its inverse."""
    return {
        "version": RECORD_VERSION,
        "project": record.project,
        "job_id": record.job_id,
        "state": record.state.value,
        "policy": None if record.policy is None else policy_to_dict(record.policy),
        "disabled": record.disabled,
        "paused": record.paused,
        "pause_reason": record.pause_reason,
        "paused_at": _time(record.paused_at),
        "generation": record.generation,
        "nonce_counter": record.nonce_counter,
        "tick_at": _time(record.tick_at),
        "tick_nonce": record.tick_nonce,
        "scheduled_until": _time(record.scheduled_until),
        "paused_through": _time(record.paused_through),
        "active": [_active_to_dict(e) for e in record.active],
        "buffered": [
            [o.invocation_id, _time(o.scheduled_time), o.trigger] for o in record.buffered
        ],
        "watchdog_at": _time(record.watchdog_at),
        "consecutive_failures": record.consecutive_failures,
        "last_finished_at": _time(record.last_finished_at),
    }


def record_from_dict(data: Data) -> JobRecord:
    if data.get("version") != RECORD_VERSION:
        raise ValueError(f"job record version {data.get('version')!r} is not {RECORD_VERSION}")
    return JobRecord(
        project=data["project"],
        job_id=data["job_id"],
        state=JobState(data["state"]),
        policy=None if data["policy"] is None else policy_from_dict(data["policy"]),
        disabled=data["disabled"],
        paused=data["paused"],
        pause_reason=data["pause_reason"],
        paused_at=_parse_time(data["paused_at"]),
        generation=data["generation"],
        nonce_counter=data["nonce_counter"],
        tick_at=_parse_time(data["tick_at"]),
        tick_nonce=data["tick_nonce"],
        scheduled_until=_parse_time(data["scheduled_until"]),
        paused_through=_parse_time(data.get("paused_through")),
        active=tuple(_active_from_dict(e) for e in data["active"]),
        buffered=tuple(
            Occurrence(i, _required_time(t), trigger) for i, t, trigger in data["buffered"]
        ),
        watchdog_at=_parse_time(data["watchdog_at"]),
        consecutive_failures=data["consecutive_failures"],
        last_finished_at=_parse_time(data["last_finished_at"]),
    )
