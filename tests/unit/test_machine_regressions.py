"""Machine regressions: handled fire times stay handled, ids stay unique, every event has an outcome."""

from datetime import timedelta

from statemachine import actions as act
from statemachine import events as ev
from statemachine.policy import Overlap
from tests.unit.machine_helpers import Scenario, clock, policy


def _starts(actions):
    return [a for a in actions if isinstance(a, act.StartInvocation)]


def test_a_timing_change_just_after_an_early_tick_does_not_start_its_occurrence_again():
    """A tick accepted 30 ms early handles 10:15; a timing change 20 ms later (only
    the timezone) must not move scheduled_until back to now. Otherwise 10:15 is
    planned again and started a second time under the same id while the first is active."""
    job = Scenario()
    job.enable("10:07", overlap=Overlap.ALLOW, max_concurrent=5)
    first = _starts(job.tick("10:14:59.970"))
    assert [s.scheduled_time for s in first] == [clock("10:15")]
    job.step(ev.ScheduleChanged(policy(overlap=Overlap.ALLOW, max_concurrent=5,
                                       timezone="Europe/Paris", revision="r2")), "10:14:59.990")
    again = _starts(job.tick("10:15"))
    assert again == [], "10:15 was started a second time"
    ids = [e.invocation_id for e in job.record.active]
    assert len(ids) == len(set(ids))


def test_continuously_gives_a_run_ending_within_the_same_millisecond_a_new_invocation_id():
    """'continuously' arms its next tick at the previous run's end, and occurrence ids
    have millisecond resolution. A run shorter than 1 ms must still leave the next
    invocation a new id, or its row overwrites the finished one and targets de-dup it."""
    job = Scenario()
    job.enable("10:00", schedule_text="continuously")
    due = job.record.tick_at  # min_backoff after enabling, as after each run
    first = _starts(job.tick(due))[0].invocation_id
    job.run_through(first, due + timedelta(microseconds=400))
    second = _starts(job.tick(job.record.tick_at))[0].invocation_id
    assert second != first


def test_abort_and_invocation_events_on_a_never_enabled_record_are_ignored():
    """A job first imported with `disabled: true` has no policy. Aborted, or a stray
    invocation event such as a start task, must have an outcome like every other
    (state, event) pair, not raise an error the engine would retry forever."""
    job = Scenario()
    for event in (ev.Aborted(), ev.InvocationStarting("x"), ev.InvocationFinished("x", True)):
        job.step(event, "10:00")
