"""Scenario tests in LUCI's style: one behaviour each, the exact actions after every step."""

from datetime import timedelta

import pytest

from statemachine import actions as act
from statemachine import events as ev
from statemachine.machine import InvalidTransition
from statemachine.policy import Catchup, Overlap, RetryPolicy
from statemachine.waiting import peek
from tests.unit.machine_helpers import (
    Scenario,
    clock,
    delivered,
    manual_id,
    occurrence_id,
    policy,
    skipped,
    started,
)


def test_first_enable_schedules_exactly_one_tick():
    job = Scenario()
    assert job.enable("10:07") == [act.ScheduleTick(clock("10:15"), "1.1")]
    assert job.state == "SCHEDULED"
    assert job.record.watchdog_at == clock("10:15:30")


def test_reapplying_the_same_config_emits_nothing():
    job = Scenario()
    job.enable("10:07")
    before = job.record
    assert job.step(ev.JobEnabled(policy()), "10:08") == []
    assert job.step(ev.ScheduleChanged(policy()), "10:09") == []
    assert job.record == before


def test_schedule_change_bumps_generation_and_old_tick_is_stale():
    job = Scenario()
    job.enable("10:07")
    old_nonce = job.record.tick_nonce
    actions = job.step(ev.ScheduleChanged(policy(schedule_text="every 1h", revision="r2")), "10:08")
    assert actions == [act.ScheduleTick(clock("11:00"), "2.2")]
    assert job.record.generation == 2
    assert job.tick("10:15", nonce=old_nonce) == []
    assert job.record.active == ()


def test_change_that_keeps_the_timing_does_not_replan():
    job = Scenario()
    job.enable("10:07")
    nonce = job.record.tick_nonce
    assert job.step(ev.ScheduleChanged(policy(revision="r2", timeout=timedelta(minutes=1))), "10:08") == []
    assert job.record.tick_nonce == nonce
    assert job.record.policy.timeout == timedelta(minutes=1)


def test_stale_and_duplicate_ticks_are_ignored():
    job = Scenario()
    job.enable("10:07")
    nonce = job.record.tick_nonce
    assert job.tick("10:15", nonce="0.99") == []
    first = job.tick("10:15", nonce=nonce)
    assert first[:1] == [act.ScheduleTick(clock("10:30"), "1.2")]
    assert job.tick("10:15:01", nonce=nonce) == []  # the same task delivered twice


def test_tick_a_minute_early_rearms_for_the_same_time_with_a_fresh_nonce():
    job = Scenario()
    job.enable("10:07")
    assert job.tick("10:14") == [act.ScheduleTick(clock("10:15"), "1.2")]
    assert job.record.active == ()
    assert job.tick("10:15", nonce="1.1") == []  # the early task itself is spent


def test_tick_200ms_early_is_handed_back_to_the_queue():
    job = Scenario()
    job.enable("10:07")
    assert job.tick("10:14:59.800") == [act.RetryLater(timedelta(milliseconds=200))]
    assert job.record.tick_nonce == "1.1"


def test_tick_20ms_early_is_accepted_for_its_own_time():
    job = Scenario()
    job.enable("10:07")
    now = clock("10:14:59.980")
    assert job.tick(now) == [
        act.ScheduleTick(clock("10:30"), "1.2"),
        *started(clock("10:15"), now),
    ]


def test_absolute_schedule_rearms_on_every_tick():
    job = Scenario()
    job.enable("10:07")
    actions = job.tick("10:15")
    # Due now: the tick's own commit records attempt 1 as starting; no start task.
    assert actions == [act.ScheduleTick(clock("10:30"), "1.2"), *delivered(clock("10:15"), clock("10:15"))]
    assert job.state == "RUNNING"
    inv = occurrence_id(clock("10:15"))
    assert job.step(ev.InvocationStarting(inv), "10:15:01") == []  # nothing to start twice
    assert job.step(ev.InvocationFinished(inv, True), "10:15:02") == [
        act.FinishInvocation(inv, "SUCCEEDED", "")
    ]
    assert job.state == "SCHEDULED"


