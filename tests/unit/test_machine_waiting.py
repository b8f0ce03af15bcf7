"""Waiting occurrences (overlap `buffer_all`, `catchup: all`): each delivered once, in
order, with its own time, trigger and id, by a job record whose size does not grow
with how many wait."""

import json
from collections import Counter
from datetime import datetime, timedelta

import pytest

from statemachine import actions as act
from statemachine import events as ev
from statemachine.admission import MAX_TRIGGERED_WAITING
from statemachine.policy import Catchup, Overlap
from statemachine.record import JobState
from statemachine.record_form import record_from_dict, record_to_dict
from statemachine.waiting import DROP_BATCH, MAX_RUNS, peek
from tests.unit.machine_helpers import Scenario, clock, manual_id, occurrence_id, policy, skipped, started
from tests.unit.waiting_scenarios import GOLDEN, HOURS, SCENARIOS, START, make_policy, run, scheduled, summary
from tests.unit.waiting_sim import Simulation, iso

GOLDEN_RUNS = json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_small_run_delivers_and_skips_what_the_machine_did_before(name):
    """The same deliveries (time, trigger, id) and finishes in the same order, and the
    same SKIPPED rows, as when every waiting occurrence sat in the record one by one."""
    assert summary(run(name)) == GOLDEN_RUNS[name]


# --- thousands waiting ------------------------------------------------------------------

BOUND = 16 * 1024  # bytes of the serialized record, whatever waits
SECOND = timedelta(seconds=1)


def _every_second_busy(overlap: Overlap = Overlap.BUFFER_ALL) -> Simulation:
    """An every-second job whose first occurrence (10:00:31) takes 5,001 s; later ones 0.1 s."""
    policy = make_policy(schedule_text="* * * * * ?", overlap=overlap, timeout=3 * HOURS, attempt_timeout=2 * HOURS)
    first = START + SECOND
    return Simulation(policy, START, duration=lambda i: 5001 * SECOND if scheduled(i) == first else SECOND / 10,
                      bound=BOUND)


def iso_z(instant: datetime) -> str:
    """An instant as the record stores it."""
    return instant.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _seconds(first: datetime, last: datetime) -> list[datetime]:
    return [first + SECOND * n for n in range(int((last - first) / SECOND) + 1)]


def test_buffer_all_with_5000_waiting_keeps_the_record_small_and_delivers_each_once_in_order():
    sim = _every_second_busy()
    sim.run(START + 5001 * SECOND)
    waiting = peek(sim.record, 10_000)
    assert len(waiting) == 5000
    assert len(json.dumps(record_to_dict(sim.record))) < BOUND
    outcome = sim.run(START + 2 * HOURS)
    assert outcome.largest_record < BOUND, outcome.largest_record
    times = _seconds(START + SECOND, START + 2 * HOURS)
    assert outcome.delivered == [(iso(t), "schedule", occurrence_id(t)) for t in times]
    assert outcome.skipped == []


def test_a_30_day_broken_chain_under_catchup_all_is_worked_through_with_a_small_record():
    """An every-minute job under `catchup: {policy: all, window: 30d}` whose first tick comes
    30 days late: the tick takes the whole backlog at once, in a step of a few actions, and
    each of the 43,199 caught-up occurrences is delivered in order while the job's own
    occurrences meanwhile are SKIPPED/overlap (the default overlap policy)."""
    policy = make_policy(catchup=Catchup.ALL, catchup_window=timedelta(days=30))
    back = START + timedelta(days=30, seconds=15)  # 30 days later, at 10:00:45
    sim = Simulation(policy, START, duration=lambda _: SECOND, outages=((START + SECOND * 10, back),), bound=BOUND)
    outcome = sim.run(back + timedelta(hours=13))
    assert outcome.largest_record < BOUND, outcome.largest_record
    assert outcome.largest_step < 20, outcome.largest_step
    minutes = [START + timedelta(seconds=30) + timedelta(minutes=n) for n in range(30 * 1440 + 13 * 60)]
    caught = minutes[: 30 * 1440 - 1]  # 10:01 on day 0 .. 09:59 on day 30; 10:00 is on time
    assert outcome.delivered[: len(caught)] == [(iso(t), "catchup", occurrence_id(t)) for t in caught]
    later = outcome.delivered[len(caught):]
    assert later and {trigger for _, trigger, _ in later} == {"schedule"}
    assert {reason for *_, reason in outcome.skipped} == {"overlap"}
    recorded = [d[0] for d in outcome.delivered] + [s[1] for s in outcome.skipped]
    assert sorted(recorded) == [iso(t) for t in minutes]  # every fire time once, delivered or skipped


