"""Secrets that header values name (`headers: {Authorization: {secret: NAME, prefix:
"Bearer "}}`), read at delivery time so that their values never sit in a config file,
the store, an invocation's log or a log line.

A secret belongs to one project: a job reads only the secrets of its own project, so
the owners of one project can never send another project's secret (or the server's
own) anywhere. Where (project, NAME) is looked up:
- on one machine: the file `$SUNDIAL_SECRETS_DIR/<project>/<NAME>` (its trailing
  newline dropped). No environment variable is read: names of secrets are chosen by
  project owners, and the environment belongs to the host.
- on the cloud backend: the Secret Manager secret `sundial_<project>_<NAME>`
  (engine/adapters/cloud/secret_manager.py); project ids hold no `_`, so no two
  (project, name) pairs share a secret.

Every store is a callable `(project, name) -> value` raising SecretError. A store that
can tell cheaply whether a secret exists (the directory) also has `exists(project,
name)`, and a job PUT through the API naming a secret its project lacks is refused; a
config file's job is not (its file is imported once, and the secret may come later),
nor on Secret Manager (a remote call per PUT): those fail at the attempt instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from engine.masking import masked_definition
from statemachine.definition import JobDefinition
from statemachine.safety import MASK, SENSITIVE_HEADERS, shows_header_value

REDACTED = MASK
__all__ = ["LocalSecrets", "REDACTED", "SENSITIVE_HEADERS", "SecretError", "UnknownSecret",
           "masked_definition", "redact_headers", "secret_manager_id"]


class SecretError(ValueError):
    """A named secret that cannot be read: the attempt fails with this reason."""


class UnknownSecret(SecretError):
    """The project has no secret of that name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown secret {name}")


def secret_manager_id(project: str, name: str) -> str:
    """The Secret Manager id of `project`'s secret `name`."""
    return f"sundial_{project}_{name}"


class LocalSecrets:
    """`$SUNDIAL_SECRETS_DIR/<project>/<NAME>`; with no directory, no secret exists."""

    def __init__(self, directory: str = ""):
        self._directory = directory

    def exists(self, project: str, name: str) -> bool:
        """Whether `project` has secret `name` (checked when a job is PUT)."""
        return bool(self._directory) and _plain(project) and _plain(name) \
            and (Path(self._directory) / project / name).is_file()

    def __call__(self, project: str, name: str) -> str:
        if not self._directory or not _plain(project) or not _plain(name):
            raise UnknownSecret(name)
        path = Path(self._directory) / project / name
        try:
            return path.read_text(encoding="utf-8").rstrip("\r\n")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise UnknownSecret(name) from None
        except UnicodeDecodeError:
            raise SecretError(f"secret {name!r} is not UTF-8 text") from None
        except OSError as error:
            raise SecretError(f"secret {name!r} cannot be read: {error.strerror}") from None


def _plain(part: str) -> bool:
    # Validation allows only [A-Za-z0-9_-] in names and [a-z0-9-] in projects; checked
    # again here, where a path is made of them.
    return bool(part) and part not in (".", "..") and all(c.isalnum() or c in "_-" for c in part) \
        and part.isascii()


def redact_headers(headers: Mapping[str, object],
                   secret_backed: frozenset[str] = frozenset()) -> dict[str, object]:
    """Headers as they may be shown or logged: every value but a harmless header's
    (statemachine/safety.py HARMLESS_HEADERS) hidden, and a secret-backed one always."""
    return {name: value if shows_header_value(str(name)) and name not in secret_backed else REDACTED
            for name, value in headers.items()}


def secret_names(definition: JobDefinition) -> list[tuple[str, str]]:
    """(field path, secret name) of every secret reference in a definition's target and hook."""
    found = []
    for field, target in (("target", definition.target), ("on_failure", definition.on_failure),
                          ("on_recovery", definition.on_recovery)):
        for kind, spec in (target or {}).items():
            headers = spec.get("headers") if isinstance(spec, dict) else None
            for header, value in (headers or {}).items():
                if isinstance(value, dict) and "secret" in value:
                    found.append((f"{field}.{kind}.headers.{header}", str(value["secret"])))
    return found