def test_relative_schedule_rearms_only_after_the_invocation_ends():
    job = Scenario()
    assert job.enable("10:00", schedule_text="with 10m interval") == [
        act.ScheduleTick(clock("10:10"), "1.1")
    ]
    assert job.tick("10:10") == delivered(clock("10:10"), clock("10:10"))
    assert job.record.tick_at is None
    inv = occurrence_id(clock("10:10"))
    actions = job.run_through(inv, "10:13")
    assert actions == [
        act.FinishInvocation(inv, "SUCCEEDED", ""),
        act.ScheduleTick(clock("10:23"), "1.2"),
    ]


def test_continuously_starts_again_min_backoff_after_it_ends():
    job = Scenario()
    # min_backoff (1 s by default) after enabling, as after every invocation.
    first = clock("10:00:01")
    assert job.enable("10:00", schedule_text="continuously") == [act.ScheduleTick(first, "1.1")]
    job.tick(first)
    actions = job.run_through(occurrence_id(first), "10:04")
    assert actions[-1] == act.ScheduleTick(clock("10:04:01"), "1.2")


@pytest.mark.parametrize("schedule_text", ["continuously", "with 0s interval", "with 100ms interval"])
def test_a_relative_schedule_waits_min_backoff_after_a_success(schedule_text):
    """A target that answers at once is not called flat out: every invocation, a
    success too, is followed by at least min_backoff (finding N7: 18 invocations/s)."""
    job = Scenario()
    retry = RetryPolicy(max_attempts=1, min_backoff=timedelta(seconds=3), max_backoff=timedelta(seconds=60))
    job.enable("10:00", schedule_text=schedule_text, retry=retry)
    due, starts = job.record.tick_at, []
    for _ in range(5):
        job.tick(due)
        starts.append(due)
        ended = due + timedelta(milliseconds=5)  # a quick success
        due = job.run_through(job.record.active[0].invocation_id, ended)[-1].at
        assert due - ended == timedelta(seconds=3)
    assert starts[-1] - starts[0] >= 4 * timedelta(seconds=3)


def test_continuously_waits_like_a_retry_after_failed_invocations():
    job = Scenario()
    retry = RetryPolicy(max_attempts=1, min_backoff=timedelta(seconds=2), max_backoff=timedelta(seconds=5))
    job.enable("10:00", schedule_text="continuously", retry=retry)
    due = job.record.tick_at
    waits = []
    for _ in range(4):  # each failure doubles the wait, up to max_backoff
        job.tick(due)
        ended = due + timedelta(seconds=1)
        actions = job.run_through(job.record.active[0].invocation_id, ended, succeeded=False, reason="http 500")
        due = actions[-1].at
        waits.append(due - ended)
    assert waits == [timedelta(seconds=2), timedelta(seconds=4), timedelta(seconds=5), timedelta(seconds=5)]
    job.tick(due)
    ended = due + timedelta(seconds=1)
    actions = job.run_through(job.record.active[0].invocation_id, ended)  # a success ends the doubling
    assert actions[-1].at == ended + timedelta(seconds=2)


# --- overlap --------------------------------------------------------------------------


def _busy_job(overlap: Overlap, **fields) -> Scenario:
    """An every-minute job whose 10:01 invocation is still running."""
    job = Scenario()
    job.enable("10:00:30", schedule_text="every 1m", overlap=overlap, **fields)
    job.tick("10:01")
    job.step(ev.InvocationStarting(occurrence_id(clock("10:01"))), "10:01")
    return job


def test_overlap_skip_records_the_occurrence_as_skipped():
    job = _busy_job(Overlap.SKIP)
    assert job.tick("10:02") == [act.ScheduleTick(clock("10:03"), "1.3"), skipped(clock("10:02"), "overlap")]
    assert job.state == "RUNNING"


def test_overlap_buffer_one_keeps_only_the_newest_waiting():
    job = _busy_job(Overlap.BUFFER_ONE)
    assert job.tick("10:02") == [act.ScheduleTick(clock("10:03"), "1.3")]
    assert job.tick("10:03") == [act.ScheduleTick(clock("10:04"), "1.4"), skipped(clock("10:02"), "overlap")]
    first = occurrence_id(clock("10:01"))
    assert job.run_through(first, "10:03:30") == [
        act.FinishInvocation(first, "SUCCEEDED", ""),
        *started(clock("10:03"), clock("10:03:30")),
    ]
    assert not job.record.has_waiting


