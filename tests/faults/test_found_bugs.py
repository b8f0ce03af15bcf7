"""The bugs the fault runs found, each reduced to its smallest replay."""

from __future__ import annotations

from datetime import timedelta

from engine.config_import import JobSnapshot, ProjectSnapshot
from statemachine.definition import JobDefinition
from statemachine.policy import Catchup, FanoutPolicy, JobPolicy, Overlap, Tuning
from tests.engine.harness import AFTER_COMMIT, START, Harness


def test_catchup_all_is_not_dropped_by_buffer_one_when_an_on_time_occurrence_follows(tmp_path):
    """Found by test_queue_purged: after a gap, `catchup: all` must deliver every
    missed occurrence in its window (docs/REFERENCE.md section 4), and the machine promises that a
    caught-up occurrence under `all` waits its turn instead of being dropped for
    overlap. With `overlap: buffer_one`, the on-time occurrence handled in the same
    tick used to replace the whole buffer, so the caught-up ones were recorded
    SKIPPED/overlap and never delivered."""
    h = Harness(tmp_path, Tuning(late_tolerance=timedelta(seconds=10)))
    h.define(overlap=Overlap.BUFFER_ONE, catchup=Catchup.ALL)  # every 1m
    h.clock.advance(minutes=5, seconds=5)  # 10:01-10:04 missed, 10:05 on time
    h.run_until(h.clock.now() + timedelta(seconds=1))
    rows = h.invocations()
    assert [(r.scheduled_time - START, r.status, r.trigger) for r in rows] == [
        (timedelta(minutes=m), "SUCCEEDED", "catchup") for m in range(1, 5)
    ] + [(timedelta(minutes=5), "SUCCEEDED", "schedule")]


def test_a_watchdog_repair_restarts_every_lost_event_of_a_fanout_at_once(tmp_path):
    """Found by test_storage_failures[start] (seed 100): three events of one
    invocation are committed as starting and then lost (the process died before
    sending them, or the commit's answer was lost). One watchdog repair re-issues
    all three; all three must go out. The in-flight check of a start task used the
    invocation's one `started_at`, which the first re-issued event moves to now, so
    the other two were taken for duplicates of an attempt in flight and dropped,
    one more event recovering per repair round (3 min by default): a fan-out of 20
    would time out long before its events were sent, storage long healthy again."""
    h = Harness(tmp_path)
    h.define(fanout=FanoutPolicy(count=3, spread=timedelta(0)))  # every 1m
    h.tag_steps()
    lost = iter(range(3))  # the first three start commits land, and their callers fail
    h.store.fault = lambda step: AFTER_COMMIT if step == "start" and next(lost, None) is not None else None
    h.every(timedelta(seconds=30), h.engine.maintenance.run_watchdog)
    first = START + timedelta(minutes=1)
    h.run_until(first + timedelta(seconds=1))
    assert h.target.requests == []  # all three committed as starting, none sent
    # Each attempt's lease (attempt timeout 60 s + start grace 60 s) runs out at 10:03;
    # the watchdog's next round, 10:03:30, re-issues them.
    h.run_until(START + timedelta(minutes=4))
    events = sorted(r.event_index for r in h.target.requests if r.scheduled_time == first)
    assert events == [0, 1, 2]
    assert h.invocations()[0].status == "SUCCEEDED"


def test_a_job_firing_during_its_projects_import_sees_the_projects_allowed_hosts(tmp_path):
    """Found by test_cloud_servers (seed 1): the first occurrence of two jobs, due
    0.1 s after the cloud server started, FAILED 'forbidden target 127.0.0.1' although
    the project's file lists 127.0.0.1 in allowed_hosts. import_project enables every
    job (arming its first tick) and only then saves the project row that carries
    allowed_hosts; a tick handled in between reads no row, and Deliveries.allowed_hosts
    caches that empty answer for 5 s. A big project's first import takes long enough
    for any job with a short schedule to hit it; so does a file that adds a host and
    a job using it at once."""
    h = Harness(tmp_path)
    h.store.inner.jobs_per_commit = 1  # the import commits "first", then "second"
    apply_many = h.engine.changes.apply_many
    importing = []

    def an_import_that_takes_a_minute(changes):
        applied = apply_many(changes)
        if changes[0].source == "config" and not importing:
            importing.append(changes[0].job_id)  # the dispatcher runs on while the import goes on
            h.clock.advance(minutes=1)
            h.dispatcher.run_due_now()
        return applied

    h.engine.changes.apply_many = an_import_that_takes_a_minute
    jobs = tuple(
        JobSnapshot(j, JobPolicy(schedule_text="every 1m", revision=j),
                    JobDefinition(id=j, schedule="every 1m", target={"noop": {}}), False)
        for j in ("first", "second")
    )
    snapshot = ProjectSnapshot("proj", "v1", jobs=jobs, settings={"allowed_hosts": ["metadata.internal"]})
    h.engine.configs.import_project(snapshot)
    assert [r.allowed_hosts for r in h.target.requests] == [("metadata.internal",)]
