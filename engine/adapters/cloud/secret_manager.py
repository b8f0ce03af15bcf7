"""Secrets from Secret Manager (the cloud backend's store for engine/secrets.py).

Project P's secret NAME is the Secret Manager secret `sundial_P_NAME` in the deployment's
Google Cloud project (engine.secrets.secret_manager_id). `latest` versions are read
through Secret Manager's REST API with the app's own credentials, and kept for
CACHE_SECONDS so that a burst of deliveries costs one read per secret.
"""

from __future__ import annotations

import base64
import re
import threading
import time
from typing import Callable

from engine.secrets import SecretError, UnknownSecret, secret_manager_id

CACHE_SECONDS = 300.0
MAX_SECRET_ID = 255  # Secret Manager's limit
_SECRET_ID = re.compile(r"[A-Za-z0-9_-]+")
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

    def __call__(self, project: str, name: str) -> str:
        secret_id = secret_manager_id(project, name)
        if len(secret_id) > MAX_SECRET_ID or not _SECRET_ID.fullmatch(secret_id):
            raise UnknownSecret(name)
        now = self._clock()
        with self._lock:
            cached = self._cache.get(secret_id)
        if cached and cached[0] > now:
            return cached[1]
        value = self._fetch(secret_id, name)
        with self._lock:
            self._cache[secret_id] = (now + CACHE_SECONDS, value)
        return value

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

    def _authorized(self):
        if self._session is None:
            import google.auth
            from google.auth.transport.requests import AuthorizedSession

            credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
            self._session = AuthorizedSession(credentials)
        return self._session
