"""The target registry: which Target delivers each kind of job target.

The composition root builds it once (`build_targets`, one sender per kind from its
factory in `SENDERS`) and the dispatcher picks the target for each delivery with
`target_for`.

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

from dataclasses import dataclass
from typing import Callable, Mapping

from engine.ports import DeliveryRequest, Target
from engine.staging_ports import StagingTarget
from engine.targets.google_tokens import DEFAULT_IAM_URL, DEFAULT_METADATA_HOST, TokenMinter
from engine.targets.http import HttpTarget
from engine.targets.in_flight import InFlight
from engine.targets.noop import NoopTarget, UnavailableTarget
from statemachine.safety import OwnService
from statemachine.vocabulary import TargetKind

# The kinds a job target may have (docs/REFERENCE.md section 2).
KINDS = tuple(TargetKind)


@dataclass(frozen=True)
class GoogleAccess:
    """What this machine has for the Google targets: emulators (host:port), and whether
    Application Default Credentials are set up (config.settings decides from the
    environment)."""

    pubsub_emulator: str = ""
    tasks_emulator: str = ""
    credentials: bool = False
    # For `auth` targets (google_tokens.py): where the metadata server and IAM Credentials
    # are, and the Application Default Credentials file used off Google Cloud.
    metadata_host: str = DEFAULT_METADATA_HOST
    iam_url: str = DEFAULT_IAM_URL
    credentials_file: str = ""

    def reaches(self, kind: str) -> bool:
        emulator = self.pubsub_emulator if kind == TargetKind.PUBSUB else self.tasks_emulator
        return bool(emulator) or self.credentials


def _http(backend: str, own: OwnService, google: GoogleAccess) -> Target:
    return HttpTarget(backend=backend, minter=TokenMinter(
        google.metadata_host, google.iam_url, google.credentials_file, own=own))


def _noop(backend: str, own: OwnService, google: GoogleAccess) -> Target:
    return NoopTarget()


def _pubsub(backend: str, own: OwnService, google: GoogleAccess) -> Target:
    if backend != "cloud" and not google.reaches(TargetKind.PUBSUB):
        return UnavailableTarget(TargetKind.PUBSUB)
    from engine.targets.pubsub import PubSubTarget

    return PubSubTarget()


def _cloud_tasks(backend: str, own: OwnService, google: GoogleAccess) -> Target:
    if backend != "cloud" and not google.reaches(TargetKind.CLOUD_TASKS):
        return UnavailableTarget(TargetKind.CLOUD_TASKS)
    from engine.targets.cloud_tasks import CloudTasksTarget

    return CloudTasksTarget(own=own, emulator_host=google.tasks_emulator)


# Each kind's sender, built from the backend, Sundial's own service and the Google access.
SENDERS: dict[TargetKind, Callable[[str, OwnService, GoogleAccess], Target]] = {
    TargetKind.HTTP: _http,
    TargetKind.PUBSUB: _pubsub,
    TargetKind.CLOUD_TASKS: _cloud_tasks,
    TargetKind.NOOP: _noop,
}


def build_targets(backend: str = "local", own: OwnService = OwnService(),
                  google: GoogleAccess = GoogleAccess()) -> dict[str, Target]:
    """One instance per kind; HttpTarget holds the shared connection pool. `own` is
    Sundial's own service and chain queue, which cloud_tasks targets may not name, and
    the identities each project's `auth` may borrow (http and cloud_tasks alike)."""
    return {kind: SENDERS[kind](backend, own, google) for kind in TargetKind}


def staging_targets(targets: dict[str, Target]) -> dict[str, StagingTarget]:
    """The targets that can make a request ready ahead of its time (StagingTarget), by
    kind: the HTTP target, on the embedded backend, where occurrences are staged."""
    return {kind: target for kind, target in targets.items() if isinstance(target, HttpTarget)}


def attempt_connections(targets: dict[str, Target]) -> InFlight | None:
    """What closes the HTTP requests this process has on the wire for an aborted
    invocation (engine/holds.py's `AttemptCanceller`); None without an HTTP target."""
    http = next((target for target in targets.values() if isinstance(target, HttpTarget)), None)
    return http.pool.in_flight if http is not None else None


def target_kind(target: Mapping[str, object]) -> str:
    """The kind of a `{kind: {...}}` target definition ("" if it is not one)."""
    return next(iter(target)) if isinstance(target, dict) and len(target) == 1 else ""


def target_for(targets: dict[str, Target], request: DeliveryRequest) -> Target:
    """The target that delivers `request`; an unknown kind gets one that fails clearly."""
    kind = target_kind(request.target)
    return targets.get(kind) or UnavailableTarget(kind or "of unknown kind")


__all__ = [
    "KINDS",
    "SENDERS",
    "GoogleAccess",
    "HttpTarget",
    "NoopTarget",
    "UnavailableTarget",
    "attempt_connections",
    "build_targets",
    "target_for",
    "target_kind",
]
