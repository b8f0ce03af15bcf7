"""Secrets from Secret Manager (the cloud backend's store for engine/secrets.py).

`latest` versions are read through Secret Manager's REST API with the app's own
credentials, and kept for CACHE_SECONDS so that a burst of deliveries costs one read
per secret.
"""

from __future__ import annotations

import base64
import threading
import time
from typing import Callable

from engine.secrets import SecretError

CACHE_SECONDS = 300.0
SECRET_MANAGER_URL = "https://secretmanager.googleapis.com"


class SecretManagerSecrets:
    """Reads `latest` versions through Secret Manager's REST API; `session` is a
    google-auth AuthorizedSession (or anything with its `get`)."""

    def __init__(self, project: str, session=None, base_url: str = SECRET_MANAGER_URL,
                 clock: Callable[[], float] = time.monotonic):
        self._project, self._session, self._base = project, session, base_url.rstrip("/")
        self._clock = clock
        self._cache: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    def __call__(self, name: str) -> str:
        now = self._clock()
        with self._lock:
            cached = self._cache.get(name)
        if cached and cached[0] > now:
            return cached[1]
        value = self._fetch(name)
        with self._lock:
            self._cache[name] = (now + CACHE_SECONDS, value)
        return value

    def _fetch(self, name: str) -> str:
        url = f"{self._base}/v1/projects/{self._project}/secrets/{name}/versions/latest:access"
        try:
            response = self._authorized().get(url, timeout=10)
        except Exception as error:  # transport errors of any client: the attempt fails, retried
            raise SecretError(f"secret {name!r}: Secret Manager unreachable ({type(error).__name__})") from None
        if response.status_code == 404:
            raise SecretError(f"secret {name!r} does not exist in project {self._project!r}")
        if response.status_code != 200:
            raise SecretError(f"secret {name!r}: Secret Manager answered {response.status_code}")
        try:
            return base64.b64decode(response.json()["payload"]["data"]).decode("utf-8")
        except (KeyError, ValueError, UnicodeDecodeError):
            raise SecretError(f"secret {name!r}: not UTF-8 text") from None

    def _authorized(self):
        if self._session is None:
            import google.auth
            from google.auth.transport.requests import AuthorizedSession

            credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
            self._session = AuthorizedSession(credentials)
        return self._session
