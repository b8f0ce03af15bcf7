"""Every (state, event) pair has a defined outcome, and each outcome is checked."""

from dataclasses import replace

import pytest

from statemachine import actions as act
from statemachine import events as ev
from statemachine.machine import IGNORE, NEXT_STATE, TRANSITIONS, InvalidTransition, Refusal, derive_state, step
from statemachine.record import JobState
from statemachine.schedule import parse_at
from tests.unit.machine_helpers import Scenario, clock, occurrence_id, policy

INV = occurrence_id(clock("10:15"))
NOW = clock("10:15")
LATER = clock("11:00")  # everything the watchdog watches is overdue by then


def _scheduled():
    job = Scenario()
    job.enable("10:07")
    return job


def _queued():
    job = _scheduled()
    job.tick("10:14:59.980")  # a little early: the start waits in the queue
    return job


def _running():
    job = _queued()
    job.step(ev.InvocationStarting(INV), "10:15")
    return job


def _paused():
    job = _running()
    job.step(ev.Paused("why"), "10:15")
    return job


def _disabled():
    job = _running()
    job.step(ev.JobDisabled(), "10:15")
    return job


def _done():
    job = Scenario()
    job.enable("10:00", schedule_text="", at=parse_at(["2026-01-05T10:05:00Z"]).times)
    job.tick("10:05")
    job.run_through(occurrence_id(clock("10:05")), "10:06")
    return job


BUILDERS = {
    JobState.SCHEDULED: _scheduled,
    JobState.QUEUED: _queued,
    JobState.RUNNING: _running,
    JobState.PAUSED: _paused,
    JobState.DISABLED: _disabled,
    JobState.DONE: _done,
}

NEW_POLICY = policy(schedule_text="every 5m", revision="r2")


def _event(kind, job: Scenario):
    samples = {
        ev.JobEnabled: ev.JobEnabled(NEW_POLICY),
        ev.JobDisabled: ev.JobDisabled(),
        ev.ScheduleChanged: ev.ScheduleChanged(NEW_POLICY),
        ev.TickArrived: ev.TickArrived(job.record.tick_nonce or "1.1"),
        ev.InvocationStarting: ev.InvocationStarting(INV),
        ev.InvocationStarted: ev.InvocationStarted(INV),
        ev.InvocationFinished: ev.InvocationFinished(INV, True),
        ev.AttemptInterrupted: ev.AttemptInterrupted(INV),
        ev.InvocationSettled: ev.InvocationSettled(INV, "SUCCEEDED"),
        ev.ManualTrigger: ev.ManualTrigger("req"),
        ev.Paused: ev.Paused("again"),
        ev.Resumed: ev.Resumed(),
        ev.Aborted: ev.Aborted(),
        ev.WatchdogFired: ev.WatchdogFired(),
    }
    return samples[kind]


PAIRS = [(state, kind) for state in JobState for kind in ev.ALL_EVENT_TYPES]


def test_the_table_defines_every_pair():
    for state in JobState:
        assert set(TRANSITIONS[state]) == set(ev.ALL_EVENT_TYPES), state
    assert set(NEXT_STATE) == set(JobState)
    assert all(set(row) == set(ev.ALL_EVENT_TYPES) for row in NEXT_STATE.values())


@pytest.mark.parametrize("state, kind", PAIRS, ids=lambda x: getattr(x, "__name__", str(x)))
def test_each_pair_has_its_defined_outcome(state, kind):
    job = BUILDERS[state]()
    assert job.record.state is state
    before = job.record
    event = _event(kind, job)
    now = LATER if kind is ev.WatchdogFired else NOW
    expected = NEXT_STATE[state][kind]
    entry = TRANSITIONS[state][kind]
    if expected is InvalidTransition:
        assert isinstance(entry, Refusal)
        with pytest.raises(InvalidTransition) as error:
            step(before, event, now)
        assert not hasattr(error.value, "code")  # the core names no API error code
        assert "proj/job" in str(error.value)
        return
    transition = step(before, event, now)
    if expected is IGNORE:
        assert entry is IGNORE
        assert transition.record is before and transition.actions == ()
        return
    assert callable(entry)
    assert transition.record.state is expected
    assert transition.record.state is derive_state(transition.record)


@pytest.mark.parametrize("state", list(JobState))
def test_stale_invocation_events_change_nothing_in_any_state(state):
    job = BUILDERS[state]()
    before = job.record
    for event in (
        ev.InvocationStarting("no-such-invocation"),
        ev.InvocationStarted("no-such-invocation"),
        ev.InvocationFinished("no-such-invocation", False, "x"),
        ev.InvocationFinished("no-such-invocation", True, attempt=None),
        ev.AttemptInterrupted("no-such-invocation"),
        ev.TickArrived("0.0"),
    ):
        transition = step(before, event, NOW)
        assert transition.actions == ()
        assert transition.record == before


@pytest.mark.parametrize("state, reason", [(JobState.PAUSED, "paused"), (JobState.DISABLED, "disabled")])
def test_a_stopped_job_refuses_a_persons_trigger_and_records_another_jobs_as_skipped(state, reason):
    record = BUILDERS[state]().record
    refusal = TRANSITIONS[state][ev.ManualTrigger]
    assert isinstance(refusal, Refusal)
    with pytest.raises(InvalidTransition, match=f"proj/job is {reason}"):
        step(record, ev.ManualTrigger("req"), NOW)
    transition = step(record, ev.ManualTrigger("src-inv", "job:a", NOW), NOW)
    assert [type(a) for a in transition.actions] == [act.RecordSkipped]
    assert transition.actions[0].reason == reason and transition.record.state is state


def test_a_refusal_leaves_the_record_unchanged():
    job = _paused()
    before = replace(job.record)
    with pytest.raises(InvalidTransition):
        job.step(ev.ManualTrigger("r"), "10:20")
    assert job.record == before


def test_the_same_step_twice_gives_the_same_transition():
    for state, build in BUILDERS.items():
        record = build().record
        for kind in ev.ALL_EVENT_TYPES:
            event = _event(kind, Scenario())
            try:
                first = step(record, event, NOW)
            except InvalidTransition:
                continue
            assert step(record, event, NOW) == first, (state, kind)
