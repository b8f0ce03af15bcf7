"""Sending to a target: render it for one occurrence, pick its sender, send.

Two kinds of request take this one path: an attempt of an event of the job's own
`target` (`deliver`), and an attempt of a hook's notification (`on_failure` of a
FAILED invocation, `on_recovery` of a success after failures), whose payload is the
invocation's summary (`deliver_notification`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Mapping
from urllib.parse import quote, urlsplit

from engine.ports import DeliveryRequest, DeliveryResult, SecretReader, StoredJob, Target
from engine.rendering import render_target, secret_backed_headers
from engine.secrets import SecretError
from engine.sent import sent_record
from engine.staging_ports import StagedRequest, StagingTarget
from statemachine import actions as act
from statemachine.durations import parse_instant
from statemachine.safety import COMPLETION_TOKEN_HEADER, redact_echoes, sent_credentials
from statemachine.target_kinds import TARGET_KIND_SPECS
from statemachine.template import HookValues, TemplateContext
from statemachine.vocabulary import DeliveryOutcome

Targets = Mapping[str, Target]  # the sender of each target kind this backend has
Staging = Mapping[str, StagingTarget]  # the senders of those that stage (none on Cloud Tasks)
Secrets = SecretReader | None  # (project, name) -> value (engine/secrets.py); None: no store


def deliver(
    targets: Targets,
    job: StoredJob,
    action: act.Deliver,
    allowed_hosts: tuple[str, ...],
    completion: tuple[str, str],
    secrets: Secrets = None,
    service_host: str = "",
) -> DeliveryResult:
    """One attempt of one event. Never raises for a problem of the job's own making:
    that is a failed attempt. `service_host`: this server's host:port (`${serviceHost}`)."""
    return send_to_target(targets, job.definition.target, _context(job, action, service_host), allowed_hosts,
                          secrets, completion)


@dataclass(frozen=True)
class Staged:
    """An attempt's request made ready ahead of its time by a sender that can (`stage`)."""

    ready: StagedRequest  # the sender's own (engine/targets/http.py StagedHttp)
    sent: dict[str, Any]  # what the result records as sent (engine/sent.py)
    credentials: frozenset[str] = frozenset()  # what the attempt sends (attempt_credentials)

    def recorded(self, result: DeliveryResult) -> DeliveryResult:
        """The sender's result as it is stored, as send_to_target makes it."""
        return replace(masked_answer(result, self.credentials), sent=self.sent)


def stage(staging: Staging, job: StoredJob, action: act.Deliver, allowed_hosts: tuple[str, ...],
          completion: tuple[str, str], secrets: Secrets = None, service_host: str = "") -> Staged | None:
    """deliver() up to the write, ahead of the attempt's time: None where its kind has no
    sender in `staging`, or anything fails; deliver() then does it all at the time (and
    fails the same way)."""
    context = _context(job, action, service_host)
    try:
        rendered = render_target(job.definition.target, context, secrets)
    except (SecretError, ValueError):
        return None
    sender = staging.get(next(iter(rendered)))
    if sender is None:
        return None
    request = _request(context, rendered, allowed_hosts, completion, secret_backed_headers(job.definition.target))
    ready = sender.stage(request)
    if ready is None:
        return None
    credentials = attempt_credentials(rendered, request)
    return Staged(ready, sent_record(rendered, request.secret_headers, credentials), credentials)


def _context(job: StoredJob, action: act.Deliver, service_host: str) -> TemplateContext:
    return TemplateContext(
        scheduled_time=action.scheduled_time,
        timezone=job.definition.timezone,
        project=job.record.project,
        job_id=job.record.job_id,
        invocation_id=action.invocation_id,
        attempt=action.attempt,
        event_index=action.event_index,
        event_count=action.event_count,
        service_host=service_host,
    )


def deliver_notification(
    targets: Targets,
    job: StoredJob,
    target: dict[str, Any],
    summary: dict[str, Any],
    attempt: int,
    allowed_hosts: tuple[str, ...],
    secrets: Secrets = None,
    service_url: str = "",
) -> DeliveryResult:
    """One attempt to tell `target` (the job's `on_failure` or `on_recovery`) how an
    invocation ended; `summary` (recording.failure_summary) is the payload unless the
    target gives one of its own, and gives the hook's template variables.
    `service_url`: this server's base URL, for `${serviceHost}` and `${invocationUrl}`.
    Never raises for a problem of the job's own making."""
    hook = HookValues(
        status=summary["status"],
        reason=summary.get("reason", ""),
        attempts=summary.get("attempts", 1),
        failures=summary.get("failures", 1),  # a task enqueued before the field: on_failure's own
        invocation_url=invocation_url(service_url, job.record.project, job.record.job_id, summary["invocation_id"]),
    )
    context = TemplateContext(
        scheduled_time=parse_instant(summary["scheduled_time"]),
        timezone=job.definition.timezone,
        project=job.record.project,
        job_id=job.record.job_id,
        invocation_id=summary["invocation_id"],
        attempt=attempt,
        event_index=0,
        event_count=1,
        service_host=urlsplit(service_url).netloc,
        hook=hook,
    )
    return send_to_target(targets, target, context, allowed_hosts, secrets, payload=summary)