def test_an_old_record_with_a_long_buffered_list_delivers_all_of_it_first():
    """A record as the machine wrote it before runs existed: 1,200 waiting occurrences in
    `buffered` (and a person's trigger among them), no `runs`. They all start, in their
    order, before the occurrences that come after the upgrade."""
    sim = _every_second_busy()
    sim.run(START + 5 * SECOND)  # 10:00:31 in flight; 10:00:32 .. 10:00:35 waiting
    data = record_to_dict(sim.record)
    old_times = _seconds(START - 1200 * SECOND, START - SECOND)
    old = [[occurrence_id(t), iso_z(t), "schedule"] for t in old_times]
    manual = manual_id(START - 600 * SECOND, "r")
    old.insert(600, [manual, iso_z(START - 600 * SECOND), "manual"])
    new = [(o.scheduled_time, o.trigger) for o in peek(sim.record, 100)]
    data["buffered"] = old + [[occurrence_id(t), iso_z(t), trigger] for t, trigger in new]
    data.pop("runs", None), data.pop("dropping", None)  # what the machine before wrote has neither
    # A job with 1,200 occurrences behind it has succeeded before: its record holds that
    # time already, so the comparison below is about what waits, not about that field.
    data["last_succeeded_at"] = iso_z(START - 1201 * SECOND)
    record = record_from_dict(data)
    upgraded = Simulation(make_policy(), sim.now, record=record, duration=lambda _: SECOND / 10)
    upgraded.external(sim.now, ev.InvocationFinished(occurrence_id(START + SECOND), True))
    outcome = upgraded.run(START + HOURS / 2)
    expected = [(iso(t), "schedule", occurrence_id(t)) for t in old_times]
    expected.insert(600, (iso(START - 600 * SECOND), "manual", manual))
    expected += [(iso(t), "schedule", occurrence_id(t)) for t in _seconds(START + 2 * SECOND, START + HOURS / 2)]
    assert outcome.delivered[: len(expected)] == expected
    assert outcome.largest_record < len(json.dumps(data))  # it only shrinks
    assert len(json.dumps(record_to_dict(upgraded.record))) < BOUND


def test_a_pause_with_5000_waiting_records_them_skipped_a_batch_per_step():
    sim = _every_second_busy()
    sim.run(START + 5001 * SECOND)
    waiting = peek(sim.record, 10_000)
    sim.external(sim.now, ev.Paused("maintenance"))
    outcome = sim.run(sim.now + 10 * SECOND)
    assert outcome.largest_step <= DROP_BATCH + 1
    assert sorted(outcome.skipped) == sorted(
        (w.invocation_id, iso(w.scheduled_time), "schedule", "paused") for w in waiting)
    assert outcome.largest_record < BOUND
    assert sim.record.state is JobState.PAUSED and sim.record.tick_at is None and not sim.record.dropping
    sim.external(sim.now, ev.Resumed())  # the pause is over: the job fires on time again
    assert sim.run(sim.now + 5 * SECOND).delivered[-1][1] == "schedule"


def test_a_disable_with_5000_waiting_records_them_skipped_a_batch_per_step():
    sim = _every_second_busy()
    sim.run(START + 5001 * SECOND)
    count = len(peek(sim.record, 10_000))
    sim.external(sim.now, ev.JobDisabled())
    outcome = sim.run(sim.now + 10 * SECOND)
    assert outcome.largest_step <= DROP_BATCH + 1
    assert [s[3] for s in outcome.skipped] == ["disabled"] * count
    assert sim.record.state is JobState.DISABLED and sim.record.tick_at is None and not sim.record.dropping


def test_turning_to_buffer_one_with_5000_waiting_records_them_skipped_a_batch_per_step():
    """A newer occurrence replaces what waits under buffer_one: after a switch from buffer_all
    that is thousands of SKIPPED/overlap rows, written a batch per step."""
    sim = _every_second_busy()
    sim.run(START + 5001 * SECOND)
    later = make_policy(schedule_text="* * * * * ?", overlap=Overlap.BUFFER_ONE, timeout=3 * HOURS,
                        attempt_timeout=2 * HOURS, revision="r2")
    sim.external(sim.now, ev.ScheduleChanged(later))
    outcome = sim.run(sim.now + 30 * SECOND)
    assert outcome.largest_step <= DROP_BATCH + 1
    assert Counter(reason for *_, reason in outcome.skipped) == {"overlap": 4999}  # 10:00:32 started first
    assert len({s[0] for s in outcome.skipped}) == 4999
    assert not sim.record.dropping and sim.record.tick_at is not None


