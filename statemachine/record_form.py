"""The stored form of a job record: `record_to_dict(record)` is what the shell stores,
`record_from_dict` its inverse (statemachine/record.py holds the record itself). A record
is written at the lowest version that holds it, and fields of a later release are kept
and written back as read (readers one release ahead of writers, docs/DEPLOY.md).
"""

from __future__ import annotations

from typing import Any

from statemachine.record import (
    READABLE_VERSIONS,
    RECORD_VERSION,
    ActiveInvocation,
    Awaited,
    Data,
    JobRecord,
    JobState,
    Occurrence,
    evolve,
)
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
