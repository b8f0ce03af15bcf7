"""Sending attempts that are already committed as starting, and what they need.

`Deliveries` renders and sends one attempt (engine/delivery.py), counts and logs its
result, and turns the result into the change that records it. It also owns what a
delivery needs besides the job: the project's `allowed_hosts` (cached briefly) and the
completion token an async target answers with.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from datetime import datetime, timedelta
from typing import Any, Callable
from urllib.parse import urlsplit

from engine.changes import Change, Note
from engine.delivery import Staged, Staging, deliver, deliver_notification, send_to_target, stage
from engine.holds import AttemptKey, HeldAttempt
from engine.logs import log_event
from engine.metrics import Metrics
from engine.ports import Clock, DeliveryResult, JobStore, SecretReader, StoredJob, Target
from engine.recording import tells_history
from engine.staging_ports import BatchWriter
from statemachine import actions as act
from statemachine import events as ev
from statemachine.policy import occurrence_delay
from statemachine.template import TemplateContext
from statemachine.vocabulary import ON_THE_CLOCK, DeliveryOutcome, TargetKind

log = logging.getLogger("sundial.engine")

# How long a project's allowed_hosts are used before they are read again.
SETTINGS_TTL = timedelta(seconds=5)


class Deliveries:
    def __init__(self, store: JobStore, targets: dict[str, Target], clock: Clock, metrics: Metrics, *,
                 service_url: str = "http://127.0.0.1:8080", secret: bytes = b"",
                 secrets: SecretReader | None = None, staging: Staging | None = None):
        """`secret` keys the completion tokens; `secrets` reads the values that header
        fields name (engine/secrets.py), None where the server has no secret store;
        `staging`: the targets that can make a request ready ahead of its time, by kind."""
        self.store, self.targets, self.clock, self.metrics = store, targets, clock, metrics
        self.staging: Staging = staging or {}
        self.service_url, self.secret, self.secrets = service_url.rstrip("/"), secret, secrets
        self.service_host = urlsplit(self.service_url).netloc  # `${serviceHost}`: follows serve --port
        self._settings_cache: dict[str, tuple[datetime, tuple[str, ...]]] = {}

    def send(self, job: StoredJob, action: act.Deliver) -> DeliveryResult:
        """Send one attempt already committed as starting; count and log its result.
        Never raises for the target's or the job's own failures."""
        started = self.clock.now()
        result = deliver(self.targets, job, action, self.allowed_hosts(job.record.project),
                         self._completion(job, action), self.secrets, self.service_host)
        return self.account(job, action, started, result)

    def stage(self, job: StoredJob, action: act.Deliver) -> Staged | None:
        """The attempt's request made ready ahead of its time (engine/delivery.py `stage`)."""
        return stage(self.staging, job, action, self.allowed_hosts(job.record.project),
                     self._completion(job, action), self.secrets, self.service_host)

    def batch_writer(self, hand_off: Callable[[Callable[[], None]], None]) -> BatchWriter | None:
        """The HTTP target's writer of staged requests (engine/targets/http_batch.py), or
        None where there is no HTTP target that stages."""
        http = self.staging.get(TargetKind.HTTP)
        return http.batch_writer(hand_off) if http is not None else None

    def account(self, job: StoredJob, action: act.Deliver, started: datetime, result: DeliveryResult) -> DeliveryResult:
        """Count and log a sent attempt's result (`started`: when its request went out)."""
        project, job_id = job.record.project, job.record.job_id
        # Counted from when the occurrence was due: its nominal time plus its jitter.
        due = action.scheduled_time
        if job.record.policy is not None:
            due += occurrence_delay(job.record.policy, project, job_id, action.scheduled_time, action.trigger)
        lateness = started - due
        self.metrics.inc("sundial_deliveries_total", outcome=result.outcome)
        if action.attempt == 1 and action.event_count == 1 and action.trigger in ON_THE_CLOCK:
            self.metrics.observe_lateness(max(lateness.total_seconds(), 0.0))
        # A failed attempt is a WARNING: the invocation may still retry; its final
        # failure is logged at ERROR where the job records it (engine/changes.py).
        level = logging.WARNING if result.outcome == DeliveryOutcome.FAILED else logging.INFO
        log_event(log, "delivered", level=level, job=f"{project}/{job_id}", invocation=action.invocation_id,
                  scheduled_time=action.scheduled_time, attempt=action.attempt, event=action.event_index,
                  outcome=result.outcome, reason=result.reason,
                  lateness_ms=int(lateness.total_seconds() * 1000),
                  duration_ms=int(result.duration.total_seconds() * 1000))
        return result

    def send_notification(self, job: StoredJob, target: dict[str, Any], summary: dict[str, Any],
                          attempt: int) -> DeliveryResult:
        """Send one attempt of a hook's notification (the notification machine committed
        it as sending). Never raises for the target's or the job's failures."""
        return deliver_notification(self.targets, job, target, summary, attempt,
                                    self.allowed_hosts(job.record.project), self.secrets, self.service_url)

    def send_cancel(self, job: StoredJob, target: dict[str, Any], context: TemplateContext,
                    body: dict[str, Any]) -> DeliveryResult:
        """Send the request that tells an async target its invocation was aborted
        (engine/cancels.py): `target` rendered for `context`, `body` as its JSON payload,
        under the project's allowed_hosts. Never raises for the target's or the job's failures."""
        return send_to_target(self.targets, target, context, self.allowed_hosts(job.record.project), self.secrets,
                              payload=body)

    def allowed_hosts(self, project: str) -> tuple[str, ...]:
        """The project's `allowed_hosts`, read at most once per SETTINGS_TTL.

        The project row also lists every job id of its file, so reading it on
        every delivery cost more than the delivery; a change takes effect within
        the TTL, as a config change takes up to the import period anyway.
        """
        now = self.clock.now()
        cached = self._settings_cache.get(project)
        if cached is not None and now < cached[0]:
            return cached[1]
        row = self.store.get_project(project)
        hosts = tuple((row.settings if row else {}).get("allowed_hosts", ()))
        self._settings_cache[project] = (now + SETTINGS_TTL, hosts)
        return hosts

    def completion_token(self, invocation_id: str) -> str:
        """What an async target must send back to complete this invocation."""
        return hmac.new(self.secret, f"complete/{invocation_id}".encode(), hashlib.sha256).hexdigest()

    def _completion(self, job: StoredJob, action: act.Deliver) -> tuple[str, str]:
        """Where and with what an async target reports its completion; only an async
        target is told (an HMAC per request is not spent on the others)."""
        spec = next(iter(job.definition.target.values()), None)
        if not isinstance(spec, dict) or not spec.get("async"):
            return "", ""
        project, job_id = job.record.project, job.record.job_id
        url = f"{self.service_url}/api/v1/projects/{project}/jobs/{job_id}/invocations/{action.invocation_id}:complete"
        return url, self.completion_token(action.invocation_id)


