"""Targets that send nothing: `noop` for jobs that only mark time, and the stand-in for
target kinds this backend cannot deliver yet."""

from __future__ import annotations

from engine.ports import DeliveryRequest, DeliveryResult
from statemachine.vocabulary import DeliveryOutcome


class NoopTarget:
    """Every delivery succeeds at once. Useful for testing schedules and for chains
    whose only purpose is to trigger other jobs."""

    def deliver(self, request: DeliveryRequest) -> DeliveryResult:
        return DeliveryResult(DeliveryOutcome.SUCCEEDED, detail="noop")


class UnavailableTarget:
    """A target kind with no implementation here: every delivery fails and says why,
    rather than the invocation hanging or the dispatcher raising."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def deliver(self, request: DeliveryRequest) -> DeliveryResult:
        reason = f"target {self.kind} is not available on this backend"
        return DeliveryResult(DeliveryOutcome.FAILED, reason=reason, detail=reason)
