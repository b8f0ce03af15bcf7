"""The engine over the real SQLite store and queue, with a fake clock."""

from datetime import timedelta

import pytest

from engine.config_import import ProjectSnapshot
from engine.ports import DeliveryResult, StoreError
from engine.tasks import RESULT_TRIES
from statemachine.definition import JobDefinition
from statemachine.policy import Catchup, RetryPolicy, Tuning
from tests.engine.harness import START, Harness


@pytest.fixture
def h(tmp_path):
    return Harness(tmp_path)


def test_an_every_minute_job_delivers_once_per_occurrence(h):
    h.define()
    h.run_until(START + timedelta(minutes=5, seconds=30))
    rows = h.invocations()
    assert [r.scheduled_time for r in rows] == [START + timedelta(minutes=m) for m in range(1, 6)]
    assert all(r.status == "SUCCEEDED" for r in rows)
    assert h.target.invocations() == [r.id for r in rows]
    assert [entry["message"] for entry in rows[0].log] == [
        "created", "attempt 1 starting", "attempt 1: succeeded", "finished: SUCCEEDED",
    ]


def test_every_task_delivered_twice_still_delivers_each_occurrence_once(h):
    original = h.engine.tasks.handle

    def twice(task):
        original(task)
        original(task)

    h.dispatcher.handle = twice
    h.define()
    h.run_until(START + timedelta(minutes=10, seconds=30))
    assert len(h.invocations()) == 10
    assert len(h.target.requests) == 10
    assert len(set(h.target.invocations())) == 10


def test_every_transaction_body_run_twice_changes_nothing(h):
    h.store.conflict_every_other = True
    h.define()
    h.run_until(START + timedelta(minutes=3, seconds=30))
    rows = h.invocations()
    assert [r.status for r in rows] == ["SUCCEEDED"] * 3
    assert len(h.target.requests) == 3


def test_storage_failing_before_delivery_sends_nothing_and_recovers(h):
    h.define()
    h.run_until(START + timedelta(seconds=59))
    h.clock.advance(seconds=1)
    h.store.fail_next = 1_000_000
    assert h.dispatcher.run_due_now() >= 1
    assert h.target.requests == []
    h.store.fail_next = 0
    h.run_until(START + timedelta(minutes=2, seconds=10))
    assert [r.status for r in h.invocations()] == ["SUCCEEDED", "SUCCEEDED"]
    assert len(h.target.requests) == 2


def _fail_result_saves(h, times: int) -> list:
    """Make the next `times` saves of an attempt's result fail; returns the events they
    carried, as they fail."""
    original, failed = h.engine.changes.apply_many, []

    def flaky_apply_many(changes):
        results = [change.event for change in changes if change.note is not None]
        if results and len(failed) < times:
            failed.append(results[0])
            raise StoreError("injected: result could not be saved")
        return original(changes)

    h.engine.changes.apply_many = flaky_apply_many
    return failed


def test_a_failure_between_delivery_and_result_redelivers_under_the_same_id(h):
    h.define(retry=RetryPolicy(max_attempts=1))
    h.run_until(START + timedelta(seconds=59))
    failed = _fail_result_saves(h, RESULT_TRIES)  # every try to save the first attempt's result
    h.run_until(START + timedelta(minutes=1, seconds=1))
    del h.engine.changes.apply_many  # the class's own again
    # Started by its tick, the invocation lives in the job record until a result is saved.
    active = h.store.get_job("proj", "job").record.active
    assert failed and [entry.invocation_id for entry in active] == [failed[0].invocation_id]
    # The task gave up on the result after its tries and counts as done; the
    # watchdog re-issues the attempt once its lease has run out.
    h.run_until(START + timedelta(minutes=3, seconds=5))
    assert h.engine.maintenance.run_watchdog() == 1
    h.run_until(START + timedelta(minutes=5))
    first = h.invocations()[0]
    assert first.status == "SUCCEEDED"
    assert h.target.invocations().count(first.id) == 2
    delivered = {r.id for r in h.invocations() if r.status != "SKIPPED"}
    assert set(h.target.invocations()) == delivered
    assert {r.reason for r in h.invocations() if r.status == "SKIPPED"} == {"overlap"}


def test_watchdog_repairs_a_job_whose_tasks_were_purged(h):
    h.define()
    h.run_until(START + timedelta(minutes=1, seconds=5))
    h.queue.clear()
    h.clock.advance(minutes=1)  # the 10:02 tick is lost
    assert h.dispatcher.run_due_now() == 0
    h.clock.advance(seconds=30)  # past tick time + grace
    assert h.engine.maintenance.run_watchdog() == 1
    h.run_until(START + timedelta(minutes=3, seconds=1))
    times = [r.scheduled_time for r in h.invocations()]
    assert times == [START + timedelta(minutes=m) for m in (1, 2, 3)]
    assert h.engine.maintenance.run_watchdog() == 0


