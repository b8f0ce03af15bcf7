"""Whether the Google Cloud libraries are installed.

The package installs them only with its `gcp` extra, so that the SQLite backend runs in
an environment without grpc, protobuf and the Google clients. Asking for the cloud
backend without them is then a one-line error that says what to install, not a
traceback from deep inside an adapter's imports.
"""

from __future__ import annotations

import importlib.util

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