def outcome_change(job: StoredJob, action: act.Deliver, result: DeliveryResult, stage_next: bool = False) -> Change:
    """The change that records an attempt's result, with its line for the invocation's log;
    `stage_next`: the sender has room to hold the job's next request (staged in the same
    step when the result frees the job, ticks.stage_pending)."""
    fields: dict[str, Any] = {"event": action.event_index, "detail": result.detail,
                              "duration_ms": int(result.duration.total_seconds() * 1000)}
    if result.sent is not None:
        fields["request"] = result.sent
    note = Note(action.invocation_id, f"attempt {action.attempt}: {result.outcome}",
                fields) if tells_history(action) else None
    project, job_id = job.record.project, job.record.job_id
    held = HeldAttempt(AttemptKey(project, job_id, action.invocation_id, action.event_index, action.attempt))
    return Change(project, job_id, _outcome_event(action, result, stage_next), note, releases=held)


def _outcome_event(action: act.Deliver, result: DeliveryResult, stage_next: bool) -> ev.Event:
    # The Deliver's epoch is the fencing token: the store records the answer only while
    # the attempt has not been issued again since (0: a Deliver made without one).
    epoch = action.epoch or None
    if result.outcome == DeliveryOutcome.ACCEPTED:
        return ev.InvocationStarted(action.invocation_id, action.event_index, action.attempt, epoch)
    return ev.InvocationFinished(
        action.invocation_id, result.outcome == DeliveryOutcome.SUCCEEDED, result.reason, action.event_index,
        action.attempt, epoch, stage_next=stage_next,
    )