def test_catch_up_after_downtime_follows_the_policy(tmp_path):
    # Fire times 10:15 .. 13:00 (12) fall in the gap; the window reaches back to 12:05.
    for policy, delivered, missed in ((Catchup.NONE, 0, 12), (Catchup.LATEST, 1, 11), (Catchup.ALL, 4, 8)):
        h = Harness(tmp_path / policy.value)
        h.define(schedule_text="every 15m", catchup=policy, catchup_window=timedelta(hours=1))
        h.clock.advance(hours=3, minutes=5)  # nothing ran from 10:00 to 13:05
        h.run_until(h.clock.current + timedelta(seconds=1))
        statuses = [r.status for r in h.invocations()]
        assert statuses.count("SKIPPED") == missed, policy
        assert statuses.count("SUCCEEDED") == delivered, policy
        assert {r.reason for r in h.invocations() if r.status == "SKIPPED"} == {"missed"}


def test_an_early_tick_goes_back_to_the_queue(h):
    h.define()
    h.clock.advance(seconds=59, milliseconds=800)  # 200 ms early
    h.queue.shift_etas(timedelta(seconds=-1))
    assert h.dispatcher.run_due_now() == 1
    assert h.invocations() == []
    assert h.queue.next_wake(h.clock.current) > h.clock.current


def test_retention_removes_old_finished_history_only(h):
    h.define()
    h.run_until(START + timedelta(minutes=3, seconds=1))
    h.clock.advance(days=46)
    assert h.engine.maintenance.cleanup(timedelta(days=45), batch=2) == 3
    assert h.invocations() == []
    assert h.store.get_job("proj", "job") is not None


def test_reimporting_an_unchanged_project_writes_nothing(h):
    h.define(content="v1")
    before = h.store.counters["writes"]
    h.define(content="v1")
    assert h.store.counters["writes"] == before


def test_a_job_removed_from_its_config_is_disabled_and_keeps_history(h):
    h.define()
    h.run_until(START + timedelta(minutes=1, seconds=1))
    h.engine.configs.import_project(ProjectSnapshot("proj", "v2", jobs=()))
    job = h.store.get_job("proj", "job")
    assert job.record.state.value == "DISABLED"
    h.run_until(START + timedelta(minutes=10))
    assert len(h.invocations()) == 1


def test_a_broken_project_file_changes_nothing_but_its_error(h):
    h.define()
    h.engine.configs.import_project(ProjectSnapshot("proj", "broken", error="proj.yaml:3: bad"))
    assert h.store.get_project("proj").config_error == "proj.yaml:3: bad"
    assert h.store.get_job("proj", "job").record.state.value == "SCHEDULED"
    h.run_until(START + timedelta(minutes=1, seconds=1))
    assert len(h.invocations()) == 1


def test_failed_attempts_are_retried_and_logged(h):
    h.define(retry=RetryPolicy(max_attempts=3, min_backoff=timedelta(seconds=2)))
    h.target.answers = [DeliveryResult("failed", "http 500"), DeliveryResult("failed", "http 503")]
    h.run_until(START + timedelta(minutes=1, seconds=30))
    row = h.invocations()[0]
    assert (row.status, row.attempt) == ("SUCCEEDED", 3)
    assert [r.attempt for r in h.target.requests] == [1, 2, 3]
    assert len({r.invocation_id for r in h.target.requests}) == 1
    messages = [entry["message"] for entry in row.log]
    assert any(m.startswith("attempt 1 failed: http 500; retry at") for m in messages)


def test_a_short_tuning_is_honoured_by_the_watchdog(tmp_path):
    h = Harness(tmp_path, Tuning(tick_grace=timedelta(seconds=2)))
    h.define()
    h.queue.clear()
    h.clock.advance(minutes=1, seconds=3)
    assert h.engine.maintenance.run_watchdog() == 1
    h.run_until(h.clock.current + timedelta(seconds=1))
    assert len(h.invocations()) == 1


def test_a_job_defined_disabled_is_stored_and_readable(h):
    from engine.config_import import JobSnapshot
    from statemachine.policy import JobPolicy

    definition = JobDefinition(id="off", schedule="every 1m", target={"noop": {}}, disabled=True)
    job = JobSnapshot("off", JobPolicy(schedule_text="every 1m", revision="r"), definition, True)
    h.engine.configs.import_project(ProjectSnapshot("proj", "v1", jobs=(job,)))
    stored = h.store.get_job("proj", "off")
    assert stored is not None and stored.record.state.value == "DISABLED"
    h.run_until(START + timedelta(minutes=3))
    assert h.invocations("off") == []


def test_a_result_that_fails_to_save_once_is_saved_by_the_next_try_of_the_same_task(h):
    h.define(retry=RetryPolicy(max_attempts=1))
    h.run_until(START + timedelta(seconds=59))
    failed = _fail_result_saves(h, 1)
    h.run_until(START + timedelta(minutes=1, seconds=1))
    first = h.invocations()[0]
    assert failed and first.status == "SUCCEEDED"
    assert h.target.invocations().count(first.id) == 1
