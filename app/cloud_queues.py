"""The Cloud Tasks queues the cloud backend needs, as the composition root sets them up:
the form of the chain's tasks, the chain's queues (the first shard at start, the others
in the background), one queue per project throttle kept after each import, and the
`queues` command's provisioning for an operator whose service may not manage queues."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Callable, Iterable

from config.settings import Settings
from engine.logs import log_event
from engine.ports import JobStore, ProjectRow

if TYPE_CHECKING:  # the cloud libraries load only on the cloud backend
    from google.cloud.tasks_v2 import CloudTasksClient

    from engine.adapters.cloud.cloud_tasks_queue import AppEngineTarget, QueueSpec

log = logging.getLogger("sundial.serve")


def chain_task_target(settings: Settings) -> AppEngineTarget | None:
    """The form of the chain's tasks, chosen once: on App Engine (or with
    SUNDIAL_TASKS_TARGET=appengine) App Engine tasks routed to this service, which stay
    inside Google, so IAP and the App Engine firewall never stop them; else None, HTTP
    tasks to the service URL."""
    from engine.adapters.cloud.cloud_tasks_queue import AppEngineTarget

    return AppEngineTarget(settings.app_engine_service) if settings.app_engine_tasks else None


def provision_task_queues(project: str, location: str, queue: str, emulator_host: str | None = None,
                          throttles: dict[str, int] | None = None, shards: int = 1) -> list[tuple[str, str]]:
    """Create or update the queues Sundial needs (the `queues` command): the chain's
    `shards` queues, and one per throttle ("PROJECT/THROTTLE" -> max_in_flight)."""
    from engine.adapters.cloud import cloud_tasks_queue as cloud_tasks

    specs = cloud_tasks.chain_specs(queue, shards) + cloud_tasks.throttle_specs(queue, throttles or {})
    return cloud_tasks.provision_queues(cloud_tasks.build_tasks_client(emulator_host), project, location, specs)


def project_throttles(rows: Iterable[ProjectRow]) -> dict[str, int]:
    """"PROJECT/THROTTLE" -> max_in_flight of every throttle of the given project rows."""
    return {
        f"{row.id}/{name}": limit
        for row in rows for name, limit in (row.settings.get("throttles") or {}).items()
    }


def throttle_queue_keeper(tasks: CloudTasksClient, settings: Settings, store: JobStore) -> Callable[[], None]:
    """After each import: create (or resize) the queue of each throttle not yet seen
    with its current limit. Without the permission, `main.py queues` does it."""
    from engine.adapters.cloud.cloud_tasks_queue import ensure_queue, throttle_specs

    ensured: dict[str, int] = {}

    def keep() -> None:
        for queue, limit in project_throttles(store.list_projects()).items():
            if ensured.get(queue) == limit:
                continue
            spec = throttle_specs(settings.tasks_queue, {queue: limit})[0]
            try:
                ensure_queue(tasks, settings.gcp_project, settings.tasks_location, spec)
                ensured[queue] = limit
            except Exception as error:  # e.g. no permission: logged, tried again next import
                log_event(log, "throttle queue not ensured", queue=spec.queue_id, error=repr(error),
                          hint="run `python main.py queues --configs DIR` with a role that may manage queues")

    return keep


def ensure_chain_queue(tasks: CloudTasksClient, settings: Settings) -> None:
    from engine.adapters.cloud.cloud_tasks_queue import chain_specs, ensure_queue

    def ensure(specs: list[QueueSpec]) -> None:
        try:
            for spec in specs:
                ensure_queue(tasks, settings.gcp_project, settings.tasks_location, spec, update=False)
        except Exception as error:  # no permission to create queues: an operator runs `main.py queues`
            log_event(log, "task queue not ensured", queue=settings.tasks_queue, error=repr(error),
                      hint="run `python main.py queues` with a role that may create queues")

    first, *others = chain_specs(settings.tasks_queue, settings.tasks_queue_shards)
    ensure([first])  # the other shards in the background: a new instance must not wait on one RPC each
    threading.Thread(target=ensure, args=(others,), name="sundial-ensure-shards", daemon=True).start()
