"""on_recovery through the engine over the real SQLite store and queue, with a fake
clock: written in the transaction that ends the invocation, sent after it, retried, told
once even when every task comes twice, and decided right when the failures before it
were deferred finishes (a job with on_recovery only)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from engine.ports import DeliveryResult
from statemachine.policy import JobPolicy
from tests.engine.harness import START, Harness
from tests.engine.test_delivery_at_scale import _define


@pytest.fixture
def h(tmp_path):
    return Harness(tmp_path)


HOOK = {"http": {"url": "http://alerts.example/hook", "body": "", "headers": {}}}


def _failing_then_recovering(h: Harness, failing: int, hook_answers: list[DeliveryResult] | None = None) -> list:
    """A minutely job whose first `failing` invocations fail; returns the hook requests."""
    calls, hook_calls = [], []

    def respond(request):
        if "http" in request.target:
            hook_calls.append(request)
            return hook_answers.pop(0) if hook_answers else DeliveryResult("succeeded")
        calls.append(request)
        return DeliveryResult("failed", "http 500") if len(calls) <= failing else DeliveryResult("succeeded")

    h.target.respond = respond
    policy = JobPolicy(schedule_text="every 1m", revision="r", notify_recoveries=True)
    _define(h, {"job": policy}, {"job": {"on_recovery": HOOK}})
    return hook_calls


def test_a_job_with_on_recovery_only_is_told_once_of_its_first_success(h):
    hooks = _failing_then_recovering(h, failing=2)
    h.run_until(START + timedelta(minutes=4, seconds=30))
    rows = h.invocations()
    assert [r.status for r in rows] == ["FAILED", "FAILED", "SUCCEEDED", "SUCCEEDED"]
    [notice] = hooks
    summary = json.loads(notice.target["http"]["body"])
    assert (summary["status"], summary["reason"], summary["failures"]) == ("SUCCEEDED", "", 2)
    assert summary["invocation_id"] == rows[2].id
    assert rows[2].log[-1]["message"] == "on_recovery attempt 1: notified"
    assert rows[2].status == "SUCCEEDED"


def test_a_failing_recovery_notification_is_retried_until_it_gets_through(h):
    hooks = _failing_then_recovering(h, failing=1, hook_answers=[DeliveryResult("failed", "http 502")])
    h.run_until(START + timedelta(minutes=2, seconds=40))
    assert len(hooks) == 2
    row = h.invocations()[1]
    assert [e["message"].split(";")[0] for e in row.log if e.get("on_failure") in ("sent", "failed")] == [
        "on_recovery attempt 1 failed: http 502", "on_recovery attempt 2: notified"]


def test_every_task_delivered_twice_still_tells_on_recovery_once(h):
    original = h.engine.tasks.handle

    def twice(task):
        original(task)
        original(task)

    h.dispatcher.handle = twice
    hooks = _failing_then_recovering(h, failing=1)
    h.run_until(START + timedelta(minutes=3, seconds=30))
    assert len({r.invocation_id for r in hooks}) == len(hooks) == 1
