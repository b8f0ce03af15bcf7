"""Jitter and start/end in the pure machine, with an explicit clock."""

from __future__ import annotations

import hashlib
from datetime import timedelta

from statemachine import actions as act
from statemachine import events as ev
from statemachine.policy import Catchup, FanoutPolicy, RetryPolicy, occurrence_delay
from statemachine.record_form import record_from_dict, record_to_dict
from statemachine.schedule import fire_times
from statemachine.stored_form import policy_from_dict, policy_to_dict
from tests.unit.machine_helpers import JOB, PROJECT, Scenario, clock, occurrence_id, policy

JITTER = timedelta(seconds=30)


def _delay(when, trigger="schedule", jitter=JITTER):
    return occurrence_delay(policy(jitter=jitter), PROJECT, JOB, when, trigger)


def test_the_delay_is_a_keyed_hash_of_project_job_and_scheduled_time_within_range():
    when = clock("10:15")
    ms = int(when.timestamp() * 1000)
    digest = hashlib.sha256(f"{PROJECT}/{JOB}/{ms}".encode()).digest()
    assert _delay(when) == timedelta(milliseconds=int.from_bytes(digest[:8], "big") % 30_000)
    delays = {_delay(clock("10:00") + timedelta(minutes=i)) for i in range(200)}
    assert all(timedelta(0) <= d < JITTER for d in delays)
    assert len(delays) > 150  # spread, not one value
    assert occurrence_delay(policy(jitter=JITTER), PROJECT, "other", when, "schedule") != _delay(when)


def test_no_jitter_for_manual_job_and_backfill_triggers_nor_without_jitter():
    when = clock("10:15")
    assert _delay(when, "catchup") == _delay(when)
    for trigger in ("manual", "job:other", "backfill"):
        assert _delay(when, trigger) == timedelta(0)
    assert _delay(when, jitter=timedelta(0)) == timedelta(0)


def test_the_first_attempt_is_due_at_nominal_time_plus_delay_and_keeps_the_nominal_time():
    job = Scenario()
    job.enable("10:00", jitter=JITTER)
    when = clock("10:15")
    actions = job.tick("10:15")
    invocation = occurrence_id(when)
    assert act.StartInvocation(invocation, when, "schedule", 1) in actions
    assert act.EnqueueAttempt(invocation, 0, 1, when + _delay(when)) in actions
    assert not [a for a in actions if isinstance(a, act.Deliver)]  # nothing goes before its delay
    assert job.state == "QUEUED"
    # The start task, when it comes, delivers the nominal time (headers and templates read it).
    deliver = [a for a in job.step(ev.InvocationStarting(invocation, 0, 1), when + _delay(when))
               if isinstance(a, act.Deliver)]
    assert deliver == [act.Deliver(invocation, when, "schedule", 0, 1, 1)]


def test_a_second_process_ticking_at_another_instant_computes_the_same_due_time():
    due = []
    for now in ("10:15", "10:15:00.700"):
        job = Scenario()
        job.enable("10:00", jitter=JITTER)
        due += [a.at for a in job.tick(now) if isinstance(a, act.EnqueueAttempt)]
    assert due == [clock("10:15") + _delay(clock("10:15"))] * 2


def test_a_retry_and_the_watchdog_do_not_move_the_occurrence_delay():
    job = Scenario()
    job.enable("10:00", jitter=JITTER, retry=RetryPolicy(max_attempts=2))
    when = clock("10:15")
    job.tick("10:15")
    invocation = occurrence_id(when)
    due = when + _delay(when)
    job.step(ev.InvocationStarting(invocation, 0, 1), due)
    actions = job.step(ev.InvocationFinished(invocation, False, "http 500", 0, 1), due + timedelta(seconds=1))
    retry = [a for a in actions if isinstance(a, act.EnqueueAttempt)]
    assert len(retry) == 1 and retry[0].attempt == 2
    # The retry waits its backoff from the answer, never restarts the jitter.
    assert due + timedelta(seconds=1) < retry[0].at <= due + timedelta(seconds=3)


def test_fanout_events_follow_the_delay():
    job = Scenario()
    job.enable("10:00", jitter=JITTER, fanout=FanoutPolicy(count=3, spread=timedelta(seconds=30)))
    when = clock("10:15")
    actions = job.tick("10:15")
    due = [a.at for a in actions if isinstance(a, act.EnqueueAttempt)]
    base = when + _delay(when)
    assert due == [base, base + timedelta(seconds=10), base + timedelta(seconds=20)]


def test_a_manual_trigger_is_not_delayed():
    job = Scenario()
    job.enable("10:00", jitter=JITTER)
    actions = job.step(ev.ManualTrigger(request_id="r1"), "10:05")
    assert [a.at for a in actions if isinstance(a, act.EnqueueAttempt)] == [clock("10:05")]


# --- start and end ----------------------------------------------------------------------

def test_no_occurrence_before_start_and_the_start_itself_fires():
    job = Scenario()
    job.enable("10:00", start=clock("10:30"))
    assert job.record.tick_at == clock("10:30")
    bounded = policy(start=clock("10:30"), end=clock("11:00")).schedule
    assert list(fire_times(bounded, clock("09:00"), clock("12:00"))) == [
        clock("10:30"), clock("10:45"), clock("11:00")]


def test_catchup_never_reaches_before_start():
    job = Scenario()
    job.enable("09:00", start=clock("10:30"), catchup=Catchup.ALL,
               catchup_window=timedelta(hours=3))
    actions = job.tick("11:20")  # the tick was due at 10:30; 10:30, 10:45, 11:00, 11:15 are due now
    times = sorted(a.scheduled_time for a in actions if isinstance(a, (act.StartInvocation, act.RecordSkipped)))
    waiting = [o.scheduled_time for o in job.record.buffered]
    assert min(times + waiting) >= clock("10:30")


def test_past_the_end_the_job_is_done_and_a_later_end_reopens_it():
    job = Scenario()
    job.enable("10:00", end=clock("10:30"))
    job.tick("10:15")
    job.run_through(occurrence_id(clock("10:15")), "10:15:01")
    job.tick("10:30")
    job.run_through(occurrence_id(clock("10:30")), "10:30:01")
    assert job.record.tick_at is None and job.state == "DONE"
    assert job.tick("10:45", nonce="stale") == []
    job.step(ev.ScheduleChanged(policy(end=clock("11:00"), revision="r2")), clock("10:50"))
    assert job.state == "SCHEDULED" and job.record.tick_at == clock("11:00")


def test_an_end_already_passed_when_enabled_makes_the_job_done_at_once():
    job = Scenario()
    job.enable("10:00", end=clock("09:00"))
    assert job.state == "DONE"


def test_bounds_and_jitter_survive_the_stored_form_and_an_old_record_reads_without_them():
    bounded = policy(jitter=JITTER, start=clock("10:30"), end=clock("11:00"))
    assert policy_from_dict(policy_to_dict(bounded)) == bounded
    plain = policy()
    stored = policy_to_dict(plain)
    assert not {"jitter_ms", "start", "end"} & set(stored)  # an old record's form, unchanged
    assert policy_from_dict(stored) == plain
    job = Scenario()
    job.enable("10:00", jitter=JITTER, end=clock("11:00"))
    assert record_from_dict(record_to_dict(job.record)) == job.record
