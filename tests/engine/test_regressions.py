"""Engine regressions: early, redelivered and look-alike tasks, pauses and backlogs."""

from datetime import timedelta

import pytest

from engine.config_import import JobSnapshot, ProjectSnapshot
from engine.ports import DeliveryResult, InvocationRow
from engine.recording import LOG_LIMIT, append_log, start_task, trigger_task
from statemachine import actions as act
from statemachine import events as ev
from statemachine.definition import JobDefinition
from statemachine.policy import FanoutPolicy, JobPolicy, Overlap
from tests.engine.harness import START, Harness


@pytest.fixture
def h(tmp_path):
    return Harness(tmp_path)


def _two_jobs(h, **b_policy):
    """Triggered jobs a and b in one project; a's success triggers b."""
    a = JobSnapshot("a", JobPolicy(schedule_text="triggered", revision="a1", triggers=("b",)),
                    JobDefinition(id="a", schedule="triggered", target={"noop": {}}), False)
    b = JobSnapshot("b", JobPolicy(schedule_text="triggered", revision="b1", **b_policy),
                    JobDefinition(id="b", schedule="triggered", target={"noop": {}}), False)
    h.engine.configs.import_project(ProjectSnapshot("proj", "v1", jobs=(a, b)))


def test_a_tick_more_than_a_second_early_is_rearmed_not_lost(h):
    """DESIGN 'The chain' 3: a tick handed over more than a second early must re-arm
    itself under a new task name; were it the handled task's name, the queue's
    de-dup would swallow it and the 10:01 occurrence would not be delivered on time."""
    h.define()  # every 1m: tick for 10:01
    h.clock.advance(seconds=55)
    # The queue hands the tick over 5 s early (clock skew between processes,
    # or Cloud Tasks' inexact ETA / 30-day hop).
    h.queue.shift_etas(timedelta(seconds=-5))
    assert h.dispatcher.run_due_now() == 1
    assert h.queue.pending() >= 1, "the re-armed tick was swallowed by the name de-dup"
    h.run_until(START + timedelta(minutes=1, seconds=5))
    assert [r.scheduled_time for r in h.invocations()] == [START + timedelta(minutes=1)]


def test_a_redelivered_job_trigger_task_starts_no_second_invocation(h):
    """A `trigger` task (a's success -> b) delivered again 30 s later (the process
    died between commit and delete, the lease ran out) must not start b again:
    the invocation it names comes from a's scheduled time, not from when it is handled."""
    _two_jobs(h)
    h.engine.changes.apply("proj", "a", ev.ManualTrigger("req-1"))
    h.run_until(START + timedelta(seconds=1))
    source = h.invocations("a")[0].id
    assert [r.status for r in h.invocations("b")] == ["SUCCEEDED"]
    # The same trigger task comes again 30 s later (lease expiry after a crash).
    task = trigger_task("proj", "a", "b", source, h.invocations("a")[0].scheduled_time, START)
    h.clock.advance(seconds=30)
    h.engine.tasks.handle(task)
    h.run_until(h.clock.current + timedelta(seconds=1))
    assert len(h.invocations("b")) == 1, [(r.id, r.trigger) for r in h.invocations("b")]


def test_a_job_trigger_redelivered_while_the_first_is_active_starts_once(h):
    """With overlap allow, a trigger task redelivered 1 ms later, while b's first
    invocation is still active, must be recognised as the same request."""
    _two_jobs(h, overlap=Overlap.ALLOW, max_concurrent=5)
    task = trigger_task("proj", "a", "b", "src-invocation", h.clock.now(), h.clock.now())
    h.engine.tasks.handle(task)
    h.engine.inbox.fold("proj", "b")  # what b's inbox task does (engine/inbox.py)
    h.clock.advance(milliseconds=1)
    h.engine.tasks.handle(task)
    h.engine.inbox.fold("proj", "b")
    assert len(h.store.get_job("proj", "b").record.active) == 1


def test_an_occurrence_due_but_unhandled_when_paused_is_still_recorded(h):
    """The 10:01 tick is due but not yet handled when a pause lands at 10:01:00.5.
    After the resume at 10:05:10, 10:01 must have a record like 10:02..10:05,
    although it lies between scheduled_until and the pause."""
    h.define()
    h.run_until(START + timedelta(seconds=59))
    h.clock.advance(seconds=1, milliseconds=500)  # 10:01:00.5, tick not yet run
    h.engine.changes.apply("proj", "job", ev.Paused("ops"))
    h.clock.current = START + timedelta(minutes=5, seconds=10)
    h.run_until(h.clock.current)
    h.engine.changes.apply("proj", "job", ev.Resumed())
    h.run_until(h.clock.current)  # resume's immediate tick records the pause
    times = {r.scheduled_time for r in h.invocations()}
    assert START + timedelta(minutes=1) in times, sorted(times)


