"""What readers are shown of a job at `now` (statemachine/shown.py): an occurrence committed
ahead of its time (statemachine/staging.py) is not running yet, and it is the next run."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from statemachine import events as ev
from statemachine.policy import Tuning
from statemachine.record import ActiveInvocation, JobRecord, JobState, new_record
from statemachine.shown import next_run, shown_state, under_way
from tests.unit.machine_helpers import Scenario, clock, occurrence_id

STAGED = Tuning(stage_ahead=timedelta(seconds=1))
T = clock("10:15")
FOLLOWING = clock("10:30")
MS = timedelta(milliseconds=1)


def _entry(**fields) -> ActiveInvocation:
    fields.setdefault("trigger", "schedule")
    fields.setdefault("scheduled_time", T)
    return ActiveInvocation(occurrence_id(fields["scheduled_time"]), deadline=T + timedelta(minutes=10), **fields)


STAGED_AT_T = _entry(started_mask=1, started_at=T, epoch=1)  # staged, no jitter: sent at T
STAGED_JITTER = _entry(started_mask=1, started_at=T + timedelta(seconds=2), epoch=1)  # sent at T + 2 s
WAITING_START = _entry(expect_by=T + timedelta(minutes=2))  # a jitter too long to hold: a start task
MANUAL = _entry(trigger="manual", scheduled_time=clock("10:14"), started_mask=1, started_at=clock("10:14"))
RETRYING = _entry(scheduled_time=clock("10:00"), attempts=(2,), started_at=clock("10:00:01"))
WAITING_TURN = _entry(scheduled_time=clock("10:00"))  # admitted, its start not yet run


def _record(state: JobState, *active: ActiveInvocation, tick_at: datetime | None = FOLLOWING,
            **fields) -> JobRecord:
    fields.setdefault("disabled", False)
    return replace(new_record("proj", "job"), state=state, active=active, tick_at=tick_at, **fields)


# (name, record, now, shown state, next run)
CASES = [
    ("idle", _record(JobState.SCHEDULED), T, JobState.SCHEDULED, FOLLOWING),
    ("done", _record(JobState.DONE, tick_at=None), T, JobState.DONE, None),
    ("staged, before T", _record(JobState.RUNNING, STAGED_AT_T), T - 500 * MS, JobState.SCHEDULED, T),
    ("staged, at T", _record(JobState.RUNNING, STAGED_AT_T), T, JobState.RUNNING, FOLLOWING),
    ("staged, after T", _record(JobState.RUNNING, STAGED_AT_T), T + 500 * MS, JobState.RUNNING, FOLLOWING),
    ("one-off staged, before T", _record(JobState.RUNNING, STAGED_AT_T, tick_at=None), T - 500 * MS,
     JobState.SCHEDULED, T),
    ("one-off staged, after T", _record(JobState.RUNNING, STAGED_AT_T, tick_at=None), T + 500 * MS,
     JobState.RUNNING, None),
    ("jittered, before T", _record(JobState.RUNNING, STAGED_JITTER), T - 500 * MS, JobState.SCHEDULED, T),
    # Past its time, waiting out its jitter: QUEUED, as without staging (REFERENCE 4.7).
    ("jittered, after T", _record(JobState.RUNNING, STAGED_JITTER), T + 1000 * MS, JobState.QUEUED, FOLLOWING),
    ("jittered, sent", _record(JobState.RUNNING, STAGED_JITTER), T + 2000 * MS, JobState.RUNNING, FOLLOWING),
    ("long jitter, before T", _record(JobState.QUEUED, WAITING_START), T - 500 * MS, JobState.SCHEDULED, T),
    ("long jitter, after T", _record(JobState.QUEUED, WAITING_START), T + 500 * MS, JobState.QUEUED, FOLLOWING),
    ("staged beside a manual run", _record(JobState.RUNNING, MANUAL, STAGED_AT_T), T - 500 * MS,
     JobState.RUNNING, T),
    ("staged beside one waiting its turn", _record(JobState.RUNNING, WAITING_TURN, STAGED_AT_T), T - 500 * MS,
     JobState.QUEUED, T),
    ("a retry waiting", _record(JobState.RUNNING, RETRYING), T, JobState.RUNNING, FOLLOWING),
    ("waiting its turn", _record(JobState.QUEUED, WAITING_TURN), T, JobState.QUEUED, FOLLOWING),
    ("paused with one in flight", _record(JobState.PAUSED, MANUAL, paused=True), T, JobState.PAUSED, None),
    ("disabled", _record(JobState.DISABLED, disabled=True), T, JobState.DISABLED, None),
]


@pytest.mark.parametrize("record, now, state, upcoming", [case[1:] for case in CASES], ids=[c[0] for c in CASES])
def test_shown_state_and_next_run(record, now, state, upcoming):
    assert shown_state(record, now) == state
    assert next_run(record, now) == upcoming
    # The jobs list's "running" filter: what is under way, also in a paused job (its in-flight one finishes).
    assert under_way(record, now) == (state in (JobState.RUNNING, JobState.QUEUED) or record.paused)


def test_a_staged_occurrence_through_the_machine_is_scheduled_until_its_time():
    job = Scenario(STAGED)
    job.enable("10:07", schedule_text="*/15 * * * *")
    job.tick("10:14:59.200")  # the early tick commits the attempt, to be sent at T
    record = job.record
    assert record.state == JobState.RUNNING and record.tick_at == FOLLOWING  # what is stored stays so
    assert (shown_state(record, clock("10:14:59.500")), next_run(record, clock("10:14:59.500"))) == \
        (JobState.SCHEDULED, T)
    assert (shown_state(record, T), next_run(record, T)) == (JobState.RUNNING, FOLLOWING)


def test_a_one_off_job_staged_shows_its_only_time_then_is_done():
    job = Scenario(STAGED)
    job.enable("10:07", schedule_text="", at=(T,))
    job.tick("10:14:59.200")
    before = clock("10:14:59.500")
    assert job.record.tick_at is None and job.record.active
    assert (shown_state(job.record, before), next_run(job.record, before)) == (JobState.SCHEDULED, T)
    (entry,) = job.record.active
    job.step(ev.InvocationFinished(entry.invocation_id, True, "", 0, 1, epoch=entry.epoch), "10:15:00.100")
    after = clock("10:15:00.200")
    assert (shown_state(job.record, after), next_run(job.record, after)) == (JobState.DONE, None)


@pytest.mark.parametrize("jitter", [timedelta(seconds=1), timedelta(seconds=30)], ids=["held", "start-task"])
def test_a_jitter_is_waited_out_queued_and_the_next_run_is_the_nominal_time(jitter):
    job = Scenario(STAGED)
    job.enable("10:07", schedule_text="*/15 * * * *", jitter=jitter)
    job.tick("10:14:59.200")  # staged (its request held), or waiting for a start task at its time
    (entry,) = job.record.active
    due = entry.started_at or entry.expect_by - STAGED.start_grace
    assert entry.scheduled_time == T < due  # (this occurrence's jitter is not 0)
    before = clock("10:14:59.500")
    assert (shown_state(job.record, before), next_run(job.record, before)) == (JobState.SCHEDULED, T)
    during = T + (due - T) / 2
    assert (shown_state(job.record, during), next_run(job.record, during)) == (JobState.QUEUED, FOLLOWING)


def test_a_resumed_job_shows_its_next_fire_time_not_the_instant_of_the_resume():
    """Issue 37: `jobs resume` printed the resume's own instant as the next run: the resume
    arms a tick at once (to record what fell due while paused), and that tick is no run."""
    job = Scenario()
    job.enable("10:07", schedule_text="*/15 * * * *")
    job.step(ev.Paused("maintenance"), "10:08")
    job.step(ev.Resumed(), "10:20:31")
    resumed_at = clock("10:20:31")
    assert job.record.tick_at == resumed_at  # the stored tick is the resume's bookkeeping
    assert next_run(job.record, clock("10:20:31.400")) == clock("10:30")
    job.tick("10:20:31.500")  # the tick records the skipped fire times and arms the next one
    assert next_run(job.record, clock("10:20:32")) == clock("10:30")
