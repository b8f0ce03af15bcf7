"""Secrets that header values name (`headers: {Authorization: {secret: NAME, prefix:
"Bearer "}}`), read at delivery time so that their values never sit in a config file,
the store, an invocation's log or a log line.

Where a name is looked up:
- on one machine: the environment variable `SUNDIAL_SECRET_<NAME>` (upper case, `-` as
  `_`), else the file `$SUNDIAL_SECRETS_DIR/<NAME>` (its trailing newline dropped);
- on the cloud backend: Secret Manager, `projects/<project>/secrets/<NAME>/versions/latest`,
  with the app's own credentials; values are kept for `CACHE_SECONDS` so that a burst
  of deliveries costs one read per secret.
"""

from __future__ import annotations

import base64
import os
import threading
import time
from pathlib import Path
from typing import Callable, Mapping

CACHE_SECONDS = 300.0
SECRET_MANAGER_URL = "https://secretmanager.googleapis.com"
REDACTED = "<redacted>"
# Headers whose values are credentials even when written out in the config.
SENSITIVE_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key"})


class SecretError(ValueError):
    """A named secret that cannot be read: the attempt fails with this reason."""


class LocalSecrets:
    def __init__(self, env: Mapping[str, str] | None = None, directory: str | None = None):
        self._env = os.environ if env is None else env
        self._directory = directory if directory is not None else self._env.get("SUNDIAL_SECRETS_DIR", "")

    def __call__(self, name: str) -> str:
        value = self._env.get("SUNDIAL_SECRET_" + name.upper().replace("-", "_"))
        if value is not None:
            return value
        if self._directory:
            path = Path(self._directory) / name
            try:
                return path.read_text(encoding="utf-8").rstrip("\r\n")
            except FileNotFoundError:
                pass
            except OSError as error:
                raise SecretError(f"secret {name!r} cannot be read: {error.strerror}") from None
        raise SecretError(f"secret {name!r} is not set (SUNDIAL_SECRET_{name.upper().replace('-', '_')}"
                          + (f" or {self._directory}/{name}" if self._directory else "") + ")")


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


def secrets_for(settings, env: Mapping[str, str] | None = None):
    """The secret lookup of a running server: Secret Manager on the cloud backend unless
    SUNDIAL_SECRETS=local says otherwise, else the environment and SUNDIAL_SECRETS_DIR."""
    env = os.environ if env is None else env
    if settings.backend == "cloud" and env.get("SUNDIAL_SECRETS", "") != "local":
        return SecretManagerSecrets(settings.gcp_project,
                                    base_url=env.get("SUNDIAL_SECRET_MANAGER_URL", SECRET_MANAGER_URL))
    return LocalSecrets(env)


def redact_headers(headers: Mapping[str, object], secret_backed: frozenset = frozenset()) -> dict:
    """Headers as they may be shown or logged: credentials and secret-backed values hidden."""
    return {name: REDACTED if name.lower() in SENSITIVE_HEADERS or name in secret_backed else value
            for name, value in headers.items()}
