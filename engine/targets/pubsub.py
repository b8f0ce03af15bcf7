"""The Pub/Sub target: one attempt of one event is one published message (docs/REFERENCE.md
section 4).

`data` (rendered) is the message body; the attributes are the user's (rendered) plus
Sundial's, which carry what the X-Sundial-* headers carry for HTTP:
`sundial_job`, `sundial_invocation`, `sundial_scheduled_time`, `sundial_attempt`, and
`sundial_event` (`i/N`) when the job fans out. The attempt succeeds when Pub/Sub has
accepted the message (the publish future resolves with a message id).

The publisher client is made on first use, so building the target costs nothing and
reads PUBSUB_EMULATOR_HOST / credentials only when a job actually publishes. One client
serves every thread: it is thread-safe and batches concurrent publishes.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Callable

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from google.auth import exceptions as auth_exceptions

from engine.ports import DeliveryRequest, DeliveryResult
from statemachine.durations import rfc3339_millis
from statemachine.vocabulary import DeliveryOutcome

if TYPE_CHECKING:  # the client library loads on first publish
    from google.cloud.pubsub_v1 import PublisherClient

PUBLISH_TIMEOUT = timedelta(seconds=60)
# The client's own retries of a failed publish: a blip is retried for two seconds, after
# which the attempt fails with its reason, and the job's `retry` policy takes over. The
# client's default went on for 60 s, so a Pub/Sub that refused connections looked like a
# timeout a minute later.
PUBLISH_RETRY = gretry.Retry(
    predicate=gretry.if_exception_type(gexc.Aborted, gexc.DeadlineExceeded, gexc.InternalServerError,
                                       gexc.ResourceExhausted, gexc.ServiceUnavailable, gexc.Unknown),
    initial=0.1, maximum=0.5, multiplier=2.0, timeout=2.0)
_RESERVED_PREFIXES = ("sundial_", "goog")  # set by Sundial and by Pub/Sub itself


def sundial_attributes(request: DeliveryRequest) -> dict[str, str]:
    attributes = {
        "sundial_job": f"{request.project}/{request.job_id}",
        "sundial_invocation": request.invocation_id,
        "sundial_scheduled_time": rfc3339_millis(request.scheduled_time),
        "sundial_attempt": str(request.attempt),
    }
    if request.event_count > 1:
        attributes["sundial_event"] = f"{request.event_index}/{request.event_count}"
    return attributes


def _default_publisher() -> PublisherClient:
    import google.cloud.pubsub_v1 as pubsub_v1

    return pubsub_v1.PublisherClient()


class PubSubTarget:
    """Delivers `{"pubsub": {topic, data, attributes}}` targets."""

    def __init__(self, publisher: PublisherClient | None = None, timeout: timedelta = PUBLISH_TIMEOUT,
                 make_publisher: Callable[[], PublisherClient] = _default_publisher):
        self._publisher = publisher
        self._make_publisher = make_publisher
        self._timeout = timeout.total_seconds()
        self._lock = threading.Lock()

    def deliver(self, request: DeliveryRequest) -> DeliveryResult:
        started = time.monotonic()
        outcome, reason, detail = self._attempt(request)
        return DeliveryResult(outcome, reason, detail, timedelta(seconds=time.monotonic() - started))

    def _attempt(self, request: DeliveryRequest) -> tuple[DeliveryOutcome, str, str]:
        spec = request.target.get("pubsub") or {}
        topic = str(spec.get("topic") or "")
        data = str(spec.get("data") or "").encode("utf-8")
        attributes = {
            str(name): str(value)
            for name, value in (spec.get("attributes") or {}).items()
            if not str(name).startswith(_RESERVED_PREFIXES)
        }
        attributes.update(sundial_attributes(request))
        try:
            future = self._client().publish(topic, data, retry=PUBLISH_RETRY, **attributes)
            message_id = future.result(timeout=self._timeout)
        except concurrent.futures.TimeoutError:
            return DeliveryOutcome.FAILED, "timeout", f"pubsub: no answer within {self._timeout:g}s"
        except gexc.RetryError as error:
            text = f"pubsub: gave up retrying: {_short(error.cause or error)}"
            return DeliveryOutcome.FAILED, text, text
        except gexc.GoogleAPICallError as error:
            text = f"pubsub: {_status(error)} {_short(error)}"
            return DeliveryOutcome.FAILED, text, text
        except auth_exceptions.GoogleAuthError as error:
            text = f"pubsub: no credentials: {_short(error)}"
            return DeliveryOutcome.FAILED, text, text
        except (TypeError, ValueError) as error:  # e.g. a message over Pub/Sub's size limit
            text = f"pubsub: invalid message: {_short(error)}"
            return DeliveryOutcome.FAILED, text, text
        return DeliveryOutcome.SUCCEEDED, "", f"published message {message_id} to {topic}"

    def _client(self) -> PublisherClient:
        with self._lock:
            if self._publisher is None:
                self._publisher = self._make_publisher()
            return self._publisher


def _status(error: gexc.GoogleAPICallError) -> str:
    code = error.grpc_status_code
    return code.name if code is not None else type(error).__name__


def _short(error: BaseException) -> str:
    text = getattr(error, "message", "") or str(error) or type(error).__name__
    return " ".join(str(text).split())[:200]