def test_overlap_buffer_all_starts_them_in_order():
    job = _busy_job(Overlap.BUFFER_ALL)
    job.tick("10:02")
    job.tick("10:03")
    assert [o.scheduled_time for o in peek(job.record, 10)] == [clock("10:02"), clock("10:03")]
    first = occurrence_id(clock("10:01"))
    assert job.run_through(first, "10:03:30")[1:] == started(clock("10:02"), clock("10:03:30"))
    second = occurrence_id(clock("10:02"))
    assert job.run_through(second, "10:03:40")[1:] == started(clock("10:03"), clock("10:03:40"))


def test_overlap_allow_starts_up_to_max_concurrent_then_skips():
    job = _busy_job(Overlap.ALLOW, max_concurrent=2)
    assert job.tick("10:02")[1:] == delivered(clock("10:02"), clock("10:02"))
    assert job.tick("10:03")[1:] == [skipped(clock("10:03"), "overlap")]
    assert len(job.record.active) == 2


# --- catch-up after a 3-hour gap on an every-15-minutes job -----------------------------


def _after_gap(catchup: Catchup, window: timedelta = timedelta(hours=1)) -> tuple[Scenario, list]:
    job = Scenario()
    job.enable("09:50", catchup=catchup, catchup_window=window, overlap=Overlap.SKIP)
    # The 10:00 tick arrives at 13:05: thirteen occurrences 10:00 .. 13:00 are late.
    return job, job.tick("13:05")


GAP = [clock("10:00") + timedelta(minutes=15 * i) for i in range(13)]


def test_catchup_none_records_every_missed_occurrence():
    job, actions = _after_gap(Catchup.NONE)
    assert actions == [
        act.ScheduleTick(clock("13:15"), "1.2"),
        *[skipped(t, "missed", "catchup") for t in GAP],
    ]
    assert job.state == "SCHEDULED"


def test_catchup_latest_delivers_only_the_most_recent_in_window():
    job, actions = _after_gap(Catchup.LATEST)
    assert actions == [
        act.ScheduleTick(clock("13:15"), "1.2"),
        *[skipped(t, "missed", "catchup") for t in GAP[:-1]],
        *delivered(clock("13:00"), clock("13:05"), trigger="catchup"),
    ]


def test_catchup_all_delivers_each_in_window_in_order():
    job, actions = _after_gap(Catchup.ALL)
    in_window = [t for t in GAP if t >= clock("12:05")]  # 12:15, 12:30, 12:45, 13:00
    assert actions == [
        act.ScheduleTick(clock("13:15"), "1.2"),
        *[skipped(t, "missed", "catchup") for t in GAP if t not in in_window],
        *delivered(in_window[0], clock("13:05"), trigger="catchup"),
    ]
    assert [o.scheduled_time for o in peek(job.record, 10)] == in_window[1:]
    for current, following in zip(in_window, in_window[1:]):
        finished = job.run_through(occurrence_id(current), "13:06")
        assert finished[1:] == started(following, clock("13:06"), trigger="catchup")


def test_latest_is_superseded_by_an_on_time_occurrence():
    job = Scenario()
    job.enable("09:50", catchup=Catchup.LATEST)
    actions = job.tick("10:30:20")  # 10:00 and 10:15 late, 10:30 on time
    assert actions == [
        act.ScheduleTick(clock("10:45"), "1.2"),
        skipped(clock("10:00"), "missed", "catchup"),
        skipped(clock("10:15"), "missed", "catchup"),
        *delivered(clock("10:30"), clock("10:30:20")),
    ]


# --- a short gap: only the newest due occurrence is on time --------------------------------

SECONDS = [clock("10:00:00") + timedelta(seconds=i) for i in range(7)]  # 10:00:00 .. 10:00:06


def _six_seconds_late(catchup: Catchup) -> list:
    """An every-second job whose 10:00:00 tick is handled at 10:00:06 (say, a restart
    after a kill): seven occurrences are due, all well within late_tolerance."""
    job = Scenario()
    job.enable("09:59:59.5", schedule_text="* * * * * ?", catchup=catchup, overlap=Overlap.SKIP)
    return job.tick("10:00:06")


