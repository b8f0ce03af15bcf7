"""Deadline timers (statemachine/deadlines.py): which steps arm one, and what it does
when it comes. The pure core, with an explicit `now`."""

from datetime import timedelta

from statemachine import actions as act
from statemachine import events as ev
from statemachine.deadlines import DeadlineDue
from statemachine.fanout_step import EventsCheckDue
from statemachine.policy import FanoutPolicy, RetryPolicy
from tests.unit.machine_helpers import Scenario, clock, delivered, manual_id, occurrence_id

T = clock("10:15")
INV = occurrence_id(T)
TWO_SECONDS = timedelta(seconds=2)


def _timers(actions: list) -> list:
    return [action for action in actions if isinstance(action, act.ArmDeadline)]


def _async_in_flight() -> Scenario:
    """An every-15-minutes job whose 10:15 attempt was sent inline at 10:15; its timeout
    and its attempt's are 2 s: the attempt's answer is due by the deadline."""
    job = Scenario()
    job.enable("10:07", timeout=TWO_SECONDS, attempt_timeout=TWO_SECONDS)
    assert _timers(job.tick("10:15")) == []
    return job


def test_an_accepted_attempt_arms_the_timer_at_the_deadline_and_it_ends_the_invocation_there():
    job = _async_in_flight()
    assert job.record.find_active(INV).deadline == clock("10:15:02")
    assert job.step(ev.InvocationStarted(INV, epoch=1), "10:15:00.100") == [act.ArmDeadline(INV, clock("10:15:02"))]
    assert job.step(DeadlineDue(INV), "10:15:02") == [act.FinishInvocation(INV, "FAILED", "timeout")]
    assert job.record.active == () and job.state == "SCHEDULED"


def test_a_timer_that_comes_early_goes_back_to_the_queue_until_the_deadline():
    job = _async_in_flight()
    job.step(ev.InvocationStarted(INV, epoch=1), "10:15:00.100")
    before = job.record
    assert job.step(DeadlineDue(INV), "10:15:01.750") == [act.RetryLater(timedelta(milliseconds=250))]
    assert job.record == before


def test_a_timer_whose_invocation_already_ended_changes_nothing():
    job = _async_in_flight()
    job.step(ev.InvocationStarted(INV, epoch=1), "10:15:00.100")
    job.step(ev.InvocationFinished(INV, True, attempt=None), "10:15:01")
    before = job.record
    assert job.step(DeadlineDue(INV), "10:15:02") == []
    assert job.record == before


def test_a_synchronous_attempt_that_answers_before_the_deadline_arms_no_timer():
    job = Scenario()
    job.enable("10:07")  # timeout 10 m, attempt timeout 60 s: its answer comes first
    assert job.tick("10:15")[1:] == delivered(T)
    assert _timers(job.step(ev.InvocationFinished(INV, False, "http 500", 0, 1, epoch=1), "10:15:01")) == []


def test_an_attempt_timeout_longer_than_the_invocations_arms_the_timer_with_the_attempt():
    job = Scenario()
    job.enable("10:07", timeout=TWO_SECONDS, attempt_timeout=timedelta(seconds=30))
    actions = job.tick("10:15")
    assert actions[-1] == act.ArmDeadline(INV, clock("10:15:02"))
    # Armed once: the steps that follow, while it still needs one, arm nothing more.
    assert job.step(ev.InvocationStarting(INV), "10:15:01") == []


def test_a_manual_trigger_arms_it_as_a_scheduled_occurrence_does():
    job = Scenario()
    job.enable("10:07", schedule_text="triggered", timeout=TWO_SECONDS, attempt_timeout=timedelta(seconds=30))
    invocation = manual_id(clock("10:20"), "req")
    assert _timers(job.step(ev.ManualTrigger("req"), "10:20")) == []  # its start task is due now
    assert _timers(job.step(ev.InvocationStarting(invocation), "10:20")) == [
        act.ArmDeadline(invocation, clock("10:20:02"))]


def test_a_retry_whose_answer_would_come_after_the_deadline_arms_the_timer_when_it_starts():
    job = Scenario()
    retry = RetryPolicy(max_attempts=3, min_backoff=timedelta(seconds=1), max_backoff=timedelta(seconds=1))
    job.enable("10:07", timeout=timedelta(seconds=90), attempt_timeout=timedelta(seconds=60), retry=retry)
    assert _timers(job.tick("10:15")) == []  # the first attempt answers within 60 s of 10:15
    failed = job.step(ev.InvocationFinished(INV, False, "http 500", 0, 1, epoch=1), "10:15:40")
    assert _timers(failed) == []  # the retry is due at 10:15:41, before the deadline
    retry_at = next(a.at for a in failed if isinstance(a, act.EnqueueAttempt))
    assert _timers(job.step(ev.InvocationStarting(INV, 0, 2), retry_at)) == [act.ArmDeadline(INV, clock("10:16:30"))]


def test_a_fanout_arms_its_timer_at_the_start_and_it_ends_events_still_accepted():
    job = Scenario()
    job.enable("10:07", timeout=TWO_SECONDS, fanout=FanoutPolicy(count=3, spread=timedelta(seconds=3)))
    deadline = clock("10:15:05")  # the spread, then the timeout
    assert _timers(job.tick("10:15")) == [act.ArmDeadline(INV, deadline)]
    for index in range(3):
        job.step(ev.InvocationStarting(INV, index, 1), T + timedelta(seconds=index))
        job.step(ev.InvocationStarted(INV, index, 1), T + timedelta(seconds=index, milliseconds=100))
    assert job.step(DeadlineDue(INV), deadline) == [act.FinishInvocation(INV, "FAILED", "timeout")]


def test_a_fanout_whose_events_all_ended_before_its_check_ends_as_they_say():
    job = Scenario()
    job.enable("10:07", timeout=TWO_SECONDS, fanout=FanoutPolicy(count=2, spread=timedelta(seconds=1)))
    job.tick("10:15")
    for index in range(2):
        job.step(ev.InvocationStarting(INV, index, 1), T + timedelta(milliseconds=500 * index))
        job.step(ev.InvocationFinished(INV, True, "", index, 1), T + timedelta(milliseconds=500 * index + 10))
    # The check asked for is due after the deadline; the timer comes first.
    assert job.step(DeadlineDue(INV), "10:15:03") == [act.FinishInvocation(INV, "SUCCEEDED", "")]
    assert job.step(EventsCheckDue(INV), "10:15:04") == []


def test_a_throttled_jobs_start_may_wait_past_the_deadline_so_it_arms_the_timer():
    job = Scenario()
    job.enable("10:07", timeout=TWO_SECONDS, throttle="consumers")
    assert _timers(job.tick("10:15")) == [act.ArmDeadline(INV, clock("10:15:02"))]
    assert job.step(DeadlineDue(INV), "10:15:02") == [act.FinishInvocation(INV, "FAILED", "timeout")]
