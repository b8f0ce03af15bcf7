"""The simulated world around the engine: the jobs, the processes that run the chain's
tasks, and an operator acting at random moments."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from engine import operations
from engine.backfills import backfill_job
from engine.config_import import JobSnapshot, ProjectSnapshot
from engine.errors import StoreError
from engine.ports import JobStore, Target
from engine.service import Engine, build_engine
from sim.clock import SimClock
from statemachine.definition import JobDefinition
from statemachine.errors import SundialError
from statemachine.policy import Catchup, JobPolicy, Overlap, RetryPolicy, Tuning

PROJECT = "sim"
ACTOR = "user:operator@example.com"
# How long a task handed to a process is its own: Cloud Tasks' dispatch deadline.
DISPATCH_DEADLINE = timedelta(seconds=30)
_RETRY = RetryPolicy(max_attempts=3, min_backoff=timedelta(seconds=1), max_backoff=timedelta(seconds=20))


@dataclass(frozen=True)
class SimJob:
    id: str
    every: timedelta | None  # None: triggered only
    overlap: Overlap
    catchup: Catchup = Catchup.LATEST
    max_concurrent: int = 1

    def policy(self, every: timedelta | None, revision: str) -> JobPolicy:
        return JobPolicy(schedule_text=_schedule(every), overlap=self.overlap, max_concurrent=self.max_concurrent,
                         catchup=self.catchup, catchup_window=timedelta(minutes=10),
                         timeout=timedelta(minutes=5), attempt_timeout=timedelta(seconds=20),
                         retry=_RETRY, revision=revision)


def _schedule(every: timedelta | None) -> str:
    return "triggered" if every is None else f"every {int(every.total_seconds())}s"


JOBS = (
    SimJob("skip", timedelta(minutes=1), Overlap.SKIP),
    SimJob("buffer", timedelta(seconds=30), Overlap.BUFFER_ONE, Catchup.ALL),
    SimJob("allow", timedelta(minutes=2), Overlap.ALLOW, Catchup.NONE, max_concurrent=2),
    SimJob("manual", None, Overlap.SKIP),
)


def project_snapshot(slower: bool, world: tuple[SimJob, ...] = JOBS) -> ProjectSnapshot:
    """The project's config of the jobs of `world`: as first imported, or with the
    clock-driven jobs' periods doubled (the operator's config change)."""
    revision = "slower" if slower else "base"
    jobs = []
    for job in world:
        every = job.every * 2 if slower and job.every is not None else job.every
        definition = JobDefinition(id=job.id, schedule=_schedule(every), target={"noop": {}})
        jobs.append(JobSnapshot(job.id, job.policy(every, revision), definition, False))
    return ProjectSnapshot(PROJECT, revision, jobs=tuple(jobs))


def fire_times(job: SimJob, start: datetime, end: datetime) -> list[datetime]:
    """The base config's fire times of `job` in [start, end): `every` is aligned to the epoch."""
    if job.every is None:
        return []
    period = job.every.total_seconds()
    first = -(-start.timestamp() // period) * period
    times, at = [], datetime.fromtimestamp(first, start.tzinfo)
    while at < end:
        times.append(at)
        at += job.every
    return times


class Process:
    """One process running the engine: dies and restarts with nothing of its memory."""

    def __init__(self, name: str, store: JobStore, target: Target, clock: SimClock):
        self.name, self.store, self.target, self.clock = name, store, target, clock
        self.restarts = 0
        self.engine = self._build()

    def _build(self) -> Engine:
        return build_engine(self.store, {"noop": self.target}, self.clock, Tuning(), secret=b"sim",
                            task_lease=DISPATCH_DEADLINE, sleep=self.clock.sleep, monotonic=self.clock.monotonic)

    def restart(self) -> None:
        self.restarts += 1
        self.engine = self._build()


OPERATIONS = ("pause", "resume", "trigger", "abort", "reimport", "backfill")


def operate(engine: Engine, rng: random.Random, slower: bool, world: tuple[SimJob, ...] = JOBS) -> tuple[str, bool]:
    """One operator action on a random job of `world`; returns what it was and the config it
    leaves (slower or not). A refusal or a storage failure is the operator's problem.

    :raises SimCrash: the process serving the request died.
    """
    action, job = rng.choice(OPERATIONS), rng.choice(world).id
    try:
        if action == "pause":
            operations.pause(engine, PROJECT, job, "sim", actor=ACTOR)
        elif action == "resume":
            operations.resume(engine, PROJECT, job, actor=ACTOR)
        elif action == "trigger":
            operations.trigger(engine, PROJECT, job, request_id=f"r{rng.getrandbits(32):08x}", actor=ACTOR)
        elif action == "abort":
            operations.abort(engine, PROJECT, job, actor=ACTOR)
        elif action == "backfill":
            end = engine.clock.now() - timedelta(minutes=rng.randint(0, 30))
            backfill_job(engine, PROJECT, job, end - timedelta(minutes=3), end,
                         request_id=f"b{rng.getrandbits(32):08x}", actor=ACTOR)
        else:  # the file edited either way, or saved again unchanged
            slower = rng.random() < 0.5
            engine.configs.import_project(project_snapshot(slower, world))
    except (SundialError, StoreError) as refused:
        return f"{action} {job}: {type(refused).__name__}", slower
    return f"{action} {job}", slower
