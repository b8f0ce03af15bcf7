"""The job record: the whole persisted state of one job, frozen.

The shell stores a record as `record_to_dict(record)` and loads it with
`record_from_dict`; nothing else about a job's scheduling lives anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from enum import Enum
from typing import Any, TypeVar

from statemachine.policy import JobPolicy
from statemachine.runs import Run
from statemachine.stored_form import (
    later_fields,
    parse_stored_time,
    policy_from_dict,
    policy_to_dict,
    required_time,
    stored_time,
    with_later,
)

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
    # of that tick task redelivers the attempt (invocations.redeliver_inline).
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


# --- serialization -------------------------------------------------------------

def _active_to_dict(entry: ActiveInvocation) -> Data:
    shared = {
        "id": entry.invocation_id,
        "scheduled_time": stored_time(entry.scheduled_time),
        "trigger": entry.trigger,
        "deadline": stored_time(entry.deadline),
        "event_count": entry.event_count,
    }
    timing = {"started_at": stored_time(entry.started_at), "expect_by": stored_time(entry.expect_by)}
    if entry.events_in_rows:
        return with_later({**shared, "events_in_rows": True, **timing}, entry.later)
    inline = {
        **shared,
        "attempts": list(entry.attempts),
        # Masks as hex strings: JSON numbers lose precision past 2**53.
        "started": format(entry.started_mask, "x"),
        "accepted": format(entry.accepted_mask, "x"),
        "done": format(entry.done_mask, "x"),
        "failed": format(entry.failed_mask, "x"),
        "failure_reason": entry.failure_reason,
        **timing,
        "started_by": entry.started_by,
        "epoch": entry.epoch,
    }
    # Only when there were some: a record without the key reads as none, and a reader of
    # the release before, which reads only the keys it knows, ignores it.
    return with_later({**inline, "interruptions": entry.interruptions} if entry.interruptions else inline,
                      entry.later)


def _active_from_dict(data: Data) -> ActiveInvocation:
    shared = ActiveInvocation(
        invocation_id=data["id"],
        scheduled_time=required_time(data["scheduled_time"]),
        trigger=data["trigger"],
        deadline=required_time(data["deadline"]),
        event_count=data["event_count"],
        started_at=parse_stored_time(data["started_at"]),
        expect_by=parse_stored_time(data["expect_by"]),
        later=later_fields(data, _ACTIVE_KEYS),
    )
    if data.get("events_in_rows"):
        return evolve(shared, attempts=(), events_in_rows=True)
    return evolve(
        shared,
        attempts=tuple(data["attempts"]),
        started_mask=int(data["started"], 16),
        accepted_mask=int(data["accepted"], 16),
        done_mask=int(data["done"], 16),
        failed_mask=int(data["failed"], 16),
        failure_reason=data["failure_reason"],
        started_by=data.get("started_by", ""),
        epoch=data.get("epoch", 0),  # absent before fencing: no send of this version is older
        interruptions=data.get("interruptions", 0),  # absent: none (or written before they counted apart)
    )


def _occurrence_to_list(occurrence: Occurrence) -> list[Any]:
    kept = [occurrence.invocation_id, stored_time(occurrence.scheduled_time), occurrence.trigger]
    return kept if occurrence.behind is None else [*kept, stored_time(occurrence.behind)]


def _occurrence_from_list(data: list[Any]) -> Occurrence:
    behind = parse_stored_time(data[3]) if len(data) > 3 else None
    return Occurrence(data[0], required_time(data[1]), data[2], behind)


def _run_to_list(run: Run) -> list[Any]:
    kept = [stored_time(run.after), stored_time(run.through), run.trigger, run.schedule_text, run.timezone]
    at = None if run.at is None else [stored_time(t) for t in run.at]
    if run.key:  # a backfill's: [..., at or None, key]
        return [*kept, at, run.key]
    return kept if at is None else [*kept, at]


def _run_from_list(data: list[Any]) -> Run:
    at = tuple(required_time(t) for t in data[5]) if len(data) > 5 and data[5] is not None else None
    key = data[6] if len(data) > 6 else ""
    return Run(required_time(data[0]), required_time(data[1]), data[2], data[3], data[4], at, key)


def record_to_dict(record: JobRecord, with_policy: bool = True) -> Data:
    """A JSON-ready dict of the record; `record_from_dict` is its inverse.
    `with_policy=False` leaves "policy" None, for a caller that encodes the policy,
    which rarely changes, once (engine/adapters/local/sqlite_rows.py)."""
    data = _record_fields(record, with_policy)
    if record.awaiting:  # only a fan-in job's: every other record stays as it was
        data["awaiting"] = [_awaited_to_list(entry) for entry in record.awaiting]
    return data


def _awaited_to_list(entry: Awaited) -> list[Any]:
    return [stored_time(entry.scheduled_time), stored_time(entry.until), list(entry.succeeded), entry.decided]


def _awaited_from_list(data: list[Any]) -> Awaited:
    return Awaited(required_time(data[0]), required_time(data[1]), tuple(data[2]), data[3])


def _record_fields(record: JobRecord, with_policy: bool) -> Data:
    return with_later({
        "version": written_version(record),
        "project": record.project,
        "job_id": record.job_id,
        "state": record.state.value,
        "policy": None if record.policy is None or not with_policy else policy_to_dict(record.policy),
        "disabled": record.disabled,
        "paused": record.paused,
        "pause_reason": record.pause_reason,
        "paused_at": stored_time(record.paused_at),
        "paused_by": record.paused_by,
        "generation": record.generation,
        "nonce_counter": record.nonce_counter,
        "tick_at": stored_time(record.tick_at),
        "tick_nonce": record.tick_nonce,
        "scheduled_until": stored_time(record.scheduled_until),
        "paused_through": stored_time(record.paused_through),
        "active": [_active_to_dict(e) for e in record.active],
        "buffered": [_occurrence_to_list(o) for o in record.buffered],
        "runs": [_run_to_list(r) for r in record.runs],
        "dropping": [[reason, *_run_to_list(r)] for reason, r in record.dropping],
        "watchdog_at": stored_time(record.watchdog_at),
        "consecutive_failures": record.consecutive_failures,
        "failures_since_success": record.failures_since_success,
        "last_finished_at": stored_time(record.last_finished_at),
        "last_succeeded_at": stored_time(record.last_succeeded_at),
    }, record.later)


def written_version(record: JobRecord) -> int:
    """The lowest version that holds the record: 2 once an entry keeps its events in
    rows, else 1, which the release before this one reads. (A record read at a later
    version is written back at it: its `later` holds that version.)"""
    return 2 if any(entry.events_in_rows for entry in record.active) else 1


def record_from_dict(data: Data) -> JobRecord:
    if data.get("version") not in READABLE_VERSIONS:
        raise ValueError(f"job record version {data.get('version')!r} is not one of {READABLE_VERSIONS}")
    return JobRecord(
        project=data["project"],
        job_id=data["job_id"],
        state=JobState(data["state"]),
        policy=None if data["policy"] is None else policy_from_dict(data["policy"]),
        disabled=data["disabled"],
        paused=data["paused"],
        pause_reason=data["pause_reason"],
        paused_at=parse_stored_time(data["paused_at"]),
        paused_by=data.get("paused_by", ""),  # absent before it came in
        generation=data["generation"],
        nonce_counter=data["nonce_counter"],
        tick_at=parse_stored_time(data["tick_at"]),
        tick_nonce=data["tick_nonce"],
        scheduled_until=parse_stored_time(data["scheduled_until"]),
        paused_through=parse_stored_time(data.get("paused_through")),
        active=tuple(_active_from_dict(e) for e in data["active"]),
        buffered=tuple(_occurrence_from_list(o) for o in data["buffered"]),
        # Records written before runs existed have neither key: what waits is all in `buffered`.
        runs=tuple(_run_from_list(r) for r in data.get("runs", ())),
        dropping=tuple((r[0], _run_from_list(r[1:])) for r in data.get("dropping", ())),
        watchdog_at=parse_stored_time(data["watchdog_at"]),
        consecutive_failures=data["consecutive_failures"],
        # Absent before it came in: the streak then is the best there is to go on.
        failures_since_success=data["failures_since_success" if "failures_since_success" in data
                                    else "consecutive_failures"],
        last_finished_at=parse_stored_time(data["last_finished_at"]),
        last_succeeded_at=parse_stored_time(data.get("last_succeeded_at")),  # absent before it came in
        awaiting=tuple(_awaited_from_list(entry) for entry in data.get("awaiting", ())),  # ditto
        # A later version is kept with the later fields, to be written back as read.
        later=later_fields(data, _RECORD_KEYS if data["version"] <= RECORD_VERSION else _RECORD_KEYS - {"version"}),
    )


# Every key the dicts above write; any other is a later release's, kept as it was.
_ACTIVE_KEYS = frozenset({
    "id", "scheduled_time", "trigger", "deadline", "event_count", "started_at", "expect_by", "events_in_rows",
    "attempts", "started", "accepted", "done", "failed", "failure_reason", "started_by", "epoch", "interruptions",
})
_RECORD_KEYS = frozenset({
    "version", "project", "job_id", "state", "policy", "disabled", "paused", "pause_reason", "paused_at", "paused_by",
    "generation", "nonce_counter", "tick_at", "tick_nonce", "scheduled_until", "paused_through", "active",
    "buffered", "runs", "dropping", "watchdog_at", "consecutive_failures", "failures_since_success",
    "last_finished_at", "last_succeeded_at", "awaiting",
})
