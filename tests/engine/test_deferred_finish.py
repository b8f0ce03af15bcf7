"""A finish left in its invocation's row (engine/deferred_finish.py): the job's record
is not written for it, every reader and every next step sees it applied, and the
job goes exactly as it would have gone had the record been written."""

from datetime import timedelta

import pytest

import engine.changes
from engine import operations
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.config_import import JobSnapshot, ProjectSnapshot
from engine.ports import DeliveryResult
from statemachine import events as ev
from statemachine.definition import JobDefinition
from statemachine.policy import JobPolicy, Overlap, RetryPolicy
from tests.engine.harness import START, Harness


@pytest.fixture
def h(tmp_path):
    return Harness(tmp_path, defer_finishes=True)  # (the SQLite store writes finishes at once by itself)


def _raw_active(h, job_id="job"):
    return [entry.invocation_id for entry in h.store.get_job("proj", job_id).record.active]


def test_a_plain_success_leaves_the_job_record_alone_and_readers_see_it_applied(h):
    h.define()
    h.run_until(START + timedelta(minutes=1, seconds=5))
    [row] = h.invocations()
    assert row.status == "SUCCEEDED"
    assert _raw_active(h) == [row.id]  # the stored record still lists it: nobody wrote it
    shown = h.engine.queries.job("proj", "job").record
    assert (shown.state.value, shown.active) == ("SCHEDULED", ())
    assert [job.record.active for job in h.engine.queries.jobs("proj")] == [()]
    page, _ = h.engine.queries.jobs_page("proj", 10, None)
    assert [job.record.state.value for job in page] == ["SCHEDULED"]
    h.run_until(START + timedelta(minutes=2, seconds=5))
    second = h.invocations()[1]
    assert _raw_active(h) == [second.id]  # the next tick applied the first finish and wrote it


def test_a_pause_after_a_deferred_finish_sees_the_invocation_finished(h):
    h.define()
    h.run_until(START + timedelta(minutes=1, seconds=5))
    h.engine.changes.apply("proj", "job", ev.Paused("test"))
    record = h.store.get_job("proj", "job").record
    assert (record.state.value, record.active) == ("PAUSED", ())
    assert [r.status for r in h.invocations()] == ["SUCCEEDED"]


def test_a_failure_to_be_retried_is_written_at_once(h):
    h.define(retry=RetryPolicy(max_attempts=3))
    h.target.answers.append(DeliveryResult("failed", reason="http 500"))
    h.run_until(START + timedelta(minutes=1, milliseconds=500))
    [entry] = h.store.get_job("proj", "job").record.active
    assert entry.attempts == (2,)  # the retry is in the stored record


def test_a_finish_that_lets_a_waiting_occurrence_start_is_written_at_once(h):
    h.define(overlap=Overlap.BUFFER_ONE)
    h.target.answers.append(DeliveryResult("accepted"))  # the first waits for its report
    h.run_until(START + timedelta(minutes=2, seconds=5))  # the second waits behind it
    first = h.invocations()[0]
    h.engine.changes.apply("proj", "job", ev.InvocationFinished(first.id, True, "", 0, 1))
    assert first.id not in _raw_active(h)
    h.run_until(h.clock.now() + timedelta(seconds=1))
    assert len(h.target.requests) == 2  # the waiting occurrence was delivered at once


def test_a_success_that_triggers_other_jobs_is_written_at_once(h):
    """Only a plain finish is left to its row: one whose actions are the finish alone."""
    jobs = (("job", JobPolicy(schedule_text="every 1m", revision="v1", triggers=("next",))),
            ("next", JobPolicy(schedule_text="triggered", revision="v1")))
    h.engine.configs.import_project(ProjectSnapshot("proj", "v1", jobs=tuple(
        JobSnapshot(name, policy, JobDefinition(id=name, schedule=policy.schedule_text, target={"noop": {}}), False)
        for name, policy in jobs)))
    h.run_until(START + timedelta(minutes=1, seconds=5))
    assert _raw_active(h) == []


def test_an_async_completion_report_is_written_at_once(h):
    h.define()
    h.target.answers.append(DeliveryResult("accepted"))
    h.run_until(START + timedelta(minutes=1, seconds=5))
    [row] = h.invocations()
    h.engine.changes.apply("proj", "job", ev.InvocationFinished(row.id, True, "", 0, None))
    assert _raw_active(h) == []  # the row cannot tell "no attempt named": not deferred


def test_an_hourly_job_whose_lease_ends_before_its_next_tick_is_written_at_once(h):
    h.define(schedule_text="every 1h")
    h.run_until(START + timedelta(hours=1, seconds=5))
    assert _raw_active(h) == []  # the watchdog would otherwise wake at the lease's end


