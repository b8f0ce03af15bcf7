"""Secrets that header values name (`headers: {Authorization: {secret: NAME, prefix:
"Bearer "}}`), read at delivery time so that their values never sit in a config file,
the store, an invocation's log or a log line.

Where a name is looked up:
- on one machine: the environment variable `SUNDIAL_SECRET_<NAME>` (upper case, `-` as
  `_`), else the file `$SUNDIAL_SECRETS_DIR/<NAME>` (its trailing newline dropped);
- on the cloud backend: Secret Manager (engine/adapters/cloud/secret_manager.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

REDACTED = "<redacted>"
# Headers whose values are credentials even when written out in the config.
SENSITIVE_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key"})


class SecretError(ValueError):
    """A named secret that cannot be read: the attempt fails with this reason."""


def env_name(name: str) -> str:
    """The environment variable that holds secret `name` on one machine."""
    return "SUNDIAL_SECRET_" + name.upper().replace("-", "_")


class LocalSecrets:
    def __init__(self, env: Mapping[str, str] | None = None, directory: str | None = None):
        self._env = os.environ if env is None else env
        self._directory = directory if directory is not None else self._env.get("SUNDIAL_SECRETS_DIR", "")

    def __call__(self, name: str) -> str:
        value = self._env.get(env_name(name))
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
        raise SecretError(f"secret {name!r} is not set ({env_name(name)}"
                          + (f" or {self._directory}/{name}" if self._directory else "") + ")")


def redact_headers(headers: Mapping[str, object], secret_backed: frozenset = frozenset()) -> dict:
    """Headers as they may be shown or logged: credentials and secret-backed values hidden."""
    return {name: REDACTED if name.lower() in SENSITIVE_HEADERS or name in secret_backed else value
            for name, value in headers.items()}
