"""The one composition root: picks the adapters and wires the engine, the app and
the background loops of `serve`."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field, replace
from datetime import timedelta
from enum import Enum
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from flask import Flask

from app.cloud_libraries import require_cloud_libraries, require_google_auth
from app.cloud_queues import chain_task_target, ensure_chain_queue, throttle_queue_keeper
from app.importer import directory_import
from app.loops import PeriodicLoop
from app.processes import DispatcherProcesses
from app.stopping import StopTimes
from config.settings import Settings
from engine.aborted_attempts import CHECK_PERIOD, AbortedAttempts
from engine.adapters.local.dispatcher import Dispatcher, Wakeup
from engine.adapters.local.early_ticks import local_tuning
from engine.adapters.local.integrity import backup_database as backup_database  # for cli/backup.py
from engine.adapters.local.integrity import refuse_damaged_database
from engine.adapters.local.liveness import ProcessRegistry, SqliteAttemptHolds, this_process
from engine.adapters.local.readiness import PROBE_PERIOD, Readiness, StorageHealth, write_probe
from engine.adapters.local.sqlite_queue import SqliteTaskQueue
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.adapters.local.staged_sends import StagingParts
from engine.adapters.local.tuning import LocalTuning
from engine.clock import SystemClock
from engine.delivery import Staging
from engine.holds import AttemptCanceller, AttemptHolds
from engine.interruptions import Interruptions
from engine.logs import log_event
from engine.metrics import Metrics
from engine.ports import Clock, JobStore, SecretReader, Target
from engine.service import Engine, build_engine
from engine.staging_ports import JobsReader
from engine.targets import GoogleAccess, attempt_connections, build_targets, staging_targets
from web.app import create_app, gatekeepers_from_settings

if TYPE_CHECKING:  # the cloud libraries load only on the cloud backend
    pass


log = logging.getLogger("sundial.serve")
# How often `serve` on the cloud backend creates again the Cloud Tasks tasks whose creation
# failed, or asks whether the queue answers (engine/adapters/cloud/queue_watch.py): a chain
# an outage broke goes on within a second or two of the queue's return, not at the
# watchdog's next run past the tick grace.
REQUEUE_PERIOD = timedelta(seconds=1)
HEARTBEAT_RETRY = timedelta(seconds=1)


class Role(Enum):
    """What a process of `serve` does."""

    SERVER = "server"  # the API, the UI, the periodic loops and a dispatcher (and its children)
    DISPATCHER = "dispatcher"  # only a dispatcher: a child of `serve --processes N`


@dataclass
class Runtime:
    settings: Settings
    engine: Engine
    dispatcher: Dispatcher | None  # None on the cloud backend: Cloud Tasks dispatches
    app: Flask | None  # None in a dispatcher-only process
    loops: list["PeriodicLoop"] = field(default_factory=list)
    children: DispatcherProcesses | None = None  # the extra dispatchers of --processes N
    liveness: Liveness | None = None  # None on the cloud backend: Cloud Tasks retries settle attempts
    _stop_times: StopTimes | None = None  # set by begin_stop

    def start(self) -> None:
        if self.liveness is not None:  # first: it settles what gone processes held
            self.liveness.start()
        if self.dispatcher is not None:
            self.dispatcher.start()
        for loop in self.loops:
            loop.start()
        if self.children is not None:
            self.children.start()

    def begin_stop(self) -> None:
        """The stop's first instant, from a signal handler (it takes no lock): the embedded
        dispatcher sends nothing new from now on, the children are told, and the grace
        counts from now. (On the cloud backend a task request under way finishes; Cloud
        Tasks sends no more.)"""
        if self._stop_times is not None:
            return  # (begun by the signal's handler, and now stop() calls it)
        self._stop_times = StopTimes.starting_now(self.settings.stop_grace)
        if self.dispatcher is not None:
            self.engine.tasks.stop_sending()
        if self.children is not None:  # only the parent has the signal from `docker stop`
            self.children.signal_stop()

    @property
    def stop_times(self) -> StopTimes | None:
        """The instants of the stop under way (None before `begin_stop`)."""
        return self._stop_times

    def stop(self) -> None:
        """Stop within `settings.stop_grace` of `begin_stop` (or now; docs/REFERENCE.md
        section 4.2): nothing new is sent from the first instant; the requests on the wire
        get until StopTimes.answers_by to answer; the children stop at the same time (each
        within its own grace, killed if it overruns); last, this process leaves the registry."""
        self.begin_stop()
        times = self._stop_times
        assert times is not None  # (begin_stop set it)
        for loop in self.loops:
            loop.halt()
        if self.dispatcher is not None:
            self.dispatcher.stop(times.answers_by)
        for loop in self.loops:
            loop.stop(times.answers_by)  # (storage work only: one still going at exit has its transaction undone)
        if self.children is not None:
            self.children.wait(times.exit_by)
        if self.liveness is not None:
            self.liveness.stop(times.exit_by)


class Liveness:
    """This process in its database's process registry (engine/adapters/local/liveness.py).

    The first heartbeat, in `start()`, registers it and settles the attempts held by
    processes that are gone (engine/interruptions.py) before the dispatcher takes any
    task: an attempt left in flight by a killed process must not hold its job into
    the restart. Then every period: a heartbeat, and the same settling, so that a
    process that dies beside this one has its attempts settled within a few periods
    (at once, when its pid is dead). `stop()` deregisters it.
    """

    def __init__(self, registry: ProcessRegistry, interruptions: Interruptions | None, period: timedelta):
        self.registry, self.interruptions = registry, interruptions
        # A beat that failed (storage) is tried again within a second: the first one to
        # succeed after the fault settles what this process could not let out meanwhile.
        self.loop = PeriodicLoop("heartbeat", period, self.beat, first_in_start=True,
                                 after_failure=HEARTBEAT_RETRY)

    def beat(self) -> None:
        self.registry.heartbeat()
        if self.interruptions is not None:
            self.interruptions.settle()

    def start(self) -> None:
        self.loop.start()

    def stop(self, until: float | None = None) -> None:
        self.loop.stop(until)
        try:
            self.registry.deregister()
        except Exception as error:  # its holds are settled by the next process to look anyway
            log_event(log, "deregistering failed", error=repr(error))


def build(settings: Settings, clock: Clock | None = None, *, children: bool = False) -> Runtime:
    """The runtime of the backend the settings name; `children`: with the extra
    dispatcher processes of `serve --processes N` (only `serve` starts them)."""
    require_google_auth(settings)  # before anything is created
    if settings.backend == "cloud":
        return build_cloud(settings, clock)
    return build_local(settings, clock, children=children)


def build_local(settings: Settings, clock: Clock | None = None, role: Role = Role.SERVER, *,
                children: bool = False) -> Runtime:
    """The embedded backend: SQLite store and queue, in-process dispatcher; with
    `children`, a server gets settings.processes - 1 dispatcher-only processes beside it."""
    clock = clock or SystemClock()
    if role is Role.SERVER:  # (a child starts once its server has checked the file)
        refuse_damaged_database(settings.db_path)
    wakeup = Wakeup()  # the dispatcher's, woken by this process's commits of earlier tasks
    extra: DispatcherProcesses | None = None
    # /metrics in the server counts what its children did too (their snapshots).
    metrics = Metrics(other_processes=[lambda: extra.snapshots() if extra is not None else []])
    health = StorageHealth(metrics)
    store = SqliteJobStore(settings.db_path, on_enqueue=wakeup.task_enqueued, health=health)
    settings = _with_secret(settings, store.shared_secret)
    extra = _children(settings) if role is Role.SERVER and children else None
    targets = build_targets("local", settings.own_service, google_access(settings))
    registry = ProcessRegistry(store, this_process(), clock, settings.heartbeat.timeout, role.value)
    tuning = LocalTuning()  # the embedded path's knobs (engine/adapters/local/tuning.py)
    canceller = attempt_connections(targets)
    engine = _engine(replace(settings, tuning=local_tuning(settings.tuning, tuning)), store, targets, clock, metrics,
                     SqliteAttemptHolds(store, registry, tuning), staging_targets(targets), jobs=store,
                     canceller=canceller)
    # Every process closes its requests of invocations another process aborted (--processes N).
    aborted = [PeriodicLoop("aborted-attempts", CHECK_PERIOD, AbortedAttempts(store, canceller).check)
               ] if canceller is not None else []
    liveness = Liveness(registry, engine.interruptions, settings.heartbeat.period)
    queue = SqliteTaskQueue(store)
    staging = StagingParts(clock, engine.deliveries.batch_writer, engine.changes.holds, store.records.written_text)
    dispatcher = Dispatcher(queue, engine.tasks, clock, wakeup, settings.workers, settings.task_lease,
                            metrics=engine.metrics, version=queue.version, share=registry.share, staging=staging,
                            tuning=tuning)
    if role is Role.DISPATCHER:
        return Runtime(settings, engine, dispatcher, app=None, loops=aborted, liveness=liveness)
    readiness = Readiness(health, dispatcher.seconds_since_round)
    runtime = _runtime(settings, engine, dispatcher, loops=True, queue_depth=queue.pending, children=extra,
                       liveness=liveness, readiness=readiness.report)
    probe = partial(write_probe, settings.db_path, health, store.write_lock)
    runtime.loops.append(PeriodicLoop("storage-probe", timedelta(seconds=PROBE_PERIOD), probe, first_in_start=True))
    runtime.loops += aborted
    return runtime


def _children(settings: Settings) -> DispatcherProcesses | None:
    """The extra dispatcher processes of --processes N (on the embedded backend only: on
    the cloud backend Cloud Tasks spreads the work)."""
    return DispatcherProcesses(settings, settings.processes - 1) if settings.processes > 1 else None


def build_cloud(settings: Settings, clock: Clock | None = None) -> Runtime:
    """Cloud Datastore and Cloud Tasks (real, or their emulators).

    On App Engine, cron.yaml calls the periodic work; elsewhere `serve` runs it.
    """
    require_cloud_libraries("SUNDIAL_BACKEND=cloud")
    from engine.adapters.cloud.cloud_tasks_queue import CloudTasksQueue, build_tasks_client
    from engine.adapters.cloud.datastore_calls import read_shared_secret
    from engine.adapters.cloud.datastore_store import DatastoreJobStore
    from engine.adapters.cloud.queue_watch import QueueWatch

    if not settings.gcp_project:
        raise SystemExit("SUNDIAL_BACKEND=cloud needs GOOGLE_CLOUD_PROJECT")
    clock = clock or SystemClock()
    tasks = build_tasks_client(settings.tasks_emulator_host or None)
    client = _ndb_client(settings)
    # The queue puts the shared secret on every task, so it is read before the queue is built.
    settings = _with_secret(settings, lambda generate: read_shared_secret(client, generate))
    queue = CloudTasksQueue(
        tasks, settings.gcp_project, settings.tasks_location, settings.tasks_queue,
        settings.service_url, settings.task_secret, settings.tasks_service_account,
        clock=clock, copies=2 if settings.fault_duplicate_tasks else 1,
        app_engine=chain_task_target(settings), shards=settings.tasks_queue_shards,
    )
    store = DatastoreJobStore(client, queue)
    ensure_chain_queue(tasks, settings)
    engine = _engine(settings, store, build_targets("cloud", settings.own_service, google_access(settings)), clock)
    runtime = _runtime(settings, engine, None, loops=not settings.on_app_engine,
                       after_import=throttle_queue_keeper(tasks, settings, store))
    if not settings.on_app_engine:  # (there, a failed enqueue's chain waits for cron's watchdog)
        watch = QueueWatch(queue, lambda: engine.maintenance.run_watchdog(settings.maintenance_budget, queue_lost=True))
        runtime.loops.append(PeriodicLoop("requeue", REQUEUE_PERIOD, watch.check))
    return runtime


def wsgi_app() -> Flask:
    """The app gunicorn serves on App Engine (`main:app`), with the backend from the environment."""
    from config.settings import from_environment
    from engine.logs import log_everything_as_json

    settings = from_environment()
    log_everything_as_json(settings.log_level)
    runtime = build(settings)
    assert runtime.app is not None  # a server's runtime: only a dispatcher-only child has none
    runtime.start()
    return runtime.app


def _ndb_client(settings: Settings) -> Any:  # an ndb.Client (Any: ndb has no type information)
    # Not `from google.cloud import ndb`: mypy then looks for `ndb` in the typed
    # google.cloud namespace (from google-cloud-tasks) and does not find it.
    import google.cloud.ndb as ndb

    if settings.datastore_emulator_host:
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]  # unannotated in google-auth
        return ndb.Client(project=settings.gcp_project, credentials=credentials)
    return ndb.Client(project=settings.gcp_project)


def _with_secret(settings: Settings, shared_secret: Callable[[Callable[[], str]], str]) -> Settings:
    """The settings with the task secret: the configured one, else the one every process
    on the store shares (`shared_secret(generate)` makes it the first time)."""
    if settings.task_secret:
        return settings
    return replace(settings, task_secret=shared_secret(lambda: secrets.token_urlsafe(32)))


def _engine(settings: Settings, store: JobStore, targets: dict[str, Target], clock: Clock,
            metrics: Metrics | None = None, holds: AttemptHolds | None = None,
            staging: Staging | None = None, jobs: JobsReader | None = None,
            canceller: AttemptCanceller | None = None) -> Engine:
    return build_engine(
        store, targets, clock, settings.tuning, metrics=metrics,
        service_url=settings.service_url, secret=settings.task_secret.encode(), secrets=_secrets(settings),
        holds=holds, repair_workers=settings.watchdog_workers or (8 if settings.backend == "cloud" else 1),
        task_lease=_task_lease(settings), staging=staging, jobs=jobs, canceller=canceller,
    )


def _task_lease(settings: Settings) -> timedelta:
    """How long a task handed to the engine's handler is its handler's: a Cloud Tasks
    request's dispatch deadline (the queue runs it again after that), or the embedded
    queue's lease."""
    if settings.backend != "cloud":
        return settings.task_lease
    from engine.adapters.cloud.cloud_tasks_queue import DISPATCH_DEADLINE

    return DISPATCH_DEADLINE


