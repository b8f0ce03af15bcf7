"""Fan-in (`after: [a, b]`) in the pure core: a job runs once for a scheduled time T when
every upstream job reported a SUCCEEDED invocation for T; a failure skips T at once; the
window's end skips it naming who did not succeed; the waiting times are bounded; an
upstream job reports each end of its invocations. Explicit `now` throughout."""

from datetime import timedelta

from statemachine import actions as act
from statemachine import events as ev
from statemachine import fanin, ids
from statemachine.record_form import record_to_dict
from statemachine.shown import next_run
from statemachine.vocabulary import SkipReason
from tests.unit.machine_helpers import JOB, PROJECT, Scenario, clock, occurrence_id

T = clock("10:00")


def _fan_in(window: timedelta = timedelta(minutes=30)) -> Scenario:
    job = Scenario()
    job.enable("09:00", schedule_text="triggered", after=("a", "b"), after_window=window)
    return job


def _report(job: Scenario, upstream: str, status: str, at: str, scheduled=T) -> list:
    event = ev.ManualTrigger(f"{upstream}-inv-{scheduled:%H%M}", "after", scheduled, upstream=upstream,
                             upstream_status=status)
    return job.step(event, at)


def _after_id(scheduled=T) -> str:
    return ids.invocation_id(PROJECT, JOB, scheduled, ids.AFTER)


def test_runs_once_when_every_upstream_job_succeeded_for_the_time():
    job = _fan_in()
    assert not [a for a in _report(job, "a", "SUCCEEDED", "10:01") if isinstance(a, act.StartInvocation)]
    assert job.record.tick_at == clock("10:31")  # the window's end is armed
    actions = _report(job, "b", "SUCCEEDED", "10:05")
    starts = [a for a in actions if isinstance(a, act.StartInvocation)]
    assert [(s.invocation_id, s.scheduled_time, s.trigger) for s in starts] == [(_after_id(), T, "after")]
    assert job.record.tick_at is None  # nothing waits any more
    # A repeated report (a re-run of b for T) starts nothing a second time.
    assert not [a for a in _report(job, "b", "SUCCEEDED", "10:06") if isinstance(a, act.StartInvocation)]


def test_a_failed_upstream_skips_the_time_at_once_naming_it():
    job = _fan_in()
    _report(job, "a", "SUCCEEDED", "10:01")
    actions = _report(job, "b", "FAILED", "10:02")
    assert [a for a in actions if isinstance(a, act.RecordSkipped)] == [
        act.RecordSkipped(_after_id(), T, "after", SkipReason.UPSTREAM, "upstream job b ended FAILED")]
    assert not [a for a in _report(job, "b", "SUCCEEDED", "10:03") if isinstance(a, act.StartInvocation)]


def test_the_window_ends_the_wait_naming_the_missing_jobs():
    job = _fan_in()
    _report(job, "a", "SUCCEEDED", "10:01")
    assert not [a for a in job.tick("10:20") if isinstance(a, act.RecordSkipped)]  # early: re-armed
    actions = job.step(ev.TickArrived(job.record.tick_nonce), "10:31")
    assert [a for a in actions if isinstance(a, act.RecordSkipped)] == [
        act.RecordSkipped(_after_id(), T, "after", SkipReason.UPSTREAM, "no success of b within 30m")]
    assert job.record.awaiting == () and job.record.tick_at is None


def test_times_are_counted_apart():
    job = _fan_in()
    later = T + timedelta(hours=1)
    _report(job, "a", "SUCCEEDED", "10:01")
    _report(job, "b", "SUCCEEDED", "10:02", scheduled=later)
    assert not [a for a in _report(job, "a", "FAILED", "10:03", scheduled=later) if isinstance(a, act.StartInvocation)]
    starts = [a for a in _report(job, "b", "SUCCEEDED", "10:04") if isinstance(a, act.StartInvocation)]
    assert [s.scheduled_time for s in starts] == [T]


def test_the_waiting_times_are_bounded_the_oldest_skipped():
    job = _fan_in(window=timedelta(days=30))
    for index in range(fanin.MOST_AWAITED):
        _report(job, "a", "SUCCEEDED", "10:00", scheduled=T + timedelta(minutes=index))
    actions = _report(job, "a", "SUCCEEDED", "10:00", scheduled=T + timedelta(minutes=fanin.MOST_AWAITED))
    assert len(job.record.awaiting) == fanin.MOST_AWAITED
    assert [a for a in actions if isinstance(a, act.RecordSkipped)] == [
        act.RecordSkipped(_after_id(), T, "after", SkipReason.UPSTREAM,
                          "too many scheduled times waiting; no success of b")]


def test_a_report_from_a_job_not_listed_changes_nothing():
    job = _fan_in()
    before = job.record
    assert _report(job, "c", "SUCCEEDED", "10:01") == []
    assert job.record == before


def test_a_paused_job_counts_and_records_a_completed_time_skipped_paused():
    job = _fan_in()
    job.step(ev.Paused("maintenance"), "10:00")
    _report(job, "a", "SUCCEEDED", "10:01")
    assert job.record.tick_at is None  # no window's end while paused
    actions = _report(job, "b", "SUCCEEDED", "10:02")
    assert [a for a in actions if isinstance(a, act.RecordSkipped)] == [
        act.RecordSkipped(_after_id(), T, "after", SkipReason.PAUSED)]


def test_an_upstream_job_reports_each_end_but_a_persons_trigger():
    job = Scenario()
    job.enable("10:07", reports_to=("c",))
    job.tick("10:15")
    invocation = occurrence_id(clock("10:15"))
    ended = job.run_through(invocation, "10:15", succeeded=False, reason="http 500")
    assert [a for a in ended if isinstance(a, act.TriggerJobs)] == [
        act.TriggerJobs(("c",), invocation, clock("10:15"), "FAILED")]
    job.step(ev.ManualTrigger("req-1"), "10:20")
    manual = job.record.active[0].invocation_id
    assert not [a for a in job.run_through(manual, "10:20") if isinstance(a, act.TriggerJobs)]


def test_only_fan_in_jobs_store_the_new_keys():
    plain = Scenario()
    plain.enable("09:00")
    stored = record_to_dict(plain.record)
    assert "awaiting" not in stored and not {"after", "reports_to"} & stored["policy"].keys()
    job = _fan_in()
    _report(job, "a", "SUCCEEDED", "10:01")
    stored = record_to_dict(job.record)
    assert stored["awaiting"] == [["2026-01-05T10:00:00.000000Z", "2026-01-05T10:31:00.000000Z", ["a"], False]]
    assert stored["policy"]["after"] == [["a", "b"], 30 * 60 * 1000]


def test_a_job_that_loses_its_after_drops_what_waited():
    job = _fan_in()
    _report(job, "a", "SUCCEEDED", "10:01")
    job.enable("10:02")  # now `every 15m`, no after
    assert job.record.awaiting == () and job.record.tick_at == clock("10:15")


def test_a_window_s_end_is_not_shown_as_the_next_run():
    job = _fan_in()
    _report(job, "a", "SUCCEEDED", "10:01")
    assert job.record.tick_at == clock("10:31")
    assert next_run(job.record, clock("10:02")) is None
