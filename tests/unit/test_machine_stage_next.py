"""A result that frees its job stages the job's next occurrence in the same step
(ticks.stage_pending): what that occurrence's early tick would have done, one step per
occurrence instead of two, with the spared tick taken off the queue."""

from datetime import timedelta

from statemachine import actions as act
from statemachine import events as ev
from statemachine.policy import Overlap, RetryPolicy, Tuning
from tests.unit.machine_helpers import Scenario, clock, occurrence_id

STAGED = Tuning(stage_ahead=timedelta(seconds=10))
T1, T2, T3 = clock("10:15:00"), clock("10:15:02"), clock("10:15:04")


def _every_two_seconds(**fields) -> Scenario:
    job = Scenario(STAGED)
    job.enable("10:14:59", schedule_text="*/2 * * * * ?", **fields)
    actions = job.tick("10:14:59.600")  # T1's tick, queued half a second early, stages it
    assert [a.send_at for a in actions if isinstance(a, act.Deliver)] == [T1]
    return job


def _finished(job: Scenario, at: str, stage_next: bool = True, invocation: str | None = None) -> list:
    return job.step(ev.InvocationFinished(invocation or occurrence_id(T1), True, "", 0, 1, 1, stage_next=stage_next),
                    at)


def test_the_result_that_frees_the_job_stages_its_next_occurrence_and_takes_its_tick_off_the_queue():
    job = _every_two_seconds()
    pending_nonce, pending_at = job.record.tick_nonce, job.record.tick_at
    assert pending_at == T2
    actions = _finished(job, "10:15:00.050")
    (deliver,) = [a for a in actions if isinstance(a, act.Deliver)]
    assert (deliver.invocation_id, deliver.scheduled_time, deliver.send_at) == (occurrence_id(T2), T2, T2)
    assert act.CancelTick(pending_nonce, T2) in actions
    (tick,) = [a for a in actions if isinstance(a, act.ScheduleTick)]
    assert tick.at == T3 and tick.nonce == job.record.tick_nonce != pending_nonce
    assert act.FinishInvocation(occurrence_id(T1), "SUCCEEDED", "") in actions
    entry = job.record.find_active(occurrence_id(T2))
    assert entry.started_at == T2 and entry.started_by == ""  # no tick issued it: none may redeliver it
    # The spared tick, should it still come, is stale.
    assert job.step(ev.TickArrived(pending_nonce), "10:15:01") == []
    assert job.step(ev.TickArrived(pending_nonce, redelivered=True), "10:15:01") == []


def test_without_room_to_hold_it_the_next_occurrence_waits_for_its_tick():
    job = _every_two_seconds()
    actions = _finished(job, "10:15:00.050", stage_next=False)
    assert not [a for a in actions if isinstance(a, (act.Deliver, act.CancelTick))]
    assert job.record.tick_at == T2


def test_a_job_with_another_invocation_under_way_stages_nothing_yet():
    job = _every_two_seconds(overlap=Overlap.ALLOW, max_concurrent=2)
    job.step(ev.ManualTrigger("r1", "manual"), "10:15:00.010")  # a second invocation runs on
    actions = _finished(job, "10:15:00.050")
    assert not [a for a in actions if isinstance(a, (act.Deliver, act.CancelTick))]


def test_a_next_occurrence_further_than_stage_ahead_waits_for_its_tick():
    job = Scenario(STAGED)
    job.enable("10:14:59", schedule_text="0 * * * * ?")  # every minute
    job.tick("10:14:59.600")
    actions = job.step(ev.InvocationFinished(occurrence_id(T1), True, "", 0, 1, 1, stage_next=True), "10:15:00.050")
    assert not [a for a in actions if isinstance(a, (act.Deliver, act.CancelTick))]
    assert job.record.tick_at == clock("10:16:00")


def test_a_failure_to_be_retried_stages_nothing():
    job = _every_two_seconds(retry=RetryPolicy(max_attempts=3))
    actions = job.step(ev.InvocationFinished(occurrence_id(T1), False, "http 500", 0, 1, 1, stage_next=True),
                       "10:15:00.050")
    assert not [a for a in actions if isinstance(a, act.CancelTick)]
    assert job.record.find_active(occurrence_id(T1)) is not None  # it waits for its retry


def test_a_final_failure_frees_the_job_as_a_success_does():
    job = _every_two_seconds()  # one attempt
    actions = job.step(ev.InvocationFinished(occurrence_id(T1), False, "http 500", 0, 1, 1, stage_next=True),
                       "10:15:00.050")
    assert [a.send_at for a in actions if isinstance(a, act.Deliver)] == [T2]


def test_without_staging_nothing_is_staged():
    job = Scenario(Tuning())
    job.enable("10:14:59", schedule_text="*/2 * * * * ?")
    job.tick("10:15:00")
    actions = job.step(ev.InvocationFinished(occurrence_id(T1), True, "", 0, 1, stage_next=True), "10:15:00.050")
    assert not [a for a in actions if isinstance(a, (act.Deliver, act.CancelTick))]
