"""Occurrences staged before their time (statemachine/staging.py): the tick queued
`stage_ahead` early commits the attempt with its time at T, and any pause, disable or
new definition before T gives the staged attempt up in its own step."""

from dataclasses import replace
from datetime import timedelta

from statemachine import actions as act
from statemachine import events as ev
from statemachine.policy import JobPolicy, Overlap, RetryPolicy, Tuning
from statemachine.vocabulary import SkipReason
from tests.unit.machine_helpers import Scenario, clock, occurrence_id

STAGED = Tuning(stage_ahead=timedelta(seconds=1))
T = clock("10:15")
INV = occurrence_id(T)


def _job(tuning: Tuning = STAGED, **fields) -> Scenario:
    job = Scenario(tuning)
    job.enable("10:07", schedule_text="*/15 * * * *", **fields)
    return job


def _staged(job: Scenario, at: str = "10:14:59.200") -> list:
    actions = job.tick(at)
    assert [a for a in actions if isinstance(a, act.Deliver)] == [act.Deliver(INV, T, "schedule", 0, 1, 1)]
    return actions


def _tick_lead(actions: list) -> timedelta:
    (tick,) = [a for a in actions if isinstance(a, act.ScheduleTick)]
    return tick.lead


def test_a_stageable_job_asks_for_its_tick_ahead_and_stages_at_t_minus_lead():
    job = Scenario(STAGED)
    assert _tick_lead(job.enable("10:07", schedule_text="*/15 * * * *")) == timedelta(seconds=1)
    actions = _staged(job)
    (deliver,) = [a for a in actions if isinstance(a, act.Deliver)]
    assert deliver.send_at == T  # sent at T, not at the commit
    entry = job.record.find_active(INV)
    # The attempt's time, and the watchdog's lease, count from T.
    assert entry.started_at == T
    assert entry.expect_by == T + job.record.live_policy.attempt_timeout + STAGED.start_grace
    assert job.record.tick_at == clock("10:30") and _tick_lead(actions) == timedelta(seconds=1)


def test_without_stage_ahead_nothing_changes():
    job = Scenario(Tuning())
    assert _tick_lead(job.enable("10:07", schedule_text="*/15 * * * *")) == timedelta(0)
    assert job.tick("10:14:59.200") == [act.RetryLater(timedelta(milliseconds=800))]


def test_an_unstageable_job_keeps_its_tick_at_its_time():
    job = Scenario(STAGED)
    actions = job.enable("10:07", schedule_text="*/15 * * * *", throttle="t")
    assert _tick_lead(actions) == timedelta(0)


def test_an_early_tick_waits_for_its_time_while_an_invocation_is_under_way():
    job = _job(overlap=Overlap.ALLOW, max_concurrent=2)
    job.step(ev.ManualTrigger("r1", "manual"), "10:14:30")
    assert job.record.active
    assert job.tick("10:14:59.200") == [act.RetryLater(timedelta(milliseconds=800))]


def test_a_pause_before_t_records_the_staged_occurrence_skipped_paused():
    job = _job()
    _staged(job)
    actions = job.step(ev.Paused("by hand"), "10:14:59.500")
    assert act.RecordSkipped(INV, T, "schedule", SkipReason.PAUSED) in actions
    assert job.record.active == ()


def test_a_pause_after_t_leaves_the_attempt_in_flight():
    job = _job()
    _staged(job)
    actions = job.step(ev.Paused("by hand"), "10:15:00.010")
    assert not any(isinstance(a, act.RecordSkipped) for a in actions)
    assert job.record.find_active(INV) is not None


def test_a_disable_before_t_records_it_skipped_disabled():
    job = _job()
    _staged(job)
    actions = job.step(ev.JobDisabled(), "10:14:59.500")
    assert act.RecordSkipped(INV, T, "schedule", SkipReason.DISABLED) in actions
    assert job.record.active == ()


