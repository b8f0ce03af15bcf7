"""Secrets from Secret Manager (the cloud backend's store for engine/secrets.py).

Project P's secret NAME is the Secret Manager secret `sundial_P_NAME` in the deployment's
Google Cloud project (engine.secrets.secret_manager_id). `latest` versions are read
through Secret Manager's REST API with the app's own credentials and kept for
CACHE_SECONDS, so that a burst of deliveries costs one read per secret and instance:

- single-flight: while a secret is being read, every other request for it waits for
  that read instead of making its own (a cold instance taking 32 requests at once would
  otherwise send 32 reads of each secret, and an aligned burst over hundreds of
  instances meets Secret Manager's per-project quota, failing attempts with 429s);
- refresh ahead: from REFRESH_AFTER_SECONDS on, the cached value is still served and one
  background read replaces it, so no delivery waits for Secret Manager once a secret is
  warm. Should that read fail, the value is served until it expires and the read is
  tried again REFRESH_RETRY_SECONDS later; a secret deleted meanwhile (404) is dropped at
  once, so its next use fails as unknown.
"""

from __future__ import annotations

import base64
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from engine.secrets import SecretError, UnknownSecret, secret_manager_id

CACHE_SECONDS = 300.0
REFRESH_AFTER_SECONDS = 240.0  # a minute before expiry: room for a slow or retried read
REFRESH_RETRY_SECONDS = 10.0  # after a failed refresh, so a Secret Manager outage is not hammered
MAX_SECRET_ID = 255  # Secret Manager's limit
_SECRET_ID = re.compile(r"[A-Za-z0-9_-]+")
SECRET_MANAGER_URL = "https://secretmanager.googleapis.com"


@dataclass
class _Cached:
    value: str
    read_at: float
    refresh_at: float


@dataclass
class _Flight:
    """One read in progress; whoever asks meanwhile waits for its outcome."""
    done: threading.Event = field(default_factory=threading.Event)
    value: str | None = None
    error: SecretError | None = None

    def outcome(self) -> str:
        self.done.wait()
        if self.error is not None:
            raise self.error
        assert self.value is not None
        return self.value


class SessionResponse(Protocol):
    """What is read of an answer: a requests `Response`'s."""

    status_code: int

    def json(self) -> Any: ...  # the decoded JSON body: any value


class Session(Protocol):
    """What is used of a google-auth AuthorizedSession: its `get`."""

    def get(self, url: str, *, timeout: float) -> SessionResponse: ...


class SecretManagerSecrets:
    """Reads `latest` versions through Secret Manager's REST API; `session` is a
    google-auth AuthorizedSession (or anything with its `get`)."""

    def __init__(self, project: str, session: Session | None = None, base_url: str = SECRET_MANAGER_URL,
                 clock: Callable[[], float] = time.monotonic):
        self._project, self._session, self._base = project, session, base_url.rstrip("/")
        self._clock = clock
        self._cache: dict[str, _Cached] = {}
        self._flights: dict[str, _Flight] = {}
        self._lock = threading.Lock()

    def __call__(self, project: str, name: str) -> str:
        secret_id = secret_manager_id(project, name)
        if len(secret_id) > MAX_SECRET_ID or not _SECRET_ID.fullmatch(secret_id):
            raise UnknownSecret(name)
        now = self._clock()
        with self._lock:
            cached = self._cache.get(secret_id)
            if cached and now < cached.read_at + CACHE_SECONDS:
                if now >= cached.refresh_at and secret_id not in self._flights:
                    self._start_background_refresh(secret_id, name)
                return cached.value
            flight = self._flights.get(secret_id)
            leading = flight is None
            if flight is None:
                flight = self._flights[secret_id] = _Flight()
        if leading:
            self._read_into(flight, secret_id, name)
        return flight.outcome()

    def _start_background_refresh(self, secret_id: str, name: str) -> None:
        """Called holding the lock, with no read of `secret_id` in progress."""
        flight = self._flights[secret_id] = _Flight()
        threading.Thread(target=self._read_into, args=(flight, secret_id, name),
                         name=f"secret-refresh-{secret_id}", daemon=True).start()

    def _read_into(self, flight: _Flight, secret_id: str, name: str) -> None:
        read_at = self._clock()
        try:
            flight.value = self._fetch(secret_id, name)
        except SecretError as error:
            flight.error = error
        except Exception as error:  # e.g. no credentials: the waiters must still be released
            flight.error = SecretError(f"secret {name!r}: not readable ({type(error).__name__})")
        with self._lock:
            cached = self._cache.get(secret_id)
            if flight.value is not None:
                self._cache[secret_id] = _Cached(flight.value, read_at, read_at + REFRESH_AFTER_SECONDS)
            elif isinstance(flight.error, UnknownSecret):
                self._cache.pop(secret_id, None)
            elif cached is not None:
                cached.refresh_at = self._clock() + REFRESH_RETRY_SECONDS
            del self._flights[secret_id]
        flight.done.set()

    def _fetch(self, secret_id: str, name: str) -> str:
        url = f"{self._base}/v1/projects/{self._project}/secrets/{secret_id}/versions/latest:access"
        try:
            response = self._authorized().get(url, timeout=10)
        except Exception as error:  # transport errors of any client: the attempt fails, retried
            raise SecretError(f"secret {name!r}: Secret Manager unreachable ({type(error).__name__})") from None
        if response.status_code == 404:
            raise UnknownSecret(name)
        if response.status_code != 200:
            raise SecretError(f"secret {name!r}: Secret Manager answered {response.status_code}")
        try:
            return base64.b64decode(response.json()["payload"]["data"]).decode("utf-8")
        except (KeyError, ValueError, UnicodeDecodeError):
            raise SecretError(f"secret {name!r}: not UTF-8 text") from None

    def _authorized(self) -> Session:
        if self._session is None:
            import google.auth
            from google.auth.transport.requests import AuthorizedSession

            credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
            self._session = AuthorizedSession(credentials)  # type: ignore[no-untyped-call]  # unannotated there
        return self._session
