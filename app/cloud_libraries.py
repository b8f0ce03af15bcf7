"""Whether the Google Cloud libraries are installed.

The package installs them only with its `gcp` extra, so that the SQLite backend runs in
an environment without grpc, protobuf and the Google clients. Asking for the cloud
backend (or for incoming Google-signed tokens to be checked) without them is then a
one-line error that says what to install, not a traceback from deep inside an adapter's
imports.
"""

from __future__ import annotations

import importlib.util

from config.settings import Settings
from engine.targets.google_tokens import INSTALL_THE_GCP_EXTRA

# What the cloud backend's adapters import (engine/adapters/cloud/, engine/targets/).
CLOUD_BACKEND_MODULES = ("google.auth", "google.api_core", "google.cloud.ndb", "google.cloud.tasks_v2",
                         "google.cloud.pubsub_v1", "grpc", "google.protobuf")


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:  # a parent package is missing (no `google` at all)
        return True


def require_cloud_libraries(what: str) -> None:
    """Stop with a one-line error when a library the cloud backend imports is missing."""
    missing = [module for module in CLOUD_BACKEND_MODULES if _missing(module)]
    if missing:
        raise SystemExit(f"sundial: {what} needs the Google Cloud libraries, and {', '.join(missing)}"
                         f" {'is' if len(missing) == 1 else 'are'} not installed: {INSTALL_THE_GCP_EXTRA}")


def require_google_auth(settings: Settings) -> None:
    """On any backend, the settings that have incoming calls' Google-signed tokens checked
    need google-auth: stop at start with a one-line error rather than fail every such call."""
    asked = [name for name, value in (("SUNDIAL_IAP_AUDIENCE", settings.iap_audience),
                                      ("SUNDIAL_ID_TOKEN_AUDIENCE", settings.id_token_audience),
                                      ("SUNDIAL_TASKS_SERVICE_ACCOUNT", settings.tasks_service_account)) if value]
    if asked and _missing("google.auth"):
        raise SystemExit(f"sundial: {asked[0]} has Google-signed tokens checked, and google-auth is not"
                         f" installed: {INSTALL_THE_GCP_EXTRA}")