def google_access(settings: Settings) -> GoogleAccess:
    """What this machine has for the Google targets, as the settings found it."""
    return GoogleAccess(settings.pubsub_emulator_host, settings.tasks_emulator_host, settings.google_credentials,
                        settings.metadata_host, settings.iam_credentials_url, settings.credentials_file)


def _secrets(settings: Settings) -> SecretReader:
    """Secret Manager on the cloud backend (unless SUNDIAL_SECRETS=local), else the
    per-project folders of SUNDIAL_SECRETS_DIR (engine/secrets.py)."""
    from engine.secrets import LocalSecrets

    if settings.backend == "cloud" and settings.secrets_source != "local":
        from engine.adapters.cloud.secret_manager import SecretManagerSecrets

        return SecretManagerSecrets(settings.gcp_project, base_url=settings.secret_manager_url)
    return LocalSecrets(settings.secrets_dir)


def _minute_maintenance(engine: Engine, settings: Settings) -> Callable[[], int]:
    """The watchdog's cron run: its repairs, then a bite of the history clean-up in what
    is left of the same budget. cron.yaml calls it every minute (and the clean-up by
    itself once a day), so history leaves as steadily as it comes: 10,000 jobs running
    every minute write 14.4 M rows a day (docs/ARCHITECTURE.md, "Housekeeping")."""
    def run() -> int:
        started, budget = engine.clock.now(), settings.maintenance_budget
        repaired = engine.maintenance.run_watchdog(budget)
        left = budget - (engine.clock.now() - started)
        if left > timedelta(0):
            try:
                engine.maintenance.cleanup(settings.history, left)
            except Exception as error:  # the repairs stand; the next minute's bite goes on
                log_event(log, "clean-up after the watchdog failed", error=repr(error))
        return repaired

    return run


