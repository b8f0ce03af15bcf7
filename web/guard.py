"""Who may call the internal task and cron handlers (docs/REFERENCE.md section 6).

The proofs:

1. On App Engine only: the platform's own headers. App Engine removes
   `X-AppEngine-QueueName` and `X-Appengine-Cron` from requests that come from outside,
   so there they can only come from an App Engine task queue (for task handlers) or the
   cron service (for cron handlers). Anywhere else anybody can send them, so they count
   for nothing. `X-CloudTasks-*` headers count for nothing anywhere: Cloud Tasks puts
   them on every HTTP task, including the ones a user's `cloud_tasks` target creates.
2. The shared secret in `X-Sundial-Task-Secret`, which Sundial puts on every task it
   creates, and which only Sundial and its queue hold.
3. For the cron handlers only: a Google-signed OIDC token (`Authorization: Bearer ...`)
   whose email is the configured service account (`SUNDIAL_TASKS_SERVICE_ACCOUNT`) and
   whose audience is the service URL, what Cloud Scheduler sends.

A task handler needs 1 or 2: a token alone, however valid, is refused. Cloud Tasks puts
the same token on Sundial's HTTP tasks (for Cloud Run's own IAM check), but a token is
something Sundial can mint for other callers too (an `auth` target); the operator's grant
keeps projects from naming that account and audience (statemachine/identities.py), and
the secret keeps a slip there from opening the chain. A cron handler admits 1, 2 or 3:
its work (the watchdog, the import, the clean-up) is the same whoever asks.

Everything else is refused before any handler runs. The token check goes through
`google.oauth2.id_token.verify_oauth2_token`; only its way of fetching Google's public
certificates is injectable (tests hand it certificates of a locally made key).
"""

from __future__ import annotations

import hmac
import threading
import time
from typing import Callable, Mapping, Protocol, Union

from werkzeug.datastructures import Headers

from config.settings import Settings

# A request's headers: Werkzeug's, or a plain mapping (tests, tasks built by hand).
RequestHeaders = Union[Mapping[str, str], Headers]


class CertsResponse(Protocol):
    """What the certificate fetch reads of a google-auth transport `Response`."""

    @property
    def status(self) -> int: ...

    @property
    def data(self) -> bytes: ...


# google-auth's transport `Request`: called with a URL, a method and its keyword options
# (body, headers, timeout), it answers a transport `Response`. google-auth types neither.
CertsRequest = Callable[..., CertsResponse]

SECRET_HEADER = "X-Sundial-Task-Secret"
TASK_HEADER = "X-AppEngine-QueueName"
CRON_HEADER = "X-Appengine-Cron"
CERTS_TTL_SECONDS = 3600.0  # Google announces new signing keys well before using them
CLOCK_SKEW_SECONDS = 10


class CachedCerts:
    """A google-auth transport `Request` that remembers successful GETs for a while:
    verify_oauth2_token fetches Google's certificates on every call, which would make
    every task cost a round trip to Google."""

    def __init__(self, fetch: CertsRequest, ttl: float = CERTS_TTL_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self._fetch, self._ttl, self._clock = fetch, ttl, clock
        self._cache: dict[str, tuple[float, CertsResponse]] = {}
        self._lock = threading.Lock()

    def __call__(self, url: str, method: str = "GET", **kwargs: object) -> CertsResponse:
        now = self._clock()
        with self._lock:
            cached = self._cache.get(url)
        if method == "GET" and cached and cached[0] > now:
            return cached[1]
        response = self._fetch(url, method=method, **kwargs)
        if method == "GET" and getattr(response, "status", None) == 200:
            with self._lock:
                self._cache[url] = (now + self._ttl, response)
        return response


def default_certs_request() -> CachedCerts:
    import google.auth.transport.requests

    return CachedCerts(google.auth.transport.requests.Request())


class OidcVerifier:
    """Checks a bearer token: signed by Google, unexpired, for `audience`, and issued
    to `service_account` with a verified email."""

    def __init__(self, service_account: str, audience: str, certs_request: CertsRequest | None = None):
        self.service_account = service_account
        self.audience = audience
        self._request = certs_request
        self._lock = threading.Lock()

    def __call__(self, token: str) -> bool:
        from google.auth import exceptions as auth_exceptions
        from google.oauth2 import id_token

        try:
            claims = id_token.verify_oauth2_token(  # type: ignore[no-untyped-call]  # unannotated there
                token, self._certs(), audience=self.audience,
                clock_skew_in_seconds=CLOCK_SKEW_SECONDS,
            )
        except (ValueError, auth_exceptions.GoogleAuthError):
            # Bad signature, expired, wrong audience or issuer, malformed, or Google's
            # certificates out of reach: no proof, so no entry (the queue retries).
            return False
        return claims.get("email") == self.service_account and claims.get("email_verified") is True

    def _certs(self) -> CertsRequest:
        with self._lock:
            if self._request is None:
                self._request = default_certs_request()
            return self._request


class Guard:
    """Decides whether one request may reach an internal handler."""

    def __init__(self, on_app_engine: bool, secret: str = "", verify_token: Callable[[str], bool] | None = None):
        self.on_app_engine = on_app_engine
        self._secret = secret.encode("utf-8")
        self._verify_token = verify_token

    def admits(self, headers: RequestHeaders, cron: bool) -> bool:
        if self.on_app_engine and self._platform_vouches(headers, cron):
            return True
        if self._has_secret(headers):
            return True
        return cron and self._has_token(headers)

    @staticmethod
    def _platform_vouches(headers: RequestHeaders, cron: bool) -> bool:
        if cron:
            return headers.get(CRON_HEADER) == "true"
        return bool(headers.get(TASK_HEADER))

    def _has_secret(self, headers: RequestHeaders) -> bool:
        given = headers.get(SECRET_HEADER, "")
        # Bytes, not str: compare_digest refuses non-ASCII str, and a forged header may
        # carry anything.
        return bool(self._secret and given) and hmac.compare_digest(
            given.encode("utf-8", "surrogateescape"), self._secret
        )

    def _has_token(self, headers: RequestHeaders) -> bool:
        if self._verify_token is None:
            return False
        scheme, _, token = headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and bool(token.strip()) and self._verify_token(token.strip())


def guard_from_settings(settings: Settings) -> Guard:
    """The guard for a running app: App Engine or not, the task secret, and for cron OIDC
    when a service account is configured (audience: the service URL)."""
    account = settings.tasks_service_account
    verifier = OidcVerifier(account, settings.service_url.rstrip("/")) if account else None
    return Guard(settings.on_app_engine, settings.task_secret, verifier)
