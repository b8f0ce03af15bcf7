"""The one composition root: picks the adapters and wires the engine, the app and
the background loops of `serve`."""

from __future__ import annotations

import logging
import secrets
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Callable

from config.importer import import_directory
from config.settings import Settings
from engine.adapters.local.dispatcher import Dispatcher
from engine.adapters.local.sqlite_queue import SqliteTaskQueue
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.logs import log_event
from engine.service import Engine
from engine.targets import build_targets
from statemachine.durations import UTC
from web.app import create_app

log = logging.getLogger("sundial.serve")


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


@dataclass
class Runtime:
    settings: Settings
    engine: Engine
    dispatcher: Dispatcher
    app: object
    loops: list["PeriodicLoop"] = field(default_factory=list)

    def start(self) -> None:
        self.dispatcher.start()
        for loop in self.loops:
            loop.start()

    def stop(self) -> None:
        for loop in self.loops:
            loop.stop()
        self.dispatcher.stop()


class PeriodicLoop:
    """Runs `work` now and then every `period` on a thread, logging failures."""

    def __init__(self, name: str, period: timedelta, work: Callable[[], object]):
        self.name, self.period, self.work = name, period, work
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sundial-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.work()
            except Exception as error:  # a bad moment of storage must not end the loop
                log_event(log, f"{self.name} failed", error=repr(error))
            self._stopped.wait(self.period.total_seconds())


def build_local(settings: Settings, clock=None) -> Runtime:
    """The embedded backend: SQLite store and queue, in-process dispatcher."""
    clock = clock or SystemClock()
    store = SqliteJobStore(settings.db_path)
    if not settings.task_secret:
        settings = replace(settings, task_secret=store.shared_secret(lambda: secrets.token_urlsafe(32)))
    engine = Engine(
        store,
        build_targets("local"),
        clock,
        settings.tuning,
        service_url=settings.service_url,
        secret=settings.task_secret.encode(),
    )
    queue = SqliteTaskQueue(store)
    dispatcher = Dispatcher(queue, engine.handle_task, clock, settings.workers, settings.task_lease)
    cron = {
        "watchdog": engine.run_watchdog,
        "import-configs": lambda: import_directory(engine, settings.config_dir, settings.backend),
        "cleanup": lambda: engine.cleanup(settings.history),
    }
    app = create_app(engine, settings, cron)
    loops = [
        PeriodicLoop("import-configs", settings.import_period, cron["import-configs"]),
        PeriodicLoop("watchdog", settings.watchdog_period, cron["watchdog"]),
        PeriodicLoop("cleanup", settings.cleanup_period, cron["cleanup"]),
    ]
    return Runtime(settings, engine, dispatcher, app, loops)
