"""A small driver for replaying job scenarios step by step with a readable clock."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from statemachine import actions as act
from statemachine import events as ev
from statemachine import ids
from statemachine.durations import UTC
from statemachine.fanout_step import DictRows, step_job
from statemachine.policy import JobPolicy, Tuning
from statemachine.record import JobRecord, new_record
from statemachine.record_form import record_from_dict, record_to_dict

PROJECT, JOB = "proj", "job"
DAY = datetime(2026, 1, 5, tzinfo=UTC)


def clock(hms: str, day: datetime = DAY) -> datetime:
    """'10:15' or '10:15:00.200' on the scenario's day, UTC."""
    parts = hms.split(":")
    hours, minutes = int(parts[0]), int(parts[1])
    seconds = float(parts[2]) if len(parts) > 2 else 0.0
    return day + timedelta(hours=hours, minutes=minutes, seconds=seconds)


def occurrence_id(when: datetime) -> str:
    return ids.invocation_id(PROJECT, JOB, when, ids.OCCURRENCE)


def manual_id(when: datetime, request: str, kind: str = ids.MANUAL) -> str:
    return ids.invocation_id(PROJECT, JOB, when, kind, request)


def policy(**fields) -> JobPolicy:
    fields.setdefault("schedule_text", "every 15m")
    fields.setdefault("revision", "r1")
    return JobPolicy(**fields)


class Scenario:
    """Holds one job's record and feeds it events.

    Every step also round-trips the record through its dict form, so the
    scenarios check serialization as they go. The events of fan-out invocations
    live in `rows`, as a store keeps them in rows of their own.
    """

    def __init__(self, tuning: Tuning | None = None):
        self.record: JobRecord = new_record(PROJECT, JOB)
        self.tuning = tuning or Tuning()
        self.rows: dict = {}

    def step(self, event, at: str | datetime) -> list:
        now = clock(at) if isinstance(at, str) else at
        transition = step_job(self.record, event, now, self.tuning, lambda invocation: DictRows(self.rows, invocation))
        self.record = record_from_dict(record_to_dict(transition.record))
        assert self.record == transition.record
        return list(transition.actions)

    def enable(self, when: str, **fields) -> list:
        return self.step(ev.JobEnabled(policy(**fields)), when)

    def tick(self, at: str | datetime, nonce: str | None = None) -> list:
        return self.step(ev.TickArrived(nonce or self.record.tick_nonce), at)

    def run_through(self, invocation: str, at: str, succeeded: bool = True, reason: str = "") -> list:
        """Start the invocation's single attempt and finish it; returns the finish actions."""
        attempt = self.record.find_active(invocation).attempts[0]
        self.step(ev.InvocationStarting(invocation, 0, attempt), at)
        return self.step(ev.InvocationFinished(invocation, succeeded, reason, 0, attempt), at)

    @property
    def state(self) -> str:
        return self.record.state.value


def started(when: datetime, now: datetime, trigger: str = "schedule", invocation: str | None = None) -> list:
    """The two actions that start a single-event invocation."""
    invocation = invocation or occurrence_id(when)
    return [
        act.StartInvocation(invocation, when, trigger, 1),
        act.EnqueueAttempt(invocation, 0, 1, max(when, now)),
    ]


def skipped(when: datetime, reason: str, trigger: str = "schedule") -> act.RecordSkipped:
    return act.RecordSkipped(occurrence_id(when), when, trigger, reason)


def with_policy(scenario: Scenario, **fields) -> None:
    scenario.record = replace(scenario.record, policy=policy(**fields))


def delivered(when: datetime, now: datetime | None = None, trigger: str = "schedule") -> list:
    """The two actions of a tick that starts a single-event invocation due now:
    created, and its first attempt committed as starting (sent after the commit)."""
    invocation = occurrence_id(when)
    return [
        act.StartInvocation(invocation, when, trigger, 1, deferred=True),
        act.Deliver(invocation, when, trigger, 0, 1, 1),
    ]