def _runtime(settings: Settings, engine: Engine, dispatcher: Dispatcher | None, loops: bool,
             queue_depth: Callable[[], int] | None = None, after_import: Callable[[], None] | None = None,
             children: DispatcherProcesses | None = None, liveness: Liveness | None = None,
             readiness: Callable[[], tuple[bool, dict[str, Any]]] | None = None) -> Runtime:
    # Files are read again only when their stat changed (app/file_signatures.py).
    import_configs = directory_import(engine.configs, settings.config_dir, settings.backend, settings.own_service,
                                      after=after_import)
    budget = settings.maintenance_budget
    cron = {
        "watchdog": _minute_maintenance(engine, settings),
        "import-configs": import_configs,
        "cleanup": lambda: engine.maintenance.cleanup(settings.history, budget),
    }
    app = create_app(engine, settings, cron, queue_depth, gatekeepers_from_settings(settings), readiness)
    periodic = [
        PeriodicLoop("import-configs", settings.import_period, cron["import-configs"], first_in_start=True),
        PeriodicLoop("watchdog", settings.watchdog_period, lambda: engine.maintenance.run_watchdog(budget)),
        PeriodicLoop("cleanup", settings.cleanup_period, cron["cleanup"]),
    ]
    return Runtime(settings, engine, dispatcher, app, periodic if loops else [], children, liveness)
