"""Occurrences staged before their time (statemachine/staging.py): the tick queued
`stage_ahead` early commits the attempt with its time at T, and any pause, disable or
new definition before T gives the staged attempt up in its own step."""

from dataclasses import replace
from datetime import timedelta

from statemachine import actions as act
from statemachine import events as ev
from statemachine.policy import JobPolicy, Overlap, RetryPolicy, Tuning, compute_backoff
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


def test_a_staging_tick_run_a_little_before_its_tasks_time_still_stages():
    # Queued at 10:14:59 (T - 1 s); the embedded dispatcher hands early ticks over in
    # groups, so one may run up to Tuning.early_slack before that.
    job = _job()
    _staged(job, "10:14:58.800")


def test_a_staging_tick_run_well_before_its_tasks_time_waits_for_it():
    job = _job()
    assert job.tick("10:14:58.700") == [act.RetryLater(timedelta(milliseconds=1300))]


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
    job = _job()
    _staged(job)
    lost = ev.AttemptInterrupted(INV, 0, 1)
    assert job.step(lost, "10:14:59.700") == [act.EnqueueAttempt(INV, 0, 1, T)]
    entry = job.record.find_active(INV)
    assert (entry.started_mask, entry.attempts, entry.interruptions) == (0, (1,), 0)  # as if never begun


def test_a_retried_early_tick_before_t_restages_nothing_twice():
    job = _job()
    nonce = job.record.tick_nonce
    _staged(job)
    assert job.step(ev.TickArrived(nonce, redelivered=True), "10:14:59.800") == [act.EnqueueAttempt(INV, 0, 1, T)]


def _resent(at: str) -> list:
    """Attempt 1 interrupted at `at` and sent again as attempt 2, not counted (RetryPolicy())."""
    resend_at = clock(at) + compute_backoff(RetryPolicy(), 1, f"{INV}/0")
    return [act.RecordAttemptInterrupted(INV, 0, 1, resend_at, 1), act.EnqueueAttempt(INV, 0, 2, resend_at)]


def test_a_process_lost_after_t_is_an_interrupted_attempt_as_without_staging():
    job = _job(retry=RetryPolicy(max_attempts=1))
    _staged(job)
    assert job.step(ev.AttemptInterrupted(INV, 0, 1), "10:15:01") == _resent("10:15:01")


def test_a_process_lost_after_t_that_never_released_it_leaves_it_to_a_start_task_under_its_id():
    # Its process stored "released up to 10:14:59" at most: the request for T never left.
    job = _job(retry=RetryPolicy(max_attempts=1))
    _staged(job)
    lost = ev.AttemptInterrupted(INV, 0, 1, released_until=clock("10:14:59"))
    assert job.step(lost, "10:15:07") == [act.EnqueueAttempt(INV, 0, 1, T)]
    entry = job.record.find_active(INV)
    assert entry.started_mask == 0 and entry.attempts == (1,)  # no attempt spent, the same invocation
    (deliver,) = job.step(ev.InvocationStarting(INV, 0, 1), "10:15:07.100")
    assert deliver.invocation_id == INV and deliver.attempt == 1 and deliver.send_at is None


def test_a_process_lost_after_releasing_it_is_an_interrupted_attempt():
    job = _job(retry=RetryPolicy(max_attempts=1))
    _staged(job)
    lost = ev.AttemptInterrupted(INV, 0, 1, released_until=clock("10:15:00.250"))
    assert job.step(lost, "10:15:07") == _resent("10:15:07")


def test_an_attempt_sent_at_its_commit_is_interrupted_whatever_the_mark():
    # Unstaged: its time is its commit, never after the hold's own start.
    job = _job(tuning=Tuning(), retry=RetryPolicy(max_attempts=1))
    job.tick("10:15")
    lost = ev.AttemptInterrupted(INV, 0, 1, released_until=T)
    assert job.step(lost, "10:15:07") == _resent("10:15:07")


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


# --- a new timing before T (the every-second job edited to every two seconds) -------------------

ODD = clock("10:07:01")  # a fire time of "* * * * * ?", not of "*/2 * * * * ?"
EVEN = clock("10:07:02")


def _every_second(**fields) -> Scenario:
    job = Scenario(STAGED)
    job.enable("10:07", schedule_text="* * * * * ?", **fields)
    return job


def _edited(job: Scenario, at: str, schedule_text: str = "*/2 * * * * ?", **fields) -> list:
    changed: JobPolicy = replace(job.record.live_policy, schedule_text=schedule_text, revision="r2", **fields)
    return job.step(ev.ScheduleChanged(changed), at)


def _delivered_times(actions: list) -> list:
    return [a.scheduled_time for a in actions if isinstance(a, (act.Deliver, act.StartInvocation))]


def test_a_new_schedule_before_t_withdraws_a_staged_time_that_is_not_one_of_its_fire_times():
    # Without staging the tick for 10:07:01 would not have run yet, and the new schedule's
    # tick would have superseded it: 10:07:01 is never delivered.
    job = _every_second()
    job.tick("10:07:00.600")  # staged half a second ahead
    assert job.record.find_active(occurrence_id(ODD)) is not None
    actions = _edited(job, "10:07:00.800")
    assert job.record.active == ()  # no attempt held for it, nothing left to send
    assert act.WithdrawOccurrence(occurrence_id(ODD)) in actions
    # Nothing of it goes out, and nothing is recorded for a time the new schedule has not.
    assert not [a for a in actions if getattr(a, "invocation_id", None) == occurrence_id(ODD)
                and not isinstance(a, act.WithdrawOccurrence)]
    assert job.record.tick_at == EVEN  # the new schedule's first fire time after the edit
    # The start of a staged request that still came, or a lost process's report, change nothing.
    assert job.step(ev.InvocationStarting(occurrence_id(ODD), 0, 1), "10:07:01") == []
    assert job.step(ev.AttemptInterrupted(occurrence_id(ODD), 0, 1), "10:07:01") == []


