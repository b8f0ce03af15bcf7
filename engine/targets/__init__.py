"""The target registry: which Target delivers each kind of job target.

The composition root builds it once (`build_targets`) and the dispatcher picks the
target for each delivery with `target_for`.

`pubsub` and `cloud_tasks` talk to Google Cloud. On the cloud backend they are always
real: credentials come from the environment (App Engine's service account). On the
embedded backend they are real only where they can work: when the matching emulator is
configured (PUBSUB_EMULATOR_HOST, SUNDIAL_TASKS_EMULATOR_HOST) or Google credentials
are (GOOGLE_APPLICATION_CREDENTIALS, or `gcloud auth application-default login`).
Otherwise their deliveries fail at once with "target ... is not available on this
backend" rather than waiting on a credentials lookup that cannot succeed. Their modules,
and the Google libraries, are imported only when such a target is built.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from engine.ports import DeliveryRequest, Target
from engine.targets.http import HttpTarget
from engine.targets.noop import NoopTarget, UnavailableTarget
from statemachine.safety import OwnService
from statemachine.vocabulary import TargetKind

# The kinds a job target may have (CONTRACT section 2).
KINDS = tuple(TargetKind)
_EMULATOR_VARIABLES = {TargetKind.PUBSUB: "PUBSUB_EMULATOR_HOST", TargetKind.CLOUD_TASKS: "SUNDIAL_TASKS_EMULATOR_HOST"}


def build_targets(backend: str = "local", env: Mapping[str, str] | None = None,
                  own: OwnService = OwnService()) -> dict[str, Target]:
    """One instance per kind; HttpTarget holds the shared connection pool. `own` is
    Sundial's own service and chain queue, which cloud_tasks targets may not name."""
    env = os.environ if env is None else env
    return {
        TargetKind.HTTP: HttpTarget(backend=backend),
        TargetKind.NOOP: NoopTarget(),
        TargetKind.PUBSUB: _google_target(TargetKind.PUBSUB, backend, env, own),
        TargetKind.CLOUD_TASKS: _google_target(TargetKind.CLOUD_TASKS, backend, env, own),
    }


def _google_target(kind: str, backend: str, env: Mapping[str, str], own: OwnService) -> Target:
    if backend != "cloud" and not (env.get(_EMULATOR_VARIABLES[kind]) or _has_credentials(env)):
        return UnavailableTarget(kind)
    if kind == TargetKind.PUBSUB:
        from engine.targets.pubsub import PubSubTarget

        return PubSubTarget()
    from engine.targets.cloud_tasks import CloudTasksTarget

    return CloudTasksTarget(own=own)


def _has_credentials(env: Mapping[str, str]) -> bool:
    """Whether Application Default Credentials are configured on this machine. Only the
    two places a developer puts them are checked: asking the metadata server would stall
    every start of an embedded server that runs off Google Cloud."""
    if env.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return True
    config = env.get("CLOUDSDK_CONFIG") or str(Path(env.get("HOME", "~")).expanduser() / ".config" / "gcloud")
    return (Path(config) / "application_default_credentials.json").is_file()


def target_kind(target: dict) -> str:
    """The kind of a `{kind: {...}}` target definition ("" if it is not one)."""
    return next(iter(target)) if isinstance(target, dict) and len(target) == 1 else ""


def target_for(targets: dict[str, Target], request: DeliveryRequest) -> Target:
    """The target that delivers `request`; an unknown kind gets one that fails clearly."""
    kind = target_kind(request.target)
    return targets.get(kind) or UnavailableTarget(kind or "of unknown kind")


__all__ = [
    "KINDS",
    "HttpTarget",
    "NoopTarget",
    "UnavailableTarget",
    "build_targets",
    "target_for",
    "target_kind",
]
