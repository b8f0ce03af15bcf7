"""The loop of a simulation: one step at a time, each drawn from one seeded random
generator, the invariants checked after each, a digest of the trace at the end.

A step is one of: an operator action, an async target's completion report, a watchdog
run, one task delivered to a process, or the clock moved on to the next thing due.
Faults run for `Settings.faulty`; then a quiet period without faults or operator
actions must bring every invocation to its end (liveness).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Callable

from engine import operations
from engine.adapters.memory import MemoryTables
from engine.errors import StoreError
from engine.ports import RetryTask, Task
from sim.clock import SimClock
from sim.invariants import Invariants, Violation
from sim.ports import Fault, FaultMix, FaultyStore, SimCrash, SimQueue, SimTarget, pick
from sim.world import DISPATCH_DEADLINE, JOBS, PROJECT, Process, fire_times, operate, project_snapshot
from statemachine.errors import SundialError

WATCHDOG_EVERY = timedelta(minutes=1)
SETTLE = timedelta(minutes=15)  # of the quiet period, before its occurrences must all be handled
MARGIN = timedelta(minutes=10)  # before its end: an invocation's timeout and then some


@dataclass(frozen=True)
class Settings:
    seed: int
    faulty: timedelta = timedelta(hours=1)
    quiet: timedelta = timedelta(minutes=45)
    mix: FaultMix = field(default_factory=FaultMix)
    processes: int = 2
    # The mean time between operator actions (None: no operator).
    operator_every: timedelta | None = timedelta(minutes=2)
    max_steps: int | None = None  # stop early (a prefix of the run: shrinking)
    jobs: tuple[str, ...] = tuple(job.id for job in JOBS)  # which of the world's jobs exist


@dataclass
class Result:
    seed: int
    steps: int
    digest: str
    violation: str = ""
    sends: int = 0
    invocations: int = 0
    simulated: timedelta = timedelta(0)

    @property
    def ok(self) -> bool:
        return not self.violation


class Simulation:
    def __init__(self, settings: Settings, prepare: Callable[[Simulation], None] | None = None):
        self.settings, self.rng = settings, random.Random(settings.seed)
        self.clock = SimClock()
        self.jobs = tuple(job for job in JOBS if job.id in settings.jobs)
        self.invariants = Invariants()
        tables = MemoryTables()
        self.queue = SimQueue(tables.throttle_limit)
        self.store = FaultyStore(tables, self.queue, self.invariants.on_commit)
        self.invariants.store = self.store
        self.target = SimTarget(self.rng, settings.mix, self.clock.advance, self.invariants.on_send, self.clock.now,
                                self.invariants.on_answer)
        self.target.trace = self.trace
        self.processes = [Process(f"p{i}", self.store, self.target, self.clock) for i in range(settings.processes)]
        self._digest = hashlib.sha256()
        self.echo: Callable[[str], None] | None = None  # where trace lines are also printed
        self.steps, self.faults_on, self.slower, self._stalled = 0, False, False, False
        self.quiet_from = self.clock.now() + settings.faulty
        self.end = self.quiet_from + settings.quiet
        self.next_watchdog = self.clock.now() + WATCHDOG_EVERY
        self.next_operation = None if settings.operator_every is None else self.clock.now() + self._interval()
        if prepare is not None:
            prepare(self)
        self.processes[0].engine.configs.import_project(project_snapshot(False, self.jobs))
        self.store.fault, self.store.on_stall, self.queue.shift = self._commit_fault, self._stall, self._shift
        self.store.between = self._between
        self.target.stall = self._stall
        self._duplicate: Task | None = None
        self.faults_on = True

    def trace(self, line: str) -> None:
        text = f"{self.steps} {self.clock.monotonic():.6f} {line}\n"
        self._digest.update(text.encode())
        if self.echo is not None:
            self.echo(text.rstrip("\n"))

    # --- faults, as the ports ask for them ------------------------------------------------

    def _commit_fault(self) -> Fault:
        if not self.faults_on:
            return Fault.NONE
        fault = pick(self.rng, self.settings.mix.commit, Fault.NONE)
        if fault is not Fault.NONE:
            self.trace(f"fault {fault.value}")
        return fault

    def _shift(self, task: Task) -> timedelta:
        if not self.faults_on:
            return timedelta(0)
        roll = self.rng.random()
        if roll < self.settings.mix.late_task:
            return timedelta(seconds=self.rng.uniform(1, 90))
        if roll < self.settings.mix.late_task + self.settings.mix.early_task:
            return -timedelta(seconds=self.rng.uniform(0.01, 5))
        return timedelta(0)

    def _stall(self) -> None:
        """The process that just committed stalls past its leases; the others run the
        tasks that fall due meanwhile (a stall inside a stall is not modelled)."""
        if self._stalled or not self.faults_on:
            return
        self._stalled = True
        try:
            self.clock.advance(DISPATCH_DEADLINE + timedelta(seconds=self.rng.uniform(1, 60)))
            self.trace("stall")
            for _ in range(self.rng.randint(1, 6)):
                if not self._run_one_task():
                    break
        finally:
            self._stalled = False

    def _between(self) -> None:
        """A duplicate delivery of the task running now arrives between two of its commits."""
        duplicate, self._duplicate = self._duplicate, None
        if duplicate is not None:
            self.trace("duplicate")
            self._handle(self._process(), duplicate)

    def _interval(self) -> timedelta:
        assert self.settings.operator_every is not None
        mean = self.settings.operator_every.total_seconds()
        return timedelta(seconds=self.rng.expovariate(1 / mean))

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> Result:
        try:
            while self.clock.now() < self.end:
                if self.settings.max_steps is not None and self.steps >= self.settings.max_steps:
                    return self._result()
                self.step()
                if self.invariants.violations:
                    return self._result(self.invariants.violations[0])
            self.invariants.check_end(self._due_in_quiet(), self.end - MARGIN)
        except Violation as broken:
            return self._result(str(broken))
        return self._result()

    def _result(self, violation: str = "") -> Result:
        return Result(self.settings.seed, self.steps, self._digest.hexdigest(), violation, self.target.sent,
                      len(self.invariants.rows), self.clock.now() - (self.quiet_from - self.settings.faulty))

    def step(self) -> None:
        self.steps += 1
        now = self.clock.now()
        if self.faults_on and now >= self.quiet_from:
            self._quiet_down()
        elif self.faults_on and self.next_operation is not None and now >= self.next_operation:
            self.next_operation = now + self._interval()
            self._operate()
        elif self._complete_one(now):
            pass
        elif now >= self.next_watchdog:
            self.next_watchdog = now + WATCHDOG_EVERY
            self._watchdog()
        elif not self._run_one_task():
            self._advance()

    def _advance(self) -> None:
        wakes = [self.next_watchdog, self.end, self.queue.next_wake(self.clock.now())]
        wakes += [completion.at for completion in self.target.completions]
        if self.faults_on:
            wakes += [self.next_operation, self.quiet_from]
        self.clock.advance_to(min(wake for wake in wakes if wake is not None))
        self.trace("advance")

    def _process(self) -> Process:
        return self.processes[self.rng.randrange(len(self.processes))]

    def _quiet_down(self) -> None:
        """The faults stop: every job resumed, the base config back, no more actions."""
        self.faults_on = False
        self.trace("quiet")
        engine = self.processes[0].engine
        engine.configs.import_project(project_snapshot(False, self.jobs))
        for job in self.jobs:
            operations.resume(engine, PROJECT, job.id)

    def _due_in_quiet(self) -> dict[tuple[str, str], list[datetime]]:
        start, end = self.quiet_from + SETTLE, self.end - MARGIN
        return {(PROJECT, job.id): fire_times(job, start, end) for job in self.jobs}

    def _operate(self) -> None:
        process = self._process()
        try:
            done, self.slower = operate(process.engine, self.rng, self.slower, self.jobs)
        except SimCrash:
            done = "operator's process crashed"
            process.restart()
        self.trace(done)

    def _complete_one(self, now: datetime) -> bool:
        due = [c for c in self.target.completions if c.at <= now]
        if not due:
            return False
        completion = min(due, key=lambda c: c.at)
        self.target.completions.remove(completion)
        request, process = completion.request, self._process()
        try:
            operations.complete(process.engine, request.project, request.job_id, request.invocation_id,
                                request.completion_token, completion.succeeded)
            self.invariants.on_answer(request, "ok" if completion.succeeded else "completed failed")
            self.trace(f"complete {request.invocation_id} {completion.succeeded}")
        except (SundialError, StoreError) as refused:
            self.trace(f"complete {request.invocation_id} refused: {type(refused).__name__}")
        except SimCrash:
            process.restart()
        return True

    def _watchdog(self) -> None:
        process = self._process()
        try:
            process.engine.maintenance.run_watchdog()
            self.trace("watchdog")
        except StoreError:
            self.trace("watchdog failed")
        except SimCrash:
            process.restart()

    # --- one task -----------------------------------------------------------------------------

    def _run_one_task(self) -> bool:
        now = self.clock.now()
        due = self.queue.due_ids(now)
        if not due:
            return False
        task_id = due[self.rng.randrange(len(due))] if self.faults_on else due[0]
        leased = self.queue.lease_id(task_id, now, DISPATCH_DEADLINE)
        mix = self.settings.mix
        if self.faults_on and self.rng.random() < mix.duplicate_task:
            self._duplicate = leased.task if mix.duplicate_keeps_retry else replace(leased.task, retried=False)
        outcome = self._handle(self._process(), leased.task)
        self._between()  # the duplicate, if no commit of the first delivery ran it
        if outcome == "done" and not (self.faults_on and self.rng.random() < mix.lost_ack):
            self.queue.complete([task_id])
        elif outcome == "retry":
            backoff = timedelta(seconds=self.rng.uniform(0.1, 10)) if self.faults_on else timedelta(seconds=1)
            self.queue.retry(task_id, self.clock.now() + backoff, leased.attempts)
        return True

    def _handle(self, process: Process, task: Task) -> str:
        """Run a task as Cloud Tasks' HTTP handler would: "done" (a 2xx), "retry" (an
        error answer), or "crashed" (no answer: the lease runs out)."""
        try:
            try:
                process.engine.tasks.handle(task)
            except RetryTask as again:
                process.engine.tasks.hand_back(task, again.delay)
        except StoreError as failed:
            self.trace(f"task {task.name} {'*' if task.retried else ''}: {failed}")
            return "retry"
        except SimCrash:
            self.trace(f"task {task.name} {'*' if task.retried else ''}: crashed")
            process.restart()
            return "crashed"
        self.trace(f"task {task.name} {'*' if task.retried else ''}: done")
        return "done"