def test_a_short_gap_records_the_superseded_occurrences_missed_under_catchup_none():
    actions = _six_seconds_late(Catchup.NONE)
    assert actions == [
        act.ScheduleTick(clock("10:00:07"), "1.2"),
        *[skipped(t, "missed", "catchup") for t in SECONDS[:-1]],
        *delivered(SECONDS[-1], clock("10:00:06")),
    ]


def test_a_short_gap_delivers_only_the_newest_under_catchup_latest():
    actions = _six_seconds_late(Catchup.LATEST)
    assert [a for a in actions if isinstance(a, act.RecordSkipped)] == [
        skipped(t, "missed", "catchup") for t in SECONDS[:-1]]
    assert [a.scheduled_time for a in actions if isinstance(a, act.StartInvocation)] == [SECONDS[-1]]


def test_a_long_backlog_is_handled_in_bounded_batches():
    job = Scenario()
    job.tuning = type(job.tuning)(scan_limit=5)
    job.enable("09:50", catchup=Catchup.NONE)
    first = job.tick("13:05")
    assert first[0] == act.ScheduleTick(clock("13:05"), "1.2")  # continue at once
    assert len(first) == 1 + 5
    second = job.tick("13:05:01")
    third = job.tick("13:05:02")
    recorded = [a.scheduled_time for a in first + second + third if isinstance(a, act.RecordSkipped)]
    assert recorded == GAP
    assert third[0] == act.ScheduleTick(clock("13:15"), "1.4")


# --- pause, disable, manual triggers -----------------------------------------------------


def test_pause_then_resume_records_paused_occurrences_and_does_not_catch_up():
    job = Scenario()
    job.enable("10:07")
    assert job.step(ev.Paused("maintenance"), "10:10") == []
    assert job.state == "PAUSED"
    assert job.record.pause_reason == "maintenance"
    assert job.tick("10:15", nonce="1.1") == []  # the pending tick is stale now
    with pytest.raises(InvalidTransition, match="paused"):
        job.step(ev.ManualTrigger("req-1"), "10:20")
    # Resuming arms an immediate tick, which records what fell due meanwhile.
    assert job.step(ev.Resumed(), "10:50") == [act.ScheduleTick(clock("10:50"), "1.2")]
    assert job.tick("10:50") == [
        act.ScheduleTick(clock("11:00"), "1.3"),
        skipped(clock("10:15"), "paused"),
        skipped(clock("10:30"), "paused"),
        skipped(clock("10:45"), "paused"),
    ]
    assert job.state == "SCHEDULED"
    assert job.record.paused_through is None


def test_pause_drops_buffered_occurrences_with_reason_paused():
    job = _busy_job(Overlap.BUFFER_ONE)
    job.tick("10:02")
    assert job.step(ev.Paused(), "10:02:30") == [skipped(clock("10:02"), "paused")]
    first = occurrence_id(clock("10:01"))
    # In flight when the pause came: it finishes on its own.
    assert job.run_through(first, "10:02:40") == [act.FinishInvocation(first, "SUCCEEDED", "")]
    assert job.state == "PAUSED"


def test_disable_while_running_lets_the_invocation_finish():
    job = _busy_job(Overlap.SKIP)
    assert job.step(ev.JobDisabled(), "10:01:10") == []
    assert job.state == "DISABLED"
    assert job.record.tick_nonce is None
    first = occurrence_id(clock("10:01"))
    assert job.step(ev.InvocationFinished(first, True), "10:01:20") == [
        act.FinishInvocation(first, "SUCCEEDED", "")
    ]
    assert job.state == "DISABLED"
    assert job.step(ev.JobEnabled(policy(schedule_text="every 1m")), "10:05:30") == [
        act.ScheduleTick(clock("10:06"), "2.3")
    ]


def test_manual_trigger_starts_now_and_is_idempotent():
    job = Scenario()
    job.enable("10:07")
    now = clock("10:08")
    inv = manual_id(now, "req-1")
    assert job.step(ev.ManualTrigger("req-1"), now) == started(now, now, "manual", inv)
    assert job.step(ev.ManualTrigger("req-1"), now) == []