# --- caps --------------------------------------------------------------------------------


def test_past_max_triggered_waiting_a_persons_trigger_is_skipped_under_buffer_all():
    job = Scenario()
    job.enable("10:00", schedule_text="triggered", overlap=Overlap.BUFFER_ALL)
    for index in range(MAX_TRIGGERED_WAITING + 1):
        job.step(ev.ManualTrigger(f"req-{index}"), "10:01")
    assert len(peek(job.record, 1000)) == MAX_TRIGGERED_WAITING
    actions = job.step(ev.ManualTrigger("one-more"), "10:02")
    assert actions == [act.RecordSkipped(manual_id(clock("10:02"), "one-more"), clock("10:02"), "manual", "overlap")]
    # Another job's trigger has a cap of its own: it still waits.
    job.step(ev.ManualTrigger("src", "job:upstream", clock("10:02")), "10:02")
    assert len(peek(job.record, 1000)) == MAX_TRIGGERED_WAITING + 1


def test_a_time_recorded_missed_between_waiting_ones_is_never_delivered():
    job = Scenario()
    job.enable("10:00:30", schedule_text="every 1m", overlap=Overlap.BUFFER_ALL, catchup=Catchup.NONE)
    job.tick("10:01")  # runs from here on
    job.tick("10:02")  # waits
    assert skipped(clock("10:03"), "missed", "catchup") in job.tick("10:04:10")  # 10:04 waits
    assert [o.scheduled_time for o in peek(job.record, 10)] == [clock("10:02"), clock("10:04")]
    assert job.run_through(occurrence_id(clock("10:01")), "10:05")[1:] == started(clock("10:02"), clock("10:05"))
    assert job.run_through(occurrence_id(clock("10:02")), "10:05")[1:] == started(clock("10:04"), clock("10:05"))
    assert job.run_through(occurrence_id(clock("10:04")), "10:05")[1:] == []


def test_past_max_runs_an_occurrence_after_a_gap_is_skipped_for_overlap():
    """Each late tick of a busy `buffer_all` job leaves a gap among what waits (its older
    times are missed); past MAX_RUNS gaps, the newest is recorded SKIPPED/overlap."""
    job = Scenario()
    job.enable("10:00:30", schedule_text="every 1m", overlap=Overlap.BUFFER_ALL, catchup=Catchup.NONE,
               timeout=timedelta(days=1))
    job.tick("10:01")  # 10:01 runs from here on
    now = clock("10:01")
    for _ in range(MAX_RUNS):
        now = job.record.tick_at + timedelta(minutes=1)  # two due: the older missed, the newer waits
        job.tick(now)
    assert len(job.record.runs) == MAX_RUNS
    actions = job.tick(job.record.tick_at + timedelta(minutes=1))
    newest = job.record.scheduled_until
    assert act.RecordSkipped(occurrence_id(newest), newest, "schedule", "overlap") in actions
    waited = [o.scheduled_time for o in peek(job.record, 1000)]
    assert len(waited) == MAX_RUNS and newest not in waited
    assert len(json.dumps(record_to_dict(job.record))) < BOUND


# --- changes while occurrences wait ----------------------------------------------------------


def test_waiting_occurrences_keep_their_times_when_the_schedule_changes():
    job = Scenario()
    job.enable("10:00:30", schedule_text="every 1m", overlap=Overlap.BUFFER_ALL)
    job.tick("10:01")
    for minute in ("10:02", "10:03", "10:04"):
        job.tick(minute)
    job.step(ev.ScheduleChanged(policy(schedule_text="*/10 * * * *", overlap=Overlap.BUFFER_ALL, revision="r2")),
             "10:04:30")
    waited = [clock("10:02"), clock("10:03"), clock("10:04")]
    assert [o.scheduled_time for o in peek(job.record, 10)] == waited
    for previous, current in zip([clock("10:01")] + waited, waited):
        assert job.run_through(occurrence_id(previous), "10:05")[1:] == started(current, clock("10:05"))