def test_after_a_withdrawal_every_fire_time_of_the_new_schedule_is_delivered_once():
    job = _every_second()
    job.tick("10:07:00.600")
    _edited(job, "10:07:00.800")
    delivered = []
    for second in (2, 4, 6):
        at = clock(f"10:07:0{second}")
        delivered += _delivered_times(job.tick(at - timedelta(milliseconds=400)))  # staged ahead
        job.step(ev.InvocationFinished(occurrence_id(at), True, "", 0, 1), at + timedelta(milliseconds=50))
    assert delivered == [EVEN, EVEN, clock("10:07:04"), clock("10:07:04"), clock("10:07:06"), clock("10:07:06")]
    assert job.record.tick_at == clock("10:07:08")


def test_a_new_schedule_that_keeps_the_staged_time_sends_it_at_t_under_the_new_definition():
    job = _every_second()
    job.tick("10:07:00.600")
    job.step(ev.InvocationFinished(occurrence_id(ODD), True, "", 0, 1), "10:07:01.050")
    job.tick("10:07:01.600")  # stages 10:07:02, a fire time of both schedules
    actions = _edited(job, "10:07:01.800")
    assert act.EnqueueAttempt(occurrence_id(EVEN), 0, 1, EVEN) in actions
    assert not any(isinstance(a, act.WithdrawOccurrence) for a in actions)
    assert job.record.find_active(occurrence_id(EVEN)).started_mask == 0
    assert job.record.tick_at == clock("10:07:04")  # 10:07:02 is not handled twice


def test_a_new_target_alone_keeps_sending_the_staged_time():
    job = _every_second()
    job.tick("10:07:00.600")
    changed: JobPolicy = replace(job.record.live_policy, revision="r2")  # same timing
    actions = job.step(ev.ScheduleChanged(changed), "10:07:00.800")
    assert act.EnqueueAttempt(occurrence_id(ODD), 0, 1, ODD) in actions


def test_a_new_schedule_after_t_leaves_an_occurrence_waiting_out_its_jitter_to_be_sent():
    # Its tick would have run at T without staging too: it is an occurrence of the old
    # schedule that fell due, as one waiting out its jitter always was.
    job = _every_second(jitter=timedelta(milliseconds=900))
    job.tick("10:07:00.600")
    entry = job.record.find_active(occurrence_id(ODD))
    assert entry is not None and entry.started_at > ODD
    actions = _edited(job, "10:07:01.010")
    assert act.EnqueueAttempt(occurrence_id(ODD), 0, 1, entry.started_at) in actions
    assert not any(isinstance(a, act.WithdrawOccurrence) for a in actions)


def test_a_long_jitter_committed_ahead_is_withdrawn_too():
    # Its early tick could not hold the request that long, so it committed the invocation
    # (with its history row) and left the attempt to a start task at T + jitter.
    job = Scenario(STAGED)
    job.enable("10:07", schedule_text="*/15 * * * *", jitter=timedelta(seconds=30))
    actions = job.tick("10:14:59.200")
    assert act.StartInvocation(INV, T, "schedule", 1) in actions
    actions = _edited(job, "10:14:59.500", schedule_text="1/15 * * * *")
    assert job.record.active == () and act.WithdrawOccurrence(INV) in actions
    assert job.record.tick_at == clock("10:16")
    # Its start task still comes at T + jitter, and finds nothing to start.
    assert job.step(ev.InvocationStarting(INV, 0, 1), "10:15:20") == []


def test_a_job_changed_to_triggered_before_t_sends_nothing_at_t():
    job = _every_second()
    job.tick("10:07:00.600")
    _edited(job, "10:07:00.800", schedule_text="triggered")
    assert job.record.active == () and job.record.tick_at is None


def test_what_waited_behind_a_withdrawn_occurrence_starts_at_once():
    job = _every_second(overlap=Overlap.BUFFER_ONE)
    job.tick("10:07:00.600")
    job.step(ev.ManualTrigger("r1", "manual"), "10:07:00.700")  # waits behind the staged one
    assert job.record.has_waiting
    actions = _edited(job, "10:07:00.800")
    assert not job.record.has_waiting and [e.trigger for e in job.record.active] == ["manual"]
    assert any(isinstance(a, act.EnqueueAttempt) for a in actions)


def test_a_backend_that_never_stages_never_runs_the_staging_step(monkeypatch):
    # The cloud backend's tuning stages nothing (stage_ahead 0): its steps do not pay
    # for the embedded backend's staging at all.
    from statemachine import staging

    calls = []
    real = staging.after_step
    monkeypatch.setattr(staging, "after_step", lambda *args: calls.append(args) or real(*args))
    cloud = _job(Tuning())
    cloud.tick("10:15")
    assert calls == []
    _staged(_job())
    assert calls  # the embedded backend's do


def test_the_core_takes_its_early_slack_from_the_tuning():
    job = _job(replace(STAGED, early_slack=timedelta(milliseconds=100)))
    assert job.tick("10:14:58.800") == [act.RetryLater(timedelta(milliseconds=1200))]


def test_the_embedded_tuning_covers_the_dispatchers_early_grain():
    from engine.adapters.local.early_ticks import local_tuning
    from engine.adapters.local.tuning import DEFAULT_LOCAL_TUNING

    tuned = local_tuning(STAGED, DEFAULT_LOCAL_TUNING)
    assert tuned.early_slack >= DEFAULT_LOCAL_TUNING.early_grain and tuned.stage_ahead == STAGED.stage_ahead
