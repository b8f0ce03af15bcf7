"""The Cloud Tasks target: one attempt of one event is one HTTP task on the user's queue
(docs/REFERENCE.md section 2: `cloud_tasks: {queue, url, method, headers, body, auth}`).

Cloud Tasks then owns the delivery to `url`, with the queue's own retries, so the
attempt succeeds once the task is created. The task carries the same X-Sundial-*
headers as an HTTP delivery. Its name is derived from (job, invocation, event, attempt):
a retry of the same attempt (a lost answer, a redelivered start task) asks for the same
name, Cloud Tasks answers ALREADY_EXISTS, and that is success, not a second task.
Cloud Tasks keeps a used name reserved for about an hour after the task is gone, which
covers every retry Sundial makes of one attempt.

A task with `auth` makes Cloud Tasks mint the token, as Sundial's own service account
allows it to, so the operator's grant is checked here as for an http target
(google_tokens.refusal): for an account or audience the project may not have, no task
is created and the attempt fails with a reason starting `forbidden identity`.

The client is made on first use; SUNDIAL_TASKS_EMULATOR_HOST (host:port, no TLS) points
it at an emulator, as for the chain's own queue.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from datetime import timedelta
from typing import Any, Callable

from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exceptions
from google.cloud import tasks_v2

from engine.ports import DeliveryRequest, DeliveryResult
from engine.targets.google_tokens import describe, refusal
from engine.targets.http import sundial_headers
from statemachine.safety import CLOUD_TASK_MAX_BYTES, OwnService, is_framing_header
from statemachine.vocabulary import DeliveryOutcome

CREATE_TIMEOUT = 30.0  # seconds for the CreateTask call
_BODY_METHODS = ("POST", "PUT", "PATCH")  # Cloud Tasks refuses a body with any other
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_RESERVED_PREFIX = "x-sundial-"


def _default_client(emulator: str = "") -> tasks_v2.CloudTasksClient:
    if not emulator:
        return tasks_v2.CloudTasksClient()
    import grpc
    from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

    return tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=grpc.insecure_channel(emulator)))


def task_id(request: DeliveryRequest) -> str:
    """`{hash}-{job}-{invocation}-{event}-{attempt}`: the hash first, because Cloud
    Tasks slows down on names that share a sequential prefix; at most 500 characters
    of [A-Za-z0-9_-]."""
    key = f"{request.project}/{request.job_id}/{request.invocation_id}/{request.event_index}/{request.attempt}"
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    tail = _UNSAFE.sub("_", f"{request.job_id}-{request.invocation_id}-{request.event_index}-{request.attempt}")
    return f"{digest}-{tail}"[:500]


class CloudTasksTarget:
    """Delivers `{"cloud_tasks": {queue, url, method, headers, body}}` targets."""

    def __init__(self, client: tasks_v2.CloudTasksClient | None = None,
                 make_client: Callable[[], tasks_v2.CloudTasksClient] | None = None,
                 own: OwnService = OwnService(), emulator_host: str = ""):
        self._client = client
        self._make_client = make_client or (lambda: _default_client(emulator_host))
        self._own = own  # Sundial's own service and queues, and the grant of identities: as at validation
        self._lock = threading.Lock()

    def deliver(self, request: DeliveryRequest) -> DeliveryResult:
        started = time.monotonic()
        outcome, reason, detail = self._attempt(request)
        return DeliveryResult(outcome, reason, detail, timedelta(seconds=time.monotonic() - started))

    def _attempt(self, request: DeliveryRequest) -> tuple[DeliveryOutcome, str, str]:
        spec = request.target.get("cloud_tasks") or {}
        queue = str(spec.get("queue") or "")
        refused = self._own.refusal(str(spec.get("url") or ""), queue)
        if refused:
            return DeliveryOutcome.FAILED, f"forbidden target: {refused[1]}", refused[1]
        auth = spec.get("auth")
        forbidden = refusal(self._own, request.project, auth, str(spec.get("url") or "")) \
            if isinstance(auth, dict) and auth else None
        if forbidden:
            return DeliveryOutcome.FAILED, forbidden, forbidden
        try:
            task = self._task(request, spec, queue)
        except ValueError as error:
            return DeliveryOutcome.FAILED, f"invalid request: {error}", str(error)
        try:
            self._get_client().create_task(parent=queue, task=task, timeout=CREATE_TIMEOUT)
        except gexc.AlreadyExists:
            return DeliveryOutcome.SUCCEEDED, "", f"task {task.name} already created by an earlier try"
        except gexc.RetryError as error:
            text = f"cloud_tasks: gave up retrying: {_short(error.cause or error)}"
            return DeliveryOutcome.FAILED, text, text
        except gexc.GoogleAPICallError as error:
            code = error.grpc_status_code.name if error.grpc_status_code is not None else type(error).__name__
            text = f"cloud_tasks: {code} {_short(error)}"
            return DeliveryOutcome.FAILED, text, text
        except auth_exceptions.GoogleAuthError as error:
            text = f"cloud_tasks: no credentials: {_short(error)}"
            return DeliveryOutcome.FAILED, text, text
        return DeliveryOutcome.SUCCEEDED, "", f"created task {task.name}"

    def _task(self, request: DeliveryRequest, spec: dict[str, Any], queue: str) -> tasks_v2.Task:
        method = str(spec.get("method") or "POST").upper()
        if method not in tasks_v2.HttpMethod.__members__:
            raise ValueError(f"Cloud Tasks cannot send method {method}")
        body = str(spec.get("body") or "")
        if body and method not in _BODY_METHODS:
            raise ValueError(f"Cloud Tasks sends a body only with POST, PUT or PATCH, not {method}")
        headers = {
            str(name): str(value)
            for name, value in (spec.get("headers") or {}).items()
            if not str(name).lower().startswith(_RESERVED_PREFIX) and not is_framing_header(str(name))
        }
        headers.update(sundial_headers(request))
        http = tasks_v2.HttpRequest(
            url=str(spec.get("url") or ""),
            http_method=tasks_v2.HttpMethod.__members__[method],
            headers=headers,
            body=body.encode("utf-8"),
            **_token(spec),
        )
        task = tasks_v2.Task(name=f"{queue}/tasks/{task_id(request)}", http_request=http)
        size = len(tasks_v2.Task.serialize(task))
        if size > CLOUD_TASK_MAX_BYTES:  # its templates grew past the limit as they rendered
            raise ValueError(f"the task is {size:,} bytes; Cloud Tasks refuses a task over "
                             f"{CLOUD_TASK_MAX_BYTES:,} bytes")
        return task

    def _get_client(self) -> tasks_v2.CloudTasksClient:
        with self._lock:
            if self._client is None:
                self._client = self._make_client()
            return self._client


def _token(spec: dict[str, Any]) -> dict[str, tasks_v2.OidcToken | tasks_v2.OAuthToken]:
    """The task's `oidc_token` or `oauth_token` for the target's `auth`: Cloud Tasks mints
    the token itself at each dispatch, so Sundial never holds it. The audience is the
    same default as an http target's (the URL's origin)."""
    auth = spec.get("auth")
    if not isinstance(auth, dict) or not auth:
        return {}
    kind, account, aim = describe(auth, str(spec.get("url") or ""))
    if kind == "oidc":
        return {"oidc_token": tasks_v2.OidcToken(service_account_email=account, audience=aim)}
    return {"oauth_token": tasks_v2.OAuthToken(service_account_email=account, scope=aim)}


def _short(error: BaseException) -> str:
    text = getattr(error, "message", "") or str(error) or type(error).__name__
    return " ".join(str(text).split())[:200]