def invocation_url(service_url: str, project: str, job_id: str, invocation_id: str) -> str:
    """The invocation's page in the web UI (web/ui.py), under this server's base URL."""
    if not service_url:
        return ""
    parts = (quote(part, safe="") for part in (project, job_id, invocation_id))
    return f"{service_url.rstrip('/')}/p/" + "/".join(parts)


def send_to_target(
    targets: Targets,
    target: dict[str, Any],
    context: TemplateContext,
    allowed_hosts: tuple[str, ...],
    secrets: Secrets = None,
    completion: tuple[str, str] = ("", ""),
    payload: dict[str, Any] | None = None,
) -> DeliveryResult:
    """Render `target` ({kind: spec}) for `context` and send it with the sender of its kind;
    with a `payload` (a hook's summary, a cancel's body) it is no attempt of the job's own
    target, and an abort of its invocation leaves it on the wire."""
    try:
        rendered = render_target(target, context, secrets)
    except SecretError as error:
        return DeliveryResult(DeliveryOutcome.FAILED, str(error))
    except ValueError as error:
        return DeliveryResult(DeliveryOutcome.FAILED, f"bad request: {error}")
    if payload is not None:
        rendered = with_payload(rendered, payload)
    kind = next(iter(rendered))
    sender = targets.get(kind)
    if sender is None:
        return DeliveryResult(DeliveryOutcome.FAILED, f"target {kind} is not available on this backend")
    request = replace(_request(context, rendered, allowed_hosts, completion, secret_backed_headers(target)),
                      attempt_of_job=payload is None)
    result = sender.deliver(request)
    # Recorded from what the sender was handed, masked and bounded before it is stored;
    # a target may echo what it got, so its answer is masked with the same credentials.
    credentials = attempt_credentials(rendered, request)
    return replace(masked_answer(result, credentials),
                   sent=sent_record(rendered, request.secret_headers, credentials))


def attempt_credentials(rendered: dict[str, Any], request: DeliveryRequest) -> frozenset[str]:
    """Every credential an attempt sends (statemachine/safety.py sent_credentials): its
    rendered headers' (a secret's value included), its URL's, and the completion token.
    A token the sender mints itself is masked by the sender (engine/targets/http.py)."""
    return target_credentials(rendered, request.completion_token)


def target_credentials(target: dict[str, Any], completion_token: str = "") -> frozenset[str]:
    """The credentials a target (`{kind: spec}`, rendered or as defined) carries in its
    headers' literal values and its URL, and the completion token if given."""
    spec = next(iter(target.values()), None)
    spec = spec if isinstance(spec, dict) else {}
    headers = {str(name): value for name, value in (spec.get("headers") or {}).items() if isinstance(value, str)}
    if completion_token:
        headers[COMPLETION_TOKEN_HEADER] = completion_token
    return sent_credentials(headers, str(spec.get("url") or ""))


def masked_answer(result: DeliveryResult, credentials: frozenset[str]) -> DeliveryResult:
    """`result` with each of `credentials` masked in its reason and detail (the answer's
    text, already cut short: a credential's start at its end is masked too)."""
    if not credentials:
        return result
    return replace(result, reason=redact_echoes(result.reason, credentials),
                   detail=redact_echoes(result.detail, credentials, cut=True))


def _request(context: TemplateContext, rendered: dict[str, Any], allowed_hosts: tuple[str, ...],
             completion: tuple[str, str], secret_headers: frozenset[str]) -> DeliveryRequest:
    return DeliveryRequest(
        project=context.project,
        job_id=context.job_id,
        invocation_id=context.invocation_id,
        scheduled_time=context.scheduled_time,
        attempt=context.attempt,
        event_index=context.event_index,
        event_count=context.event_count,
        target=rendered,
        allowed_hosts=allowed_hosts,
        completion_url=completion[0],
        completion_token=completion[1],
        secret_headers=secret_headers,
    )


def with_payload(target: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """`payload` as JSON in the field of its kind that carries one (its spec's payload_field,
    statemachine/target_kinds.py), unless the target gives a payload of its own there."""
    kind, spec = next(iter(target.items()))
    known = TARGET_KIND_SPECS.get(kind)
    field = known.payload_field if known else ""
    if not field or spec.get(field):
        return target
    spec = {**spec, field: json.dumps(payload, separators=(",", ":"))}
    headers = spec.get("headers")
    if isinstance(headers, dict) and not any(name.lower() == "content-type" for name in headers):
        spec["headers"] = {**headers, "Content-Type": "application/json"}
    return {kind: spec}
