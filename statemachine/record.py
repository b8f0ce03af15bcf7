"""The job record: the whole persisted state of one job, frozen.

The shell stores a record as `record_form.record_to_dict(record)` and loads it with
`record_form.record_from_dict`; nothing else about a job's scheduling lives anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from enum import Enum
from typing import Any, TypeVar

from statemachine.policy import JobPolicy
from statemachine.runs import Run

# 2: a fan-out invocation's events live in rows of their own (statemachine/fanout.py);
# a version 1 record reads as version 2 whose active entries keep their events inline.
# A record is written at the lowest version that holds it (`written_version`): 1 unless
# an entry keeps its events in rows, which only the operator's switch starts
# (Tuning.fanout_rows), so the release before this one reads what this one writes.
RECORD_VERSION = 2
# Readers are one release ahead of writers: the next version (3) is read too, under the
# rule that it may only add fields, which this release ignores and keeps (`later`) and
# writes back as it read them, its version included (docs/DEPLOY.md, rolling back).
READABLE_VERSIONS = (1, 2, RECORD_VERSION + 1)

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
        # arg-type: Frozen stands for any frozen dataclass, which a TypeVar's bound cannot say.
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
    """An occurrence; in `JobRecord.buffered`, one that waits."""

    invocation_id: str
    scheduled_time: datetime
    trigger: str
    # In the buffer: the fire times waiting in `runs` up to this instant start before
    # it (they came first). None: it starts before every run (so do those of records
    # written before runs existed, which were all in `buffered`).
    behind: datetime | None = None


@dataclass(frozen=True)
class ActiveInvocation:
    """An invocation that has not reached a terminal status.

    With `events_in_rows` (every fan-out invocation started by this version), each
    event's progress is a row of its own (statemachine/fanout.py) and the per-event
    fields below stay empty, so the entry's size does not depend on the count.
    Otherwise (one event; or a fan-out begun before version 2) they hold it: bit i
    of each mask is event i.
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
    events_in_rows: bool = False
    # The nonce of the tick whose step delivered its attempt inline: a queue's retry
    # of that tick task redelivers the attempt (ticks.redeliver_inline).
    started_by: str = ""
    # Issues of the current attempt so far (its fencing token; Deliver.epoch): every
    # commit that sends it again makes a result of an earlier send stale.
    epoch: int = 0
    # Attempts interrupted and sent again without counting against `max_attempts`
    # (statemachine/invocations.py, on_interrupted): `attempts` minus this is how many
    # of them counted. Inline events of one invocation only.
    interruptions: int = 0
    # A later release's fields of the entry, kept as read (stored_form.later_fields).
    later: str = ""

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
class Awaited:
    """A scheduled time a fan-in job (`after`) waits on (statemachine/fanin.py): the
    upstream jobs that SUCCEEDED for it so far, and until when the others may. `decided`
    once it started or was skipped; kept until `until` so that a late report changes nothing."""

    scheduled_time: datetime
    until: datetime
    succeeded: tuple[str, ...] = ()
    decided: bool = False


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
    # Who paused it (an API principal, or "local"); "" when the job paused itself
    # (pause_after_failures) or was paused before this was recorded.
    paused_by: str = ""
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
    # What waits for the overlap policy to let it start, in two queues merged by
    # `Occurrence.behind` (statemachine/waiting.py): occurrences one by one (triggered
    # ones, whose number is capped, and a relative schedule's, at most one), and runs
    # of a clock-driven schedule's fire times, whose size does not depend on their length.
    buffered: tuple[Occurrence, ...] = ()
    runs: tuple[Run, ...] = ()
    # No longer waiting: (reason, run) to record SKIPPED with that reason, one batch
    # per tick, so that no commit writes an unbounded number of rows.
    dropping: tuple[tuple[str, Run], ...] = ()
    watchdog_at: datetime | None = None
    consecutive_failures: int = 0
    # FAILED invocations since the last SUCCEEDED one: unlike consecutive_failures, a
    # resume does not reset it, so a job resumed after failing still says it recovered.
    failures_since_success: int = 0
    last_finished_at: datetime | None = None
    # When an invocation last SUCCEEDED (None: never, or not since this field came in).
    last_succeeded_at: datetime | None = None
    # A fan-in job's scheduled times waiting on their upstream jobs, oldest first, at
    # most fanin.MOST_AWAITED (statemachine/fanin.py); empty for every other job.
    awaiting: tuple[Awaited, ...] = ()
    # A later release's fields of the record (its version too, when newer than this
    # one's), kept as read and written back (stored_form.later_fields).
    later: str = ""

    @property
    def live_policy(self) -> JobPolicy:
        """The policy of a job that has been enabled: every step that plans or runs an
        invocation has one (a record without a policy is only ever enabled)."""
        if self.policy is None:
            raise ValueError(f"job {self.project}/{self.job_id} has no policy yet")
        return self.policy

    @property
    def has_waiting(self) -> bool:
        return bool(self.buffered or self.runs)

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
    return evolve(_NEW, project=project, job_id=job_id)  # a copy: every other field at its default


_NEW = JobRecord(project="", job_id="")