def test_manual_trigger_obeys_the_overlap_policy():
    job = _busy_job(Overlap.SKIP)
    now = clock("10:01:30")
    inv = manual_id(now, "req-2")
    assert job.step(ev.ManualTrigger("req-2"), now) == [act.RecordSkipped(inv, now, "manual", "overlap")]


def test_success_triggers_the_named_jobs_and_failure_does_not():
    job = Scenario()
    job.enable("10:07", triggers=("b", "c"))
    job.tick("10:15")
    inv = occurrence_id(clock("10:15"))
    assert job.run_through(inv, "10:16")[1:] == [act.TriggerJobs(("b", "c"), inv, clock("10:15"))]
    job.tick("10:30")
    failing = occurrence_id(clock("10:30"))
    assert job.run_through(failing, "10:31", succeeded=False, reason="http 500") == [
        act.RecordAttemptFailed(failing, 0, 1, "http 500", None),
        act.FinishInvocation(failing, "FAILED", "http 500"),
    ]
    assert job.record.consecutive_failures == 1


def test_a_job_trigger_names_its_source():
    job = Scenario()
    job.enable("10:00", schedule_text="triggered")
    now = clock("10:08")
    inv = manual_id(now, "src-inv", kind="j")
    assert job.step(ev.ManualTrigger("src-inv", trigger="job:a"), now) == started(now, now, "job:a", inv)


def test_abort_finishes_active_invocations_and_starts_what_waited():
    job = _busy_job(Overlap.BUFFER_ONE)
    job.tick("10:02")
    first = occurrence_id(clock("10:01"))
    actions = job.step(ev.Aborted("stuck"), "10:02:10")
    assert actions == [
        act.FinishInvocation(first, "ABORTED", "stuck"),
        *started(clock("10:02"), clock("10:02:10")),
    ]
    # The aborted delivery reports back later: stale, nothing happens.
    assert job.step(ev.InvocationFinished(first, True), "10:02:20") == []


def test_one_off_job_is_done_after_its_last_time():
    from statemachine.schedule import parse_at

    times = parse_at(["2026-01-05T10:10:00Z", "2026-01-05T10:20:00Z"]).times
    job = Scenario()
    assert job.enable("10:00", schedule_text="", at=times) == [act.ScheduleTick(clock("10:10"), "1.1")]
    job.tick("10:10")
    job.run_through(occurrence_id(clock("10:10")), "10:11")
    assert job.tick("10:20")[:2] == delivered(clock("10:20"), clock("10:20"))
    assert job.state == "RUNNING"
    job.run_through(occurrence_id(clock("10:20")), "10:21")
    assert job.state == "DONE"
    assert job.record.watchdog_at is None


def test_a_paused_job_delivers_nothing_that_had_not_started():
    job = Scenario()
    job.enable("10:07")
    job.tick("10:14:59.980")  # accepted a little early: its start waits in the queue
    job.step(ev.Paused(), "10:15:00.5")
    inv = occurrence_id(clock("10:15"))
    assert job.step(ev.InvocationStarting(inv), "10:15:01") == [
        act.FinishInvocation(inv, "SKIPPED", "paused")
    ]


def test_a_job_trigger_of_a_paused_job_is_recorded_as_skipped():
    job = Scenario()
    job.enable("10:07")
    job.step(ev.Paused(), "10:08")
    at = clock("10:09")
    inv = manual_id(at, "src-inv", kind="j")
    assert job.step(ev.ManualTrigger("src-inv", "job:a", at), "10:09:30") == [
        act.RecordSkipped(inv, at, "job:a", "paused")
    ]


def test_a_timing_change_first_settles_what_fell_due_under_the_old_timing():
    job = Scenario()
    job.enable("09:50", catchup=Catchup.NONE)
    # The 10:00 tick is still queued when the new schedule lands at 10:30:20.
    new = policy(schedule_text="every 1h", catchup=Catchup.NONE, revision="r2")
    assert job.step(ev.ScheduleChanged(new), "10:30:20") == [
        skipped(clock("10:00"), "missed", "catchup"),
        skipped(clock("10:15"), "missed", "catchup"),
        *started(clock("10:30"), clock("10:30:20")),
        act.ScheduleTick(clock("11:00"), "2.2"),
    ]
