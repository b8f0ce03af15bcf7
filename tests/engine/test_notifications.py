"""The `on_failure` notification through the engine: its state is a field of the
invocation, decided by statemachine/notification.py; the log only tells the story."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engine.delivery import with_payload
from engine.notify import NO_TARGET, Notifications
from engine.ports import DeliveryResult
from statemachine.durations import parse_instant
from statemachine.notification import NotificationState
from statemachine.policy import NOTIFY_RETRY
from statemachine.vocabulary import NotificationStatus
from tests.engine.harness import START, Harness
from tests.engine.test_delivery_at_scale import _failing_job, _notifications

S = NotificationStatus
SOON = START + timedelta(minutes=1, seconds=30)  # the first occurrence failed and was notified


@pytest.fixture
def h(tmp_path):
    return Harness(tmp_path)


def _story(row) -> list[tuple[str, str | None, int | None]]:
    return [(e["message"], e.get("on_failure"), e.get("notification_attempt"))
            for e in row.log if e["message"].startswith("on_failure")]


def test_the_state_is_kept_on_the_invocation_and_the_log_tells_the_story(h):
    _failing_job(h, notify_failures=True)
    h.run_until(SOON)
    row = h.invocations()[0]
    assert row.notification == NotificationState(S.SENT, 1)
    assert _story(row) == [
        ("on_failure: notification enqueued", None, None),
        ("on_failure attempt 1 sending", "sending", 1),
        ("on_failure attempt 1: notified", "sent", 1),
    ]


def test_each_retry_is_due_when_the_log_says_and_the_last_failure_gives_up(h):
    _failing_job(h, notify_failures=True)
    h.target.respond = lambda request: DeliveryResult("failed", "http 503")
    h.run_until(START + timedelta(minutes=1, seconds=50))
    row = h.invocations()[0]
    assert row.notification == NotificationState(S.GAVE_UP, NOTIFY_RETRY.max_attempts, "http 503")
    story = [e for e in row.log if e.get("on_failure")]
    failures = [e for e in story if e["on_failure"] == "failed"]
    assert len(failures) == NOTIFY_RETRY.max_attempts
    for failure, sending in zip(failures, story[2::2]):
        retry_at = parse_instant(failure["message"].split("; retry at ")[1])
        assert sending["message"].endswith("sending") and parse_instant(sending["time"]) == retry_at.replace(
            microsecond=retry_at.microsecond // 1000 * 1000)
    assert failures[-1]["message"] == f"on_failure attempt {NOTIFY_RETRY.max_attempts} failed: http 503; giving up"


def test_a_task_that_comes_again_is_recognised_by_the_state_not_by_the_log(h):
    _failing_job(h, notify_failures=True)
    tasks = []
    original = h.dispatcher.handle

    def keep(task):
        tasks.append(task)
        original(task)

    h.dispatcher.handle = keep
    h.run_until(SOON)
    assert len(_notifications(h)) == 1

    def forget_the_markers(tx):  # people's log, cut or reworded, decides nothing
        row = h.invocations()[0]
        row.log = [{"time": e["time"], "message": e["message"]} for e in row.log]
        tx.put_invocation(row)

    h.store.run_in_transaction(forget_the_markers)
    [notify] = [task for task in tasks if task.kind == "notify"]
    h.engine.tasks.handle(notify)
    assert len(_notifications(h)) == 1
    assert h.invocations()[0].notification == NotificationState(S.SENT, 1)


def test_a_job_that_lost_its_target_gives_up_without_sending(h):
    _failing_job(h, notify_failures=True)
    original = h.dispatcher.handle
    h.dispatcher.handle = lambda task: None if task.kind == "notify" else original(task)
    h.run_until(SOON)
    row = h.invocations()[0]
    assert row.notification == NotificationState(S.PENDING, 1)
    sent = []
    notifications = Notifications(lambda body: h.store.run_in_transaction(body), lambda project, job: None,
                                  h.clock, lambda *request: sent.append(request))
    summary = {"invocation_id": row.id}
    notifications.run_task({"project": "proj", "job": "job", "attempt": 1, "summary": summary})
    row = h.invocations()[0]
    assert sent == []
    assert row.notification == NotificationState(S.GAVE_UP, 1, NO_TARGET.format(hook="on_failure"))
    assert row.log[-1]["message"] == f"on_failure attempt 1 failed: {NO_TARGET.format(hook='on_failure')}; giving up"


SUMMARY = {"invocation_id": "inv-1", "status": "FAILED"}
AS_JSON = '{"invocation_id":"inv-1","status":"FAILED"}'


@pytest.mark.parametrize("target, sent", [
    ({"http": {"url": "u", "body": "", "headers": {}}},
     {"http": {"url": "u", "body": AS_JSON, "headers": {"Content-Type": "application/json"}}}),
    ({"http": {"url": "u", "body": "", "headers": {"content-type": "text/plain"}}},
     {"http": {"url": "u", "body": AS_JSON, "headers": {"content-type": "text/plain"}}}),
    ({"cloud_tasks": {"queue": "q", "url": "u", "body": ""}},
     {"cloud_tasks": {"queue": "q", "url": "u", "body": AS_JSON}}),
    ({"pubsub": {"topic": "t", "data": ""}}, {"pubsub": {"topic": "t", "data": AS_JSON}}),
    ({"http": {"url": "u", "body": "its own", "headers": {}}}, None),
    ({"noop": {}}, None),
])
def test_the_summary_is_the_payload_unless_the_target_has_one(target, sent):
    assert with_payload(target, SUMMARY) == (target if sent is None else sent)


def test_a_notification_task_taken_after_the_stop_is_handed_back_unsent(tmp_path):
    """From a stop's signal nothing new leaves the process: a notification task taken
    then goes back to the queue for the next start, its hook not called."""
    from engine.ports import RetryTask, Task
    from statemachine.vocabulary import TaskKind

    called = []
    runner = Harness(tmp_path).engine.tasks
    runner.notify = called.append
    task = Task("n", TaskKind.NOTIFY, {"project": "proj", "job": "job"}, START)
    runner.stop_sending()
    with pytest.raises(RetryTask):
        runner.handle(task)
    runner.start_sending()
    runner.handle(task)
    assert called == [task.payload]
