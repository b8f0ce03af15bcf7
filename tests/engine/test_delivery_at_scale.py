"""Throttles, retries, pause_after_failures and on_failure over the real SQLite store and
queue, with a fake clock."""

import json
from datetime import timedelta

import pytest

from engine.adapters.local.sqlite_queue import SqliteTaskQueue
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.config_import import JobSnapshot, ProjectSnapshot
from engine.ports import DeliveryResult, ProjectRow, Task
from statemachine.definition import JobDefinition
from statemachine.policy import NOTIFY_RETRY, JobPolicy, RetryPolicy
from tests.engine.harness import START, Harness

LEASE = timedelta(seconds=30)


@pytest.fixture
def h(tmp_path):
    return Harness(tmp_path)


# --- the embedded queue's throttle --------------------------------------------------------

@pytest.fixture
def queue(tmp_path):
    store = SqliteJobStore(tmp_path / "q.db")
    store.run_in_transaction(lambda tx: tx.put_project(ProjectRow("p", settings={"throttles": {"t": 2}})))
    return SqliteTaskQueue(store)


def _enqueue(queue, name: str, eta, task_queue: str = "") -> None:
    queue.store.run_in_transaction(lambda tx: tx.enqueue(Task(name, "start", {}, eta, task_queue)))


def test_a_lease_never_holds_more_than_max_in_flight_tasks_of_a_throttle(queue):
    for index in range(5):
        _enqueue(queue, f"throttled-{index}", START, "p/t")
    for index in range(3):
        _enqueue(queue, f"chain-{index}", START + timedelta(seconds=1))
    now = START + timedelta(seconds=2)
    first = queue.lease_due(now, 100, LEASE)
    assert sorted(item.task.name for item in first) == [
        "chain-0", "chain-1", "chain-2", "throttled-0", "throttled-1",
    ]
    assert queue.lease_due(now, 100, LEASE) == []  # full: the others wait, not fail
    # The queue is full, so the next wake is when a lease runs out, not "now" (no spin).
    assert queue.next_wake(now) == now + LEASE
    done = [item.id for item in first if item.task.name == "throttled-0"]
    assert [item.task.name for item in queue.lease_due(now, 100, LEASE, done)] == ["throttled-2"]


def test_an_expired_lease_frees_its_slot(queue):
    for index in range(3):
        _enqueue(queue, f"throttled-{index}", START, "p/t")
    assert len(queue.lease_due(START, 100, LEASE)) == 2
    later = START + LEASE + timedelta(seconds=1)  # the process holding them died
    again = queue.lease_due(later, 100, LEASE)
    assert len(again) == 2 and {item.task.name for item in again} <= {f"throttled-{i}" for i in range(3)}


def test_the_limit_follows_the_imported_settings_and_an_unknown_throttle_runs_unthrottled(queue):
    for index in range(4):
        _enqueue(queue, f"gone-{index}", START, "p/removed")
    assert len(queue.lease_due(START, 100, LEASE)) == 4
    for index in range(4):
        _enqueue(queue, f"t-{index}", START, "p/t")
    queue.store.run_in_transaction(lambda tx: tx.put_project(ProjectRow("p", settings={"throttles": {"t": 3}})))
    assert len(queue.lease_due(START, 100, LEASE)) == 3


# --- throttled jobs through the engine --------------------------------------------------

def _define(h: Harness, jobs: dict[str, JobPolicy], definitions: dict | None = None, throttles=None) -> None:
    snapshots = tuple(
        JobSnapshot(job_id, policy, JobDefinition(id=job_id, schedule=policy.schedule_text, target={"noop": {}},
                                                  **(definitions or {}).get(job_id, {})), False)
        for job_id, policy in jobs.items()
    )
    h.engine.configs.import_project(ProjectSnapshot("proj", "v1", jobs=snapshots,
                                             settings={"throttles": throttles or {}}))


def test_a_throttled_job_is_delivered_through_start_tasks_on_its_queue(h):
    policy = JobPolicy(schedule_text="every 1m", revision="r", throttle="t")
    _define(h, {"job": policy}, throttles={"t": 2})
    seen = []
    original = h.dispatcher.handle

    def spy(task):
        seen.append((task.kind, task.queue))
        original(task)

    h.dispatcher.handle = spy
    h.run_until(START + timedelta(minutes=2, seconds=30))
    assert [r.status for r in h.invocations()] == ["SUCCEEDED", "SUCCEEDED"]
    assert ("start", "proj/t") in seen and all(q == "proj/t" for k, q in seen if k == "start")


# --- retries ------------------------------------------------------------------------------