def test_a_paused_job_delivers_nothing_not_even_later_fanout_events(h):
    """docs/REFERENCE.md section 4: no occurrence is delivered while a job is paused. That holds for
    an invocation started before the pause too: its later fan-out events (here
    event 1, due at 10:16) must not reach the target while the job is PAUSED."""
    h.define(fanout=FanoutPolicy(count=2, spread=timedelta(minutes=30)))
    h.run_until(START + timedelta(minutes=1, seconds=1))  # event 0 delivered at 10:01
    assert len(h.target.requests) == 1
    h.engine.changes.apply("proj", "job", ev.Paused("maintenance"))
    assert h.store.get_job("proj", "job").record.state.value == "PAUSED"
    h.run_until(START + timedelta(minutes=20))  # event 1 due at 10:16
    assert len(h.target.requests) == 1, "delivered while paused"


def test_tick_task_names_of_look_alike_project_and_job_ids_do_not_collide(h):
    """Project 'etl' / job 'daily-report' and project 'etl-daily' / job 'report',
    created in one import with the same schedule, share a tick nonce and ETA.
    Their tick tasks must still have distinct names, or the queue's de-dup drops one."""
    for project, job in (("etl", "daily-report"), ("etl-daily", "report")):
        h.define(job_id=job, project=project)
    assert h.queue.pending() == 2, "one job's first tick was swallowed"
    h.run_until(START + timedelta(minutes=1, seconds=5))
    assert len(h.invocations("daily-report", "etl")) == 1
    assert len(h.invocations("report", "etl-daily")) == 1


def test_a_timing_change_while_the_chain_is_behind_records_the_backlog(h):
    """Sundial was down 10:00-13:05, and on restart the config import (which runs
    first) brings a timing change, here only the timezone. The 12 occurrences
    10:15..13:00 that fell due under the old timing must still be recorded."""
    h.define(schedule_text="every 15m", content="v1")
    h.clock.advance(hours=3, minutes=5)
    h.define(schedule_text="every 15m", timezone="Europe/Paris", content="v2")
    h.run_until(h.clock.current + timedelta(seconds=1))
    rows = h.invocations()
    assert len(rows) == 12, [(r.scheduled_time, r.status) for r in rows]


def test_resume_records_every_paused_occurrence_beyond_the_scan_limit(h):
    """A 30-minute pause of an every-1s job covers 1800 fire times, more than
    scan_limit (1000). Resume must record each of them SKIPPED/paused, in
    batches as the tick path does, not only the first scan_limit."""
    h.define(schedule_text="every 1s")
    h.engine.changes.apply("proj", "job", ev.Paused())
    h.clock.advance(minutes=30)  # 1800 fire times during the pause
    h.engine.changes.apply("proj", "job", ev.Resumed())
    h.run_until(h.clock.current)  # resume's immediate tick records the pause, in batches
    skipped = [r for r in h.invocations() if r.status == "SKIPPED" and r.reason == "paused"]
    assert len(skipped) == 1800, len(skipped)


def test_a_stale_start_task_does_not_redeliver_an_accepted_async_attempt(h):
    """An async attempt answered 202 and waits for its completion. A stale copy of
    its start task arriving after the in-flight lease (attempt_timeout +
    start_grace = 2 min here) must not call the target again: accepted is not lost."""
    h.define(timeout=timedelta(minutes=30))
    h.target.answers = [DeliveryResult("accepted")]
    h.run_until(START + timedelta(minutes=1, seconds=1))
    row = h.invocations()[0]
    assert row.status == "RUNNING" and len(h.target.requests) == 1
    h.clock.advance(minutes=3)
    stale = start_task("proj", "job", act.EnqueueAttempt(row.id, 0, 1, START + timedelta(minutes=1)))
    h.engine.tasks.handle(stale)
    assert len(h.target.requests) == 1, "a stale start task re-called an accepted async target"


def test_a_job_trigger_of_a_paused_job_is_recorded_skipped(h):
    """a succeeds and triggers b, which is paused. The run b would have had must
    be recorded SKIPPED/paused, so that 'why didn't b run?' is answerable from the API."""
    _two_jobs(h)
    h.engine.changes.apply("proj", "b", ev.Paused("ops"))
    h.engine.changes.apply("proj", "a", ev.ManualTrigger("req-1"))
    h.run_until(START + timedelta(seconds=1))
    assert [r.status for r in h.invocations("a")] == ["SUCCEEDED"]
    assert [(r.status, r.reason) for r in h.invocations("b")] == [("SKIPPED", "paused")]


def test_repeated_log_truncation_counts_every_omitted_entry():
    """append_log keeps a log's head and tail with a '… N omitted' marker between.
    Truncating again must carry the marker's earlier count forward, so that it
    says exactly how many entries were cut."""
    row = InvocationRow("p", "j", "i", "RUNNING", START, "schedule")
    total = LOG_LIMIT + 10
    for n in range(total):
        append_log(row, START, f"entry {n}")
    kept = [e for e in row.log if not e["message"].startswith("…")]
    markers = [e for e in row.log if e["message"].startswith("…")]
    assert len(markers) == 1
    assert markers[0]["dropped"] == total - len(kept)


def test_a_log_field_named_like_an_entry_key_is_kept_apart():
    from engine.ports import InvocationRow
    from engine.recording import append_log

    row = InvocationRow("p", "j", "i", "RUNNING", START, "schedule")
    append_log(row, START, "attempt 1: failed", message="from the target", time="theirs")
    assert row.log == [{
        "time": "2026-01-05T10:00:00.000Z", "message": "attempt 1: failed",
        "field_message": "from the target", "field_time": "theirs",
    }]
