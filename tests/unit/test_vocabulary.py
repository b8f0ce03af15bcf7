"""The vocabulary's stored values are the contract's words, unchanged: rows, entities,
tasks and API answers written before the enums existed read back equal to them."""

from __future__ import annotations

import json

from statemachine.vocabulary import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    AbortReason,
    DeliveryOutcome,
    InvocationStatus,
    SkipReason,
    TargetKind,
    TaskKind,
    Trigger,
)


def test_the_stored_words_are_the_contracts():
    assert [s.value for s in InvocationStatus] == ["STARTING", "RUNNING", "SUCCEEDED", "FAILED", "SKIPPED",
                                                  "ABORTED"]
    assert set(ACTIVE_STATUSES) | set(TERMINAL_STATUSES) == set(InvocationStatus)
    assert [r.value for r in SkipReason] == ["overlap", "missed", "paused", "disabled", "rescheduled", "excluded",
                                              "upstream"]
    assert [r.value for r in AbortReason] == ["deleted", "replaced"]
    assert [o.value for o in DeliveryOutcome] == ["succeeded", "failed", "accepted"]
    assert [t.value for t in Trigger] == ["schedule", "manual", "catchup", "backfill", "after"]
    assert Trigger.job("a") == "job:a"
    assert [k.value for k in TargetKind] == ["http", "pubsub", "cloud_tasks", "noop"]
    assert {k.value: k.handler_path for k in TaskKind} == {
        "tick": "tick", "start": "start-invocation", "trigger": "trigger", "notify": "notify",
        "check": "check", "deadline": "deadline", "inbox": "inbox", "cancel": "cancel"}


def test_a_member_is_its_value_in_json_and_compares_equal_to_what_storage_returns():
    assert json.dumps({"status": InvocationStatus.FAILED, "reason": SkipReason.MISSED}) == \
        '{"status": "FAILED", "reason": "missed"}'
    assert "FAILED" == InvocationStatus.FAILED and hash("missed") == hash(SkipReason.MISSED)
    assert f"{TaskKind.START}/p/j" == "start/p/j"
