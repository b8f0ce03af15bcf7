"""The target registry: which Target delivers each kind of job target.

The composition root builds it once (`build_targets`) and the dispatcher picks the
target for each delivery with `target_for`.
"""

from __future__ import annotations

from engine.ports import DeliveryRequest, Target
from engine.targets.http import HttpTarget
from engine.targets.noop import NoopTarget, UnavailableTarget

# The kinds a job target may have (CONTRACT section 2); pubsub and cloud_tasks have no
# implementation yet, so their deliveries fail with a clear reason.
KINDS = ("http", "pubsub", "cloud_tasks", "noop")


def build_targets(backend: str = "local") -> dict[str, Target]:
    """One instance per kind; HttpTarget holds the shared connection pool."""
    return {
        "http": HttpTarget(backend=backend),
        "noop": NoopTarget(),
        "pubsub": UnavailableTarget("pubsub"),
        "cloud_tasks": UnavailableTarget("cloud_tasks"),
    }


def target_kind(target: dict) -> str:
    """The kind of a `{kind: {...}}` target definition ("" if it is not one)."""
    return next(iter(target)) if isinstance(target, dict) and len(target) == 1 else ""


def target_for(targets: dict[str, Target], request: DeliveryRequest) -> Target:
    """The target that delivers `request`; an unknown kind gets one that fails clearly."""
    kind = target_kind(request.target)
    return targets.get(kind) or UnavailableTarget(kind or "of unknown kind")


__all__ = [
    "KINDS",
    "HttpTarget",
    "NoopTarget",
    "UnavailableTarget",
    "build_targets",
    "target_for",
    "target_kind",
]
