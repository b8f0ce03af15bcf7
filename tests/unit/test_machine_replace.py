"""`overlap: replace` in the pure core: a new occurrence aborts the active invocation
(ABORTED/replaced), which then starts nothing, and starts at once; the replaced attempt's
late answer is refused. Explicit `now` throughout."""

from datetime import timedelta

from statemachine import actions as act
from statemachine import events as ev
from statemachine.policy import Catchup, Overlap
from statemachine.vocabulary import AbortReason
from tests.unit.machine_helpers import Scenario, clock, delivered, occurrence_id


def test_a_new_occurrence_aborts_the_active_one_and_starts_at_once():
    job = Scenario()
    job.enable("10:07", overlap=Overlap.REPLACE, triggers=("after",), triggers_on_failure=("alarm",))
    job.tick("10:15")
    first = occurrence_id(clock("10:15"))
    assert job.record.find_active(first) is not None
    actions = job.tick("10:30")
    assert act.FinishInvocation(first, "ABORTED", AbortReason.REPLACED) in actions
    assert actions[-2:] == delivered(clock("10:30"))
    assert not [action for action in actions if isinstance(action, act.TriggerJobs)]  # an abort starts nothing
    assert [entry.scheduled_time for entry in job.record.active] == [clock("10:30")]
    assert job.state in ("RUNNING", "QUEUED")


def test_the_replaced_attempts_late_answer_changes_nothing():
    job = Scenario()
    job.enable("10:07", overlap=Overlap.REPLACE)
    job.tick("10:15")
    first = occurrence_id(clock("10:15"))
    attempt = job.record.find_active(first).attempts[0]
    job.tick("10:30")
    before = job.record
    actions = job.step(ev.InvocationFinished(first, True, "", 0, attempt), "10:31")
    assert job.record.active == before.active
    assert not [action for action in actions if isinstance(action, (act.FinishInvocation, act.TriggerJobs))]


def test_with_skip_the_same_occurrence_is_skipped():
    """The first test fails for the right reason: the policy, not the schedule."""
    job = Scenario()
    job.enable("10:07", overlap=Overlap.SKIP)
    job.tick("10:15")
    actions = job.tick("10:30")
    assert act.RecordSkipped(occurrence_id(clock("10:30")), clock("10:30"), "schedule", "overlap") in actions


def test_an_occurrence_replaced_in_the_tick_that_started_it_is_never_delivered():
    """A tick that finds two fire times due under `catchup: all` starts the older as a
    catch-up and the newer replaces it at once: the older is ABORTED/replaced and no
    Deliver is left for it (the shell would mark an aborted attempt RUNNING and call
    the target). Found by tests/unit/test_machine_properties.py."""
    job = Scenario()
    job.enable("10:07", overlap=Overlap.REPLACE, catchup=Catchup.ALL, catchup_window=timedelta(hours=1))
    actions = job.tick("10:31")
    older, newer = occurrence_id(clock("10:15")), occurrence_id(clock("10:30"))
    assert act.FinishInvocation(older, "ABORTED", AbortReason.REPLACED) in actions
    delivered_ids = [action.invocation_id for action in actions if isinstance(action, act.Deliver)]
    assert delivered_ids == [newer]
    assert [entry.invocation_id for entry in job.record.active] == [newer]