def test_a_new_definition_before_t_sends_the_occurrence_at_t_under_it():
    job = _job()
    _staged(job)
    epoch = job.record.find_active(INV).epoch
    changed: JobPolicy = replace(job.record.live_policy, revision="r2")
    actions = job.step(ev.ScheduleChanged(changed), "10:14:59.500")
    assert act.EnqueueAttempt(INV, 0, 1, T) in actions
    entry = job.record.find_active(INV)
    assert entry.started_mask == 0 and entry.epoch > epoch  # the staged request is stale
    (deliver,) = job.step(ev.InvocationStarting(INV, 0, 1), "10:15:00")
    assert deliver == act.Deliver(INV, T, "schedule", 0, 1, 1) and deliver.send_at is None


def test_a_process_lost_before_t_leaves_the_occurrence_to_a_start_task_at_t():
    job = _job()  # one attempt: an interrupted one would end the invocation FAILED
    _staged(job)
    lost = ev.InvocationFinished(INV, False, "interrupted", 0, 1)
    assert job.step(lost, "10:14:59.700") == [act.EnqueueAttempt(INV, 0, 1, T)]
    assert job.record.find_active(INV).started_mask == 0


def test_a_retried_early_tick_before_t_restages_nothing_twice():
    job = _job()
    nonce = job.record.tick_nonce
    _staged(job)
    assert job.step(ev.TickArrived(nonce, redelivered=True), "10:14:59.800") == [act.EnqueueAttempt(INV, 0, 1, T)]


def test_a_process_lost_after_t_is_an_interrupted_attempt_as_without_staging():
    job = _job(retry=RetryPolicy(max_attempts=1))
    _staged(job)
    actions = job.step(ev.InvocationFinished(INV, False, "interrupted", 0, 1), "10:15:01")
    assert act.RecordAttemptFailed(INV, 0, 1, "interrupted", None) in actions


def test_a_process_lost_after_t_that_never_released_it_leaves_it_to_a_start_task_under_its_id():
    # Its process stored "released up to 10:14:59" at most: the request for T never left.
    job = _job(retry=RetryPolicy(max_attempts=1))
    _staged(job)
    lost = ev.InvocationFinished(INV, False, "interrupted", 0, 1, released_until=clock("10:14:59"))
    assert job.step(lost, "10:15:07") == [act.EnqueueAttempt(INV, 0, 1, T)]
    entry = job.record.find_active(INV)
    assert entry.started_mask == 0 and entry.attempts == (1,)  # no attempt spent, the same invocation
    (deliver,) = job.step(ev.InvocationStarting(INV, 0, 1), "10:15:07.100")
    assert deliver.invocation_id == INV and deliver.attempt == 1 and deliver.send_at is None


def test_a_process_lost_after_releasing_it_is_an_interrupted_attempt():
    job = _job(retry=RetryPolicy(max_attempts=1))
    _staged(job)
    lost = ev.InvocationFinished(INV, False, "interrupted", 0, 1, released_until=clock("10:15:00.250"))
    assert act.RecordAttemptFailed(INV, 0, 1, "interrupted", None) in job.step(lost, "10:15:07")


def test_an_attempt_sent_at_its_commit_is_interrupted_whatever_the_mark():
    # Unstaged: its time is its commit, never after the hold's own start.
    job = _job(tuning=Tuning(), retry=RetryPolicy(max_attempts=1))
    job.tick("10:15")
    lost = ev.InvocationFinished(INV, False, "interrupted", 0, 1, released_until=T)
    assert act.RecordAttemptFailed(INV, 0, 1, "interrupted", None) in job.step(lost, "10:15:07")


def test_jitter_stages_the_send_at_t_plus_its_delay():
    job = Scenario(STAGED)
    job.enable("10:07", schedule_text="*/15 * * * *", jitter=timedelta(milliseconds=500))
    actions = job.tick("10:14:59")  # queued a second early; the jitter adds up to half a second
    (deliver,) = [a for a in actions if isinstance(a, act.Deliver)]
    assert T <= deliver.send_at <= T + timedelta(milliseconds=500)
    assert deliver.scheduled_time == T  # what it sends keeps the nominal time


def test_a_job_every_second_is_staged_half_a_second_ahead():
    job = Scenario(STAGED)
    job.enable("10:07", schedule_text="* * * * * ?")
    actions = job.tick("10:07:00.600")
    assert _tick_lead(actions) == timedelta(milliseconds=500)
