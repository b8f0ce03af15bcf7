"""Rows with every field set to something other than its default."""

from __future__ import annotations

from datetime import datetime, timedelta

from engine.ports import InvocationRow, StoredJob
from statemachine import ids
from statemachine.definition import CatchupSpec, FanoutSpec, JobDefinition, RetrySpec
from statemachine.durations import UTC
from statemachine.notification import NotificationState
from statemachine.policy import Catchup, FanoutPolicy, JobPolicy, Overlap, RetryPolicy
from statemachine.record import ActiveInvocation, JobRecord, JobState, Occurrence
from statemachine.runs import Run
from statemachine.vocabulary import NotificationStatus

T0 = datetime(2026, 1, 5, 10, 0, 0, 123456, tzinfo=UTC)


def policy() -> JobPolicy:
    return JobPolicy(
        schedule_text="*/5 * * * *", timezone="Europe/Berlin", at=(T0 + timedelta(days=1),),
        overlap=Overlap.ALLOW, max_concurrent=7, catchup=Catchup.ALL,
        catchup_window=timedelta(minutes=90), timeout=timedelta(minutes=3),
        attempt_timeout=timedelta(seconds=45),
        retry=RetryPolicy(4, timedelta(seconds=2), timedelta(minutes=1)),
        fanout=FanoutPolicy(3, timedelta(seconds=30)), triggers=("other",), revision="rev-1",
    )


def record(project: str = "proj", job_id: str = "job", watchdog_at: datetime | None = None) -> JobRecord:
    invocation = ids.invocation_id(project, job_id, T0, ids.OCCURRENCE)
    active = ActiveInvocation(
        invocation, T0, "schedule", T0 + timedelta(minutes=3), event_count=3, attempts=(2, 1, 1),
        started_mask=0b011, accepted_mask=0b010, done_mask=0b001, failed_mask=0b001,
        failure_reason="http 500", started_at=T0 + timedelta(seconds=1), expect_by=T0 + timedelta(seconds=40),
    )
    buffered = Occurrence(ids.invocation_id(project, job_id, T0 + timedelta(minutes=5), ids.OCCURRENCE),
                          T0 + timedelta(minutes=5), "manual", behind=T0 + timedelta(minutes=4))
    run = Run(T0 - timedelta(days=30), T0 + timedelta(minutes=4), "catchup", "*/5 * * * *", "Europe/Berlin")
    at_run = Run(T0, T0 + timedelta(days=1), "schedule", "", "UTC", at=(T0 + timedelta(days=1),))
    return JobRecord(
        project=project, job_id=job_id, state=JobState.RUNNING, policy=policy(), disabled=False,
        paused=False, pause_reason="was paused", paused_at=T0 - timedelta(hours=1), generation=3,
        nonce_counter=9, tick_at=T0 + timedelta(minutes=5), tick_nonce="3-9", scheduled_until=T0,
        active=(active,), buffered=(buffered,), runs=(run,), dropping=(("paused", at_run),), watchdog_at=watchdog_at,
        consecutive_failures=2, last_finished_at=T0 - timedelta(minutes=5), last_succeeded_at=T0 - timedelta(hours=1),
    )


def definition(job_id: str = "job") -> JobDefinition:
    return JobDefinition(
        id=job_id, schedule="*/5 * * * *", timezone="Europe/Berlin", disabled=True, overlap=Overlap.ALLOW,
        max_concurrent=7, catchup=CatchupSpec(Catchup.ALL, "1h30m"), timeout="3m",
        retry=RetrySpec(4, "2s", "1m"), fanout=FanoutSpec(3, "30s"), throttle="slow", triggers=("b", "a"),
        target={"http": {"url": "https://x.example/run", "headers": {"Content-Type": "application/json"},
                         "body": '{"at":"${startOfHour}","note":"é ☃"}'}},
        pause_after_failures=3, on_failure={"noop": {}},
    )


def job(project: str = "proj", job_id: str = "job", watchdog_at: datetime | None = None) -> StoredJob:
    return StoredJob(record(project, job_id, watchdog_at), definition(job_id), "api", "line 3: bad thing",
                     deleted=True)


def invocation(
    scheduled: datetime, project: str = "proj", job_id: str = "job", status: str = "SUCCEEDED",
    created: datetime | None = None,
) -> InvocationRow:
    return InvocationRow(
        project=project, job_id=job_id, id=ids.invocation_id(project, job_id, scheduled, ids.OCCURRENCE),
        status=status, scheduled_time=scheduled, trigger="schedule", reason="http 500" if status == "FAILED" else "",
        created_time=created or scheduled, started_time=scheduled + timedelta(seconds=1),
        finished_time=scheduled + timedelta(seconds=2), attempt=2, event_count=3,
        log=[{"time": "2026-01-05T10:00:00.000Z", "message": "created", "trigger": "schedule"}],
        notification=NotificationState(NotificationStatus.PENDING, 2, "http 502"),
    )
