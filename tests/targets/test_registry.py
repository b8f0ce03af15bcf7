"""The target registry, NoopTarget and UnavailableTarget."""

from __future__ import annotations

from engine.targets import (
    HttpTarget,
    NoopTarget,
    UnavailableTarget,
    build_targets,
    target_for,
    target_kind,
)
from tests.targets.support import delivery


def test_build_targets_maps_every_kind():
    targets = build_targets()
    assert set(targets) == {"http", "noop", "pubsub", "cloud_tasks"}
    assert isinstance(targets["http"], HttpTarget)
    assert targets["http"].backend == "local"
    assert isinstance(targets["noop"], NoopTarget)
    assert build_targets("cloud")["http"].backend == "cloud"


def test_noop_always_succeeds():
    result = NoopTarget().deliver(delivery("http://ignored/"))
    assert (result.outcome, result.reason, result.detail) == ("succeeded", "", "noop")


def test_unavailable_kinds_fail_clearly():
    targets = build_targets()
    request = delivery()
    pubsub = request.__class__(**{**request.__dict__, "target": {"pubsub": {"topic": "t"}}})
    result = target_for(targets, pubsub).deliver(pubsub)
    assert (result.outcome, result.reason) == (
        "failed",
        "target pubsub is not available on this backend",
    )
    result = UnavailableTarget("cloud_tasks").deliver(pubsub)
    assert result.reason == "target cloud_tasks is not available on this backend"


def test_target_for_picks_by_kind_and_refuses_unknown_kinds():
    targets = build_targets()
    assert target_for(targets, delivery("http://h/")) is targets["http"]
    request = delivery()
    odd = request.__class__(**{**request.__dict__, "target": {"smtp": {}}})
    reason = target_for(targets, odd).deliver(odd).reason
    assert reason == "target smtp is not available on this backend"
    assert target_kind({"noop": {}}) == "noop"
    assert target_kind({}) == ""
    assert target_kind({"a": {}, "b": {}}) == ""
