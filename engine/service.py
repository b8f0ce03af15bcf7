"""The engine: its parts, each with one job, built together by `build_engine`.

- `changes` (engine/changes.py): the unit of work; every change to a job is
  load -> step -> save + enqueue in one transaction.
- `deliveries` (engine/deliveries.py): sends attempts already committed as starting
  (write before any external call), and what a delivery needs besides the job.
- `tasks` (engine/tasks.py): runs the chain's tasks, one or many at a time.
- `maintenance` (engine/maintenance.py): the watchdog and the history clean-up.
- `interruptions` (engine/interruptions.py): settles the attempts of processes that
  are gone; None where the backend's tasks settle them (Cloud Tasks).
- `queries` (engine/queries.py): the read side the API, the UI and /metrics use.
- `configs` (engine/config_import.py): applies a project file's snapshot.
- `meta`: small values beside the jobs (the web UI's sign-out generations).
- `metrics`: the counters every part adds to.
- `inbox` (engine/inbox.py): triggers appended as rows of their own, folded into
  the job's record by its `inbox` task; `writers` (engine/writers.py): how many of
  this process's requests may write one job's record at once.

The use cases of the API (engine/operations.py) take the whole `Engine`; every other
module takes only the parts it uses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable

from engine.cancels import Cancels
from engine.changes import JobChanges
from engine.config_import import ConfigImport
from engine.deliveries import Deliveries
from engine.delivery import Staging
from engine.holds import AttemptCanceller, AttemptHolds
from engine.inbox import Inbox
from engine.interruptions import Interruptions
from engine.leases import Monotonic
from engine.maintenance import Maintenance
from engine.metrics import Metrics
from engine.notify import Notifications
from engine.ports import Clock, JobStore, MetaStore, SecretReader, Target
from engine.queries import Queries
from engine.staged import StagedChecks
from engine.staging_ports import JobsReader, OneByOne
from engine.tasks import TaskRunner
from engine.writers import DEFAULT_JOB_WRITERS, JobWriters
from statemachine.policy import DEFAULT_TUNING, Tuning


@dataclass(frozen=True)
class Engine:
    changes: JobChanges
    deliveries: Deliveries
    tasks: TaskRunner
    maintenance: Maintenance
    queries: Queries
    configs: ConfigImport
    meta: MetaStore
    metrics: Metrics
    clock: Clock
    inbox: Inbox
    writers: JobWriters
    interruptions: Interruptions | None = None


def build_engine(store: JobStore, targets: dict[str, Target], clock: Clock, tuning: Tuning = DEFAULT_TUNING, *,
                 service_url: str = "http://127.0.0.1:8080", secret: bytes = b"",
                 secrets: SecretReader | None = None, metrics: Metrics | None = None,
                 holds: AttemptHolds | None = None, canceller: AttemptCanceller | None = None,
                 repair_workers: int = 1,
                 task_lease: timedelta | None = None, defer_finishes: bool | None = None,
                 staging: Staging | None = None, jobs: JobsReader | None = None,
                 sleep: Callable[[float], None] = time.sleep, monotonic: Monotonic = time.monotonic,
                 job_writers: int = DEFAULT_JOB_WRITERS) -> Engine:
    """The engine over one store and one set of targets.

    `service_url` is where async targets send their completion; `secret` keys the
    completion tokens; `secrets` reads the values header fields name (None: no store);
    `metrics` is where the parts count (a fresh one by default); `holds` records which
    process holds each attempt in flight (None: the backend's tasks hold them);
    `canceller` closes this process's attempts of an invocation it aborts (None: none);
    `repair_workers` is how many watchdog repairs run at once (engine/maintenance.py);
    `task_lease` how long a task handed to `TaskRunner.handle` is its handler's;
    `defer_finishes` overrides the store's choice of leaving finishes to their rows
    (engine/deferred_finish.py; tests of that mechanism on SQLite set it).
    Where the tuning stages (`Tuning.stages`): `staging` the targets that can make a
    request ready ahead of its time, by kind; `jobs` the store's read of many jobs at
    once (by default one read per job); `sleep` how the wait for a request's time passes.
    `monotonic`: the clock the leases of tasks and attempts are counted on (engine/leases.py).
    `job_writers`: the API requests of this process that may write one job's record at once.
    """
    metrics = metrics if metrics is not None else Metrics()
    changes = JobChanges(store, clock, metrics, tuning, holds, defer_finishes, canceller)
    interruptions = Interruptions(changes, holds, metrics) if holds is not None else None
    deliveries = Deliveries(store, targets, clock, metrics, service_url=service_url, secret=secret,
                            secrets=secrets, staging=staging)
    staged = StagedChecks(jobs or OneByOne(store), changes.write, holds, sleep) if tuning.stages else None
    notifications = Notifications(changes.write, store.get_job, clock, deliveries.send_notification)
    inbox = Inbox(changes)
    cancels = Cancels(store.get_job, changes.write, clock, deliveries.send_cancel, deliveries.service_host)
    return Engine(
        changes=changes,
        deliveries=deliveries,
        tasks=TaskRunner(changes, deliveries, notifications.run_task, task_lease, staged, monotonic, inbox,
                         cancels.run_task),
        maintenance=Maintenance(store, changes, clock, metrics, interruptions, repair_workers),
        queries=Queries(store, clock, tuning),
        configs=ConfigImport(changes, store),
        meta=store,
        metrics=metrics,
        clock=clock,
        inbox=inbox,
        writers=JobWriters(job_writers),
        interruptions=interruptions,
    )
