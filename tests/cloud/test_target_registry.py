"""Which pubsub and cloud_tasks targets each backend gets (engine/targets/__init__.py)."""

from __future__ import annotations

from app.bootstrap import google_access
from config.settings import from_environment
from engine.targets import UnavailableTarget
from engine.targets import build_targets as build
from engine.targets.cloud_tasks import CloudTasksTarget
from engine.targets.pubsub import PubSubTarget


def build_targets(backend: str, env: dict):
    """The targets as `serve` builds them in an environment like `env`."""
    return build(backend, google=google_access(from_environment(env)))


def kinds(targets) -> dict[str, str]:
    return {kind: type(targets[kind]).__name__ for kind in ("pubsub", "cloud_tasks")}


def test_the_cloud_backend_always_has_both(tmp_path):
    assert kinds(build_targets("cloud", env={"HOME": str(tmp_path)})) == {
        "pubsub": "PubSubTarget", "cloud_tasks": "CloudTasksTarget"}


def test_the_embedded_backend_without_emulators_or_credentials_says_unavailable(tmp_path):
    targets = build_targets("local", env={"HOME": str(tmp_path)})
    assert isinstance(targets["pubsub"], UnavailableTarget)
    assert isinstance(targets["cloud_tasks"], UnavailableTarget)


def test_the_embedded_backend_uses_an_emulator_when_one_is_configured(tmp_path):
    env = {"HOME": str(tmp_path), "PUBSUB_EMULATOR_HOST": "127.0.0.1:8085"}
    assert kinds(build_targets("local", env=env)) == {"pubsub": "PubSubTarget", "cloud_tasks": "UnavailableTarget"}
    env = {"HOME": str(tmp_path), "SUNDIAL_TASKS_EMULATOR_HOST": "127.0.0.1:9022"}
    assert kinds(build_targets("local", env=env)) == {"pubsub": "UnavailableTarget", "cloud_tasks": "CloudTasksTarget"}


def test_the_embedded_backend_uses_google_credentials_when_configured(tmp_path):
    env = {"HOME": str(tmp_path), "GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "key.json")}
    assert kinds(build_targets("local", env=env)) == {"pubsub": "PubSubTarget", "cloud_tasks": "CloudTasksTarget"}
    adc = tmp_path / ".config" / "gcloud" / "application_default_credentials.json"
    adc.parent.mkdir(parents=True)
    adc.write_text("{}")
    targets = build_targets("local", env={"HOME": str(tmp_path)})
    assert isinstance(targets["pubsub"], PubSubTarget) and isinstance(targets["cloud_tasks"], CloudTasksTarget)


def test_building_the_targets_connects_to_nothing(tmp_path):
    # The clients are made on the first delivery, so a registry costs no network.
    targets = build_targets("cloud", env={"HOME": str(tmp_path)})
    assert targets["pubsub"]._publisher is None and targets["cloud_tasks"]._client is None
