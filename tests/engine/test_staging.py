"""Staged occurrences through the engine, on the real SQLite store and queue with a fake
clock: the tick runs a second before T and commits the attempt, the request waits for
T, and what happens to the job in that last second decides what is sent."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engine import operations
from engine.config_import import ProjectSnapshot
from engine.holds import AttemptKey, HeldAttempt
from engine.interruptions import interrupted_change
from statemachine.definition import JobDefinition
from statemachine.durations import rfc3339_millis
from statemachine.policy import JobPolicy, Tuning
from statemachine.record import JobState
from statemachine.vocabulary import InvocationStatus
from tests.engine.harness import START, Harness
from web.views import invocation_view, job_view

STAGED = Tuning(stage_ahead=timedelta(seconds=1))
T = START + timedelta(minutes=1)  # the first fire time of "* * * * *"


@pytest.fixture
def h(tmp_path):
    h = _harness(tmp_path)
    h.define(schedule_text="* * * * *")
    return h


def _harness(tmp_path) -> Harness:
    h = Harness(tmp_path, STAGED)
    sent_at = []
    h.target.check = lambda request: sent_at.append(h.clock.now())
    h.sent_at = sent_at
    return h


def _in_the_last_second(h: Harness, act) -> None:
    """Run the tick queued for T - 1 s, and `act` at T - 0.3 s, while its request waits."""
    acted = []

    def later():
        h.clock.current = T - timedelta(milliseconds=300)
        act()
        acted.append(h.clock.now())
    h.clock.while_sleeping = later
    h.run_until(T + timedelta(seconds=1))
    assert acted == [T - timedelta(milliseconds=300)]  # (an error in `act` would be the task's)


def test_the_attempt_is_committed_ahead_and_sent_at_t(h):
    h.run_until(T - timedelta(seconds=1))
    assert h.sent_at == [T]  # the wait ended at T, not before
    (row,) = h.invocations()
    assert row.status == InvocationStatus.SUCCEEDED and row.scheduled_time == T


def test_a_pause_in_the_last_second_sends_nothing(h):
    _in_the_last_second(h, lambda: operations.pause(h.engine, "proj", "job"))
    assert h.sent_at == []
    (row,) = h.invocations()
    assert (row.status, row.reason) == (InvocationStatus.SKIPPED, "paused")


def test_a_delete_in_the_last_second_sends_nothing(tmp_path):
    h = _harness(tmp_path)  # an API job: a config file's jobs are deleted from the file
    h.engine.configs.import_project(ProjectSnapshot("proj", "empty", jobs=()))
    policy = JobPolicy(schedule_text="* * * * *", revision="api")
    definition = JobDefinition(id="api", schedule="* * * * *", target={"noop": {}})
    operations.put_job(h.engine, "proj", "api", policy, definition, False, max_jobs=10)
    _in_the_last_second(h, lambda: operations.delete_job(h.engine, "proj", "api"))
    assert h.sent_at == [] and h.target.requests == []
    assert h.store.get_job("proj", "api") is None


def test_a_new_definition_in_the_last_second_is_sent_at_t_under_it(h):
    _in_the_last_second(h, lambda: h.define(schedule_text="* * * * *", content="v2"))
    assert h.sent_at == [T]
    (request,) = h.target.requests
    assert request.invocation_id == h.invocations()[0].id
    assert h.store.get_job("proj", "job").record.live_policy.revision == "v2"


def test_a_process_lost_before_t_leaves_it_sent_once_at_t_under_its_id(h):
    def crash():
        raise SystemExit("the process dies while its staged request waits")

    h.clock.while_sleeping = crash
    with pytest.raises(SystemExit):
        h.run_until(T - timedelta(seconds=1))
    assert h.sent_at == []
    h.clock.current = T - timedelta(milliseconds=500)
    (entry,) = h.store.get_job("proj", "job").record.active
    # What engine/interruptions.py applies for an attempt whose process is gone.
    key = AttemptKey("proj", "job", entry.invocation_id, 0, 1)
    h.engine.changes.apply_many([interrupted_change(HeldAttempt(key, "gone"))])
    h.run_until(T + timedelta(seconds=5))
    assert h.sent_at == [T]
    assert h.target.invocations() == [entry.invocation_id]
    (row,) = [r for r in h.invocations() if r.scheduled_time == T]
    assert row.status == InvocationStatus.SUCCEEDED


def test_a_new_schedule_in_the_last_second_that_has_no_fire_time_at_t_sends_nothing_and_leaves_no_trace(h):
    following = T + timedelta(minutes=1)  # minute 1 is no fire time of "*/2 * * * *"; minute 2 is
    _in_the_last_second(h, lambda: h.define(schedule_text="*/2 * * * *", content="v2"))
    assert h.sent_at == [] and h.target.requests == []
    assert h.invocations() == []  # as if the early tick had not run: nothing happened at T
    record = h.store.get_job("proj", "job").record
    assert record.active == () and record.tick_at == following
    h.run_until(following + timedelta(seconds=1))
    assert h.sent_at == [following]
    assert [row.scheduled_time for row in h.invocations()] == [following]


def test_a_long_jitter_committed_ahead_and_rescheduled_away_ends_skipped_rescheduled(tmp_path):
    h = _harness(tmp_path)
    h.define(schedule_text="* * * * *", jitter=timedelta(seconds=30))
    h.run_until(T - timedelta(milliseconds=500))  # the early tick ran: its jitter is too long to hold
    (row,) = h.invocations()
    assert (row.status, row.scheduled_time) == (InvocationStatus.STARTING, T)
    h.define(schedule_text="*/2 * * * *", content="v2", jitter=timedelta(seconds=30))
    h.run_until(T + timedelta(minutes=2))
    assert T not in [request.scheduled_time for request in h.target.requests]
    row = h.store.get_invocation("proj", "job", row.id)
    assert (row.status, row.reason) == (InvocationStatus.SKIPPED, "rescheduled")
    assert h.store.get_job("proj", "job").record.find_active(row.id) is None


def test_readers_see_a_staged_occurrence_as_not_started_until_its_time(tmp_path):
    """Ten seconds ahead (the lead a burst needs), the attempt is committed; until T the
    Job is SCHEDULED with its next run at T, and the invocation STARTING with no start
    time (as without staging, when its tick would not have run yet); from T on, as today."""
    h = Harness(tmp_path, Tuning(stage_ahead=timedelta(seconds=10)))
    h.define(schedule_text="* * * * *")
    before, sent = {}, {}

    def look() -> dict:
        job = h.engine.queries.job("proj", "job")
        page, _ = h.engine.queries.invocations("proj", "job", 10, None)
        listed = [invocation_view(row) for row in page]
        alone = invocation_view(h.engine.queries.invocation("proj", "job", page[0].id), with_log=True)
        return {"job": job_view(job, h.engine.queries.last_invocation(job), h.clock.now()),
                "listed": listed, "alone": alone, "stored": job.record.state}

    def half_a_second_before():
        h.clock.current = T - timedelta(milliseconds=500)
        before.update(look())
    h.clock.while_sleeping = half_a_second_before
    h.target.check = lambda request: sent.update(look())
    h.run_until(T + timedelta(milliseconds=500))

    assert before["stored"] == JobState.RUNNING  # what is stored is unchanged: the machine's own state
    assert (before["job"]["state"], before["job"]["next_run_time"]) == ("SCHEDULED", _text(T))
    (listed,) = before["listed"]
    assert (listed["status"], listed["started_time"], listed["scheduled_time"]) == ("STARTING", None, _text(T))
    assert before["job"]["last_invocation"] == listed
    assert before["alone"]["status"] == "STARTING" and before["alone"]["started_time"] is None
    assert [line["message"] for line in before["alone"]["log"]] == ["created"]

    assert (sent["job"]["state"], sent["job"]["next_run_time"]) == ("RUNNING", _text(T + timedelta(minutes=1)))
    (listed,) = sent["listed"]
    assert (listed["status"], listed["started_time"]) == ("RUNNING", _text(T))
    assert [line["message"] for line in sent["alone"]["log"]] == ["created", "attempt 1 starting"]

    after = look()  # T + 0.5 s: it succeeded
    assert (after["job"]["state"], after["job"]["next_run_time"]) == ("SCHEDULED", _text(T + timedelta(minutes=1)))
    (listed,) = after["listed"]
    assert (listed["status"], listed["started_time"]) == ("SUCCEEDED", _text(T))


def _text(moment) -> str:
    return rfc3339_millis(moment)


def test_only_a_backend_that_stages_has_the_staged_checks(tmp_path):
    # The cloud backend's tuning stages nothing: its task runner carries no staged path.
    assert Harness(tmp_path / "cloud").engine.tasks.staged is None
    assert Harness(tmp_path / "embedded", STAGED).engine.tasks.staged is not None

