"""A staged occurrence whose process died before letting it out is judged at the restart
as its tick would judge it then (statemachine/staging.py, `missed_meanwhile`): the
catch-up policy records it missed when a newer fire time is already due, or when it is
later than `late_tolerance` and the policy does not catch it up."""

from datetime import timedelta

import pytest

from statemachine import actions as act
from statemachine import events as ev
from statemachine.policy import Catchup, RetryPolicy, Tuning
from statemachine.vocabulary import InvocationStatus, SkipReason
from tests.unit.machine_helpers import Scenario, clock, occurrence_id

STAGED = Tuning(stage_ahead=timedelta(seconds=1))
EVERY_SECOND_T = clock("10:07:05")
INV = occurrence_id(EVERY_SECOND_T)
MISSED = act.FinishInvocation(INV, InvocationStatus.SKIPPED, SkipReason.MISSED)


def _staged_every_second(catchup: Catchup) -> Scenario:
    """A job every second, its 10:07:05 occurrence staged at 10:07:04.6."""
    job = Scenario(STAGED)
    job.enable("10:07:04", schedule_text="* * * * * ?", catchup=catchup,
               retry=RetryPolicy(max_attempts=1))
    actions = job.tick("10:07:04.600")
    assert [a.invocation_id for a in actions if isinstance(a, act.Deliver)] == [INV]
    return job


def _lost_unreleased(job: Scenario, at: str) -> list:
    """Its process died having released up to 10:07:04.9 only: the request never left."""
    return job.step(ev.AttemptInterrupted(INV, 0, 1, released_until=clock("10:07:04.900")), at)


@pytest.mark.parametrize("catchup", [Catchup.NONE, Catchup.LATEST])
def test_a_staged_occurrence_superseded_during_the_outage_is_recorded_missed(catchup):
    # Killed at 10:07:05.25, restarted 6 s later: 10:07:06..10:07:11 are due, the newest on time.
    job = _staged_every_second(catchup)
    actions = _lost_unreleased(job, "10:07:11.300")
    assert MISSED in actions
    assert not [a for a in actions if isinstance(a, act.EnqueueAttempt) and a.invocation_id == INV]
    assert job.record.find_active(INV) is None


def test_catchup_all_still_delivers_a_superseded_staged_occurrence_under_its_id():
    job = _staged_every_second(Catchup.ALL)
    assert _lost_unreleased(job, "10:07:11.300") == [act.EnqueueAttempt(INV, 0, 1, EVERY_SECOND_T)]


def test_a_staged_occurrence_still_on_time_at_the_restart_is_delivered():
    # Restarted within the same second: nothing newer is due, and it is on time.
    job = _staged_every_second(Catchup.NONE)
    assert _lost_unreleased(job, "10:07:05.800") == [act.EnqueueAttempt(INV, 0, 1, EVERY_SECOND_T)]


QUARTER_T = clock("10:15")
QUARTER_INV = occurrence_id(QUARTER_T)


def _staged_quarterly(catchup: Catchup) -> Scenario:
    job = Scenario(STAGED)
    job.enable("10:07", schedule_text="*/15 * * * *", catchup=catchup)
    job.tick("10:14:59.200")
    return job


def test_a_lone_staged_occurrence_later_than_the_tolerance_is_missed_under_none():
    job = _staged_quarterly(Catchup.NONE)
    lost = ev.AttemptInterrupted(QUARTER_INV, 0, 1, released_until=clock("10:14:59"))
    actions = job.step(lost, "10:17")  # two minutes late, 10:30 not due yet
    assert act.FinishInvocation(QUARTER_INV, InvocationStatus.SKIPPED, SkipReason.MISSED) in actions


def test_a_lone_late_staged_occurrence_is_caught_up_under_latest():
    job = _staged_quarterly(Catchup.LATEST)
    lost = ev.AttemptInterrupted(QUARTER_INV, 0, 1, released_until=clock("10:14:59"))
    assert job.step(lost, "10:17") == [act.EnqueueAttempt(QUARTER_INV, 0, 1, QUARTER_T)]