def test_a_target_failing_twice_then_succeeding_ends_succeeded_on_attempt_3(h):
    retry = RetryPolicy(max_attempts=5, min_backoff=timedelta(seconds=2), max_backoff=timedelta(seconds=10))
    h.target.answers = [DeliveryResult("failed", "http 500")] * 2
    times = []
    h.target.check = lambda request: times.append((h.clock.now(), request.attempt, request.invocation_id))
    h.define(retry=retry)
    h.run_until(START + timedelta(minutes=1, seconds=30))
    row = h.invocations()[0]
    assert (row.status, row.attempt) == ("SUCCEEDED", 3)
    assert [attempt for _, attempt, _ in times] == [1, 2, 3]
    assert len({invocation for _, _, invocation in times}) == 1  # the same id on every attempt
    gaps = [(b[0] - a[0]).total_seconds() for a, b in zip(times, times[1:])]
    assert 2.0 <= gaps[0] <= 3.0 and 4.0 <= gaps[1] <= 6.0, gaps  # the step plus up to half of it
    messages = [entry["message"] for entry in row.log]
    assert sum(m.startswith("attempt 1 failed: http 500; retry at") for m in messages) == 1
    assert sum(m.startswith("attempt 2 failed: http 500; retry at") for m in messages) == 1


def test_a_target_always_failing_ends_failed_after_max_attempts(h):
    h.target.respond = lambda request: DeliveryResult("failed", "http 503")
    h.define(retry=RetryPolicy(max_attempts=3, min_backoff=timedelta(seconds=1)))
    h.run_until(START + timedelta(minutes=1, seconds=30))
    row = h.invocations()[0]
    assert (row.status, row.reason, row.attempt) == ("FAILED", "http 503", 3)
    assert len(h.target.requests) == 3
    assert row.log[-2]["message"] == "attempt 3 failed: http 503; no attempts left"


# --- pause_after_failures and on_failure --------------------------------------------------

ON_FAILURE = {"on_failure": {"http": {"url": "http://alerts.example/hook", "body": "", "headers": {}}}}


def _failing_job(h: Harness, **fields) -> None:
    h.target.respond = lambda request: (
        DeliveryResult("succeeded") if "http" in request.target else DeliveryResult("failed", "http 500"))
    policy = JobPolicy(schedule_text="every 1m", revision="r", **fields)
    definitions = {"job": ON_FAILURE} if fields.get("notify_failures") else {}
    _define(h, {"job": policy}, definitions)


def _notifications(h: Harness) -> list:
    return [r for r in h.target.requests if "http" in r.target]


def test_the_third_consecutive_failure_pauses_the_job_through_the_pause_path(h):
    _failing_job(h, pause_after_failures=3)
    h.run_until(START + timedelta(minutes=6))
    stored = h.store.get_job("proj", "job")
    assert stored.record.state.value == "PAUSED"
    assert stored.record.pause_reason == "paused after 3 consecutive failures (last: http 500)"
    assert [r.status for r in h.invocations()] == ["FAILED"] * 3  # nothing after the pause


def test_a_failed_invocation_notifies_on_failure_once_with_its_summary(h):
    _failing_job(h, notify_failures=True)
    h.run_until(START + timedelta(minutes=1, seconds=30))
    row = h.invocations()[0]
    [notice] = _notifications(h)
    summary = json.loads(notice.target["http"]["body"])
    assert summary == {
        "project": "proj", "job": "job", "invocation_id": row.id, "status": "FAILED",
        "reason": "http 500", "attempts": 1, "failures": 1, "trigger": "schedule",
        "scheduled_time": "2026-01-05T10:01:00.000Z",
    }
    assert notice.target["http"]["headers"] == {"Content-Type": "application/json"}
    assert (row.status, row.reason) == ("FAILED", "http 500")  # the notice changes nothing
    assert row.log[-1]["message"] == "on_failure attempt 1: notified"


def test_a_failing_notification_is_retried_and_never_changes_the_status(h):
    _failing_job(h, notify_failures=True)
    calls = []

    def respond(request):
        if "http" not in request.target:
            return DeliveryResult("failed", "http 500")
        calls.append(h.clock.now())
        return DeliveryResult("failed", "http 502") if len(calls) < 3 else DeliveryResult("succeeded")

    h.target.respond = respond
    h.run_until(START + timedelta(minutes=1, seconds=30))
    assert len(calls) == 3
    row = h.invocations()[0]
    assert row.status == "FAILED"
    assert [e["message"].split(";")[0] for e in row.log if e.get("on_failure") in ("sent", "failed")] == [
        "on_failure attempt 1 failed: http 502", "on_failure attempt 2 failed: http 502",
        "on_failure attempt 3: notified",
    ]


def test_a_notification_that_never_gets_through_gives_up_after_its_attempts(h):
    _failing_job(h, notify_failures=True)
    h.target.respond = lambda request: DeliveryResult("failed", "http 500")
    h.run_until(START + timedelta(minutes=1, seconds=50))
    assert len(_notifications(h)) == NOTIFY_RETRY.max_attempts
    assert h.invocations()[0].log[-1]["message"].endswith("; giving up")


def test_every_task_delivered_twice_still_notifies_once(h):
    original = h.engine.tasks.handle

    def twice(task):
        original(task)
        original(task)

    h.dispatcher.handle = twice
    _failing_job(h, notify_failures=True)
    h.run_until(START + timedelta(minutes=1, seconds=30))
    assert len(_notifications(h)) == 1
