"""One attempt of one event: render the job's target for the occurrence and send it."""

from __future__ import annotations

from engine.ports import DeliveryRequest, DeliveryResult, StoredJob
from engine.rendering import render_target, secret_backed_headers
from engine.secrets import SecretError
from statemachine import actions as act
from statemachine.template import TemplateContext


def deliver(
    targets: dict,
    job: StoredJob,
    action: act.Deliver,
    allowed_hosts: tuple[str, ...],
    completion: tuple[str, str],
    secrets=None,
) -> DeliveryResult:
    """Never raises for a problem of the job's own making: that is a failed attempt."""
    record, definition = job.record, job.definition
    context = TemplateContext(
        scheduled_time=action.scheduled_time,
        timezone=definition.timezone,
        project=record.project,
        job_id=record.job_id,
        invocation_id=action.invocation_id,
        attempt=action.attempt,
        event_index=action.event_index,
        event_count=action.event_count,
    )
    try:
        target = render_target(definition.target, context, secrets)
    except SecretError as error:
        return DeliveryResult("failed", str(error))
    except ValueError as error:
        return DeliveryResult("failed", f"bad request: {error}")
    kind = definition.target_kind
    sender = targets.get(kind)
    if sender is None:
        return DeliveryResult("failed", f"target {kind} is not available on this backend")
    request = DeliveryRequest(
        project=record.project,
        job_id=record.job_id,
        invocation_id=action.invocation_id,
        scheduled_time=action.scheduled_time,
        attempt=action.attempt,
        event_index=action.event_index,
        event_count=action.event_count,
        target=target,
        allowed_hosts=allowed_hosts,
        completion_url=completion[0],
        completion_token=completion[1],
        secret_headers=secret_backed_headers(definition.target),
    )
    return sender.deliver(request)