def _history(h, job_id="job"):
    return [(r.id, r.status, r.reason, r.attempt, [e["message"] for e in r.log]) for r in h.invocations(job_id)]


@pytest.mark.parametrize("overlap", [Overlap.SKIP, Overlap.BUFFER_ALL, Overlap.ALLOW])
def test_deferring_changes_nothing_anyone_sees(tmp_path, monkeypatch, overlap):
    """The same hour with and without deferring: the same deliveries, history and job
    as readers see it, minute by minute (slow, failing and fast answers mixed)."""
    def run(directory):
        h = Harness(directory, defer_finishes=True)
        h.define(schedule_text="every 20s", overlap=overlap, retry=RetryPolicy(max_attempts=2))
        answers = [DeliveryResult("succeeded"), DeliveryResult("failed", reason="http 503"),
                   DeliveryResult("accepted"), DeliveryResult("succeeded")]
        h.target.answers.extend(answers * 60)
        seen = []
        for minute in range(1, 61):
            h.run_until(START + timedelta(minutes=minute))
            shown = h.engine.queries.job("proj", "job").record
            seen.append((shown, _history(h)))
        return seen, h.target.invocations()

    deferred = run(tmp_path / "deferred")
    monkeypatch.setattr(engine.changes, "may_defer", lambda *args: False)
    written = run(tmp_path / "written")
    assert deferred == written


def test_a_finish_whose_row_is_older_than_half_a_day_is_written_at_once(h):
    """The clean-up keeps at least a day: only a young row may carry a finish alone."""
    h.define(timeout=timedelta(days=1), retry=RetryPolicy(  # every minute; the retries' minutes skip
        max_attempts=3, min_backoff=timedelta(hours=7, seconds=10), max_backoff=timedelta(hours=7, seconds=10)))
    h.target.answers.extend([DeliveryResult("failed", reason="http 500")] * 2)
    h.run_until(START + timedelta(hours=14, minutes=1, seconds=25))  # attempt 3 answered at 00:01:20
    row = h.invocations()[0]
    assert (row.status, row.attempt) == ("SUCCEEDED", 3)
    assert row.id not in _raw_active(h)


def test_a_completion_that_arrives_before_the_202_is_recorded_finishes_the_invocation(h):
    """A fast async target calls back while its own 202 is still on the way: the
    invocation lives only in the job's record then, and the report must still count."""
    h.define()
    reports = []

    def call_back_then_accept(request):
        shown = h.engine.queries.invocation("proj", "job", request.invocation_id)
        token = h.engine.deliveries.completion_token(request.invocation_id)
        reports.append((shown.status, operations.complete(h.engine, "proj", "job", request.invocation_id,
                                                          token, succeeded=True).status))
        return DeliveryResult("accepted")

    h.target.respond = call_back_then_accept
    h.run_until(START + timedelta(minutes=1, seconds=5))
    assert reports == [("RUNNING", "SUCCEEDED")]
    [row] = h.invocations()
    assert (row.status, h.engine.queries.job("proj", "job").record.active) == ("SUCCEEDED", ())
    h.run_until(START + timedelta(minutes=20))  # the late 202 changes nothing; no timeout
    assert [r.status for r in h.invocations()][0] == "SUCCEEDED"


def test_the_sqlite_store_writes_every_finish_to_the_job_record_at_once(tmp_path):
    # Leaving a finish to its row spares a Datastore entity write; on SQLite it cost more
    # (the step replayed twice: to check the deferral, and at the job's next step) than
    # the row write it spared, so the embedded backend does not defer.
    h = Harness(tmp_path, sqlite=True)
    h.define()
    h.run_until(START + timedelta(minutes=1, seconds=5))
    [row] = h.invocations()
    assert row.status == "SUCCEEDED"
    assert _raw_active(h) == []


def test_a_database_left_with_deferred_finishes_has_them_settled_by_a_store_that_writes_at_once(tmp_path):
    # A finish an earlier version left to its row must still be replayed at the job's next
    # step; the store looks for any when it opens, and replays nothing once none is left.
    before = Harness(tmp_path, defer_finishes=True, sqlite=True)
    before.define()
    before.run_until(START + timedelta(minutes=1, seconds=5))
    [first] = before.invocations()
    assert _raw_active(before) == [first.id]
    assert SqliteJobStore(tmp_path / "sundial.db").holds_deferred_finishes

    after = Harness(tmp_path, sqlite=True)  # the same file, opened as this version opens it
    after.clock.current = before.clock.now()
    after.run_until(START + timedelta(minutes=2, seconds=5))
    rows = after.invocations()
    assert [(row.id, row.status) for row in rows] == [(first.id, "SUCCEEDED"), (rows[1].id, "SUCCEEDED")]
    assert _raw_active(after) == []
    assert not SqliteJobStore(tmp_path / "sundial.db").holds_deferred_finishes
