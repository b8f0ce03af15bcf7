"""Engine-level fault injection: a workload of many jobs, a queue that delivers
every task twice and some of them late and out of order, and an audit of what
the target received against what storage recorded.

Everything runs on tests/engine/harness.py (a real store, a fake clock, tasks
run inline); randomness comes from one seeded `random.Random` per test, so a
failure replays exactly.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import os
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from engine.config_import import JobSnapshot, ProjectSnapshot
from engine.event_rows import TransactionRows
from engine.ports import DeliveryResult, RetryTask, Task
from statemachine.definition import JobDefinition
from statemachine.fanout import EventPhase
from statemachine.policy import Catchup, FanoutPolicy, JobPolicy, Overlap, RetryPolicy
from statemachine.schedule import fire_times
from tests.engine.harness import START, Harness
from tests.support.records import RecordWatch

PROJECT = "faults"
# SUNDIAL_FAULTS_SCALE=10 runs ten times the trials and occurrences (docs/RELIABILITY.md).
SCALE = float(os.environ.get("SUNDIAL_FAULTS_SCALE", "1"))
# SUNDIAL_FAULTS_SEED=N shifts every test's seed: other random runs, each replayable.
SEED = int(os.environ.get("SUNDIAL_FAULTS_SEED", "0"))
# SUNDIAL_FAULTS_REPORT=FILE appends each run's counts to FILE, one JSON object a line.
REPORT = os.environ.get("SUNDIAL_FAULTS_REPORT", "")


def report(fault: str, backend: str, counts: dict, records: RecordWatch) -> None:
    """Print one trial's counts and the largest job record it stored (pytest -s shows
    them), append them to REPORT, and check that record against its bound (tests/support/records.py)."""
    line = json.dumps({"fault": fault, "backend": backend, "seed": SEED, "scale": SCALE, **counts,
                       **records.figures()})
    print(f"\n[faults] {line}")
    if REPORT:
        with open(REPORT, "a") as out:
            out.write(line + "\n")
    records.check()


def watch_records(h: Harness, period: timedelta = timedelta(seconds=15)) -> RecordWatch:
    """The largest job record a harness trial stores, sampled every `period` of fake time."""
    watch = RecordWatch.of(h.store)
    h.every(period, watch.sample)
    return watch
TERMINAL = {"SUCCEEDED", "FAILED", "SKIPPED", "ABORTED"}
CATCHUPS = (Catchup.NONE, Catchup.LATEST, Catchup.ALL)


def scaled(full: int, sqlite: bool = True, small: int | None = None) -> int:
    """A size for this run: `full` on SQLite, `small` on the emulator (slower), times SCALE."""
    base = full if sqlite or small is None else small
    return max(1, round(base * SCALE))


# --- the workload ---------------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    """Job id -> policy; `period` is each job's fire interval (every schedule here is regular)."""

    policies: dict[str, JobPolicy]
    periods: dict[str, timedelta]
    content: str

    @property
    def clock_jobs(self) -> list[str]:
        return [j for j, p in self.policies.items() if p.schedule_text != "triggered"]

    def import_into(self, h: Harness) -> None:
        h.engine.configs.import_project(self.snapshot())

    def snapshot(self, content: str | None = None) -> ProjectSnapshot:
        jobs = tuple(
            JobSnapshot(job_id, policy, JobDefinition(id=job_id, schedule=policy.schedule_text or "triggered",
                                                      target={"noop": {}}), False)
            for job_id, policy in self.policies.items()
        )
        return ProjectSnapshot(PROJECT, content or self.content, jobs=jobs)


PERIODS = (5, 10, 15, 20, 30)  # seconds: short schedules, many occurrences


def mixed_jobs(count: int, rng: random.Random, chain: bool = True, content: str = "v1",
               periods: tuple[int, ...] = PERIODS, timezone: str = "UTC") -> Workload:
    """`count` jobs with short schedules and every policy mixed: catch-up none /
    latest / all, overlap skip / buffer_one / buffer_all / allow, retries, fan-out;
    with `chain`, one pair where a job's success triggers another. Every period
    divides a minute, so the fire times are the same in any whole-hour `timezone`."""
    policies, intervals = {}, {}
    overlaps = (Overlap.SKIP, Overlap.BUFFER_ONE, Overlap.BUFFER_ALL, Overlap.ALLOW)
    for n in range(count):
        seconds = periods[n % len(periods)]
        # Both spellings of a short schedule: fixed rate, and Quartz cron.
        schedule = f"every {seconds}s" if n % 2 else f"0/{seconds} * * * * ?"
        fanout = FanoutPolicy(count=2 + n % 2, spread=timedelta(seconds=4)) if n % 4 == 3 else FanoutPolicy()
        policy = JobPolicy(
            schedule_text=schedule,
            timezone=timezone,
            overlap=overlaps[n % len(overlaps)],
            max_concurrent=2,
            catchup=CATCHUPS[n % 3],
            catchup_window=timedelta(minutes=rng.choice((2, 10, 60))),
            retry=RetryPolicy(max_attempts=1 + n % 3, min_backoff=timedelta(seconds=1),
                              max_backoff=timedelta(seconds=20)),
            fanout=fanout,
            revision=f"{content}-{n}",
        )
        job_id = f"job-{n:03d}"
        policies[job_id], intervals[job_id] = policy, timedelta(seconds=seconds)
    if chain:
        first = "job-000"
        policies[first] = replace(policies[first], triggers=("downstream",))
        policies["downstream"] = JobPolicy(schedule_text="triggered", revision=f"{content}-downstream")
    return Workload(policies, intervals, content)


def flaky_answers(failure_rate: float, seed: int):
    """A target's answers: each (invocation, event, attempt) fails with `failure_rate`,
    decided by a hash so that the answer does not depend on delivery order."""

    def respond(request) -> DeliveryResult:
        key = f"{seed}/{request.invocation_id}/{request.event_index}/{request.attempt}".encode()
        draw = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64
        if draw < failure_rate:
            return DeliveryResult("failed", "http 503", detail="injected")
        return DeliveryResult("succeeded", detail="ok")

    return respond


# --- a queue that misbehaves ------------------------------------------------------------

class ChaoticDelivery:
    """Between the queue and the engine: every task the queue hands over is
    delivered `copies` times, and each delivery, with probability `late`, is
    held back and delivered up to `max_delay` later, in an order of its own.

    Use `h.set_handler(chaos)` and `h.add_source(chaos)`. An on-time delivery
    that fails goes back to the real queue (its retry is again delivered twice);
    a late one or a copy that fails is retried here after the delay it asked for.
    """

    def __init__(self, h: Harness, rng: random.Random, copies: int = 2, late: float = 0.1,
                 max_delay: timedelta = timedelta(seconds=90)):
        self.handle, self.clock, self.rng = h.engine.tasks.handle, h.clock, rng
        self.copies, self.late, self.max_delay = copies, late, max_delay
        self.held: list[tuple[datetime, int, Task]] = []
        self.order = itertools.count()
        self.deliveries = 0
        self.late_deliveries = 0
        self.queued_tasks = 0

    def __call__(self, task: Task) -> None:
        self.queued_tasks += 1
        error = None
        for copy in range(self.copies):
            if self.rng.random() < self.late:
                delay = timedelta(seconds=self.rng.uniform(0.5, self.max_delay.total_seconds()))
                self._hold(task, self.clock.now() + delay)
                self.late_deliveries += 1
                continue
            try:
                self._deliver(task)
            except Exception as failed:
                if copy == 0 and error is None:
                    error = failed  # the queue's own delivery: the queue retries it
                else:
                    self._hold(task, self.clock.now() + _retry_delay(failed))
        if error is not None:
            raise error

    def _deliver(self, task: Task) -> None:
        self.deliveries += 1
        self.handle(task)

    def _hold(self, task: Task, at: datetime) -> None:
        heapq.heappush(self.held, (at, next(self.order), task))

    def next_wake(self) -> datetime | None:
        return self.held[0][0] if self.held else None

    def run_due(self, now: datetime) -> int:
        ran = 0
        while self.held and self.held[0][0] <= now:
            _, _, task = heapq.heappop(self.held)
            ran += 1
            try:
                self._deliver(task)
            except Exception as failed:
                self._hold(task, now + _retry_delay(failed))
        return ran


def _retry_delay(error: Exception) -> timedelta:
    if isinstance(error, RetryTask):
        return max(error.delay, timedelta(milliseconds=1))
    return timedelta(seconds=1)


# --- what was stored at the instant of each delivery ----------------------------------

class WriteBeforeCall:
    """A target check: at the instant of a delivery, storage must hold the
    invocation and say that this attempt of this event is starting (the job
    record's active entry: for an invocation started by its tick that entry is
    the only record until a result is saved)."""

    def __init__(self, store):
        self.store = store
        self.checked = 0
        self.violations: list[str] = []

    def __call__(self, request) -> None:
        self.checked += 1
        stored = self.store.get_job(request.project, request.job_id)
        entry = stored.record.find_active(request.invocation_id) if stored is not None else None
        bit = 1 << request.event_index
        if entry is None:
            self.violations.append(f"{request.job_id} {request.invocation_id}: delivered, not stored")
        elif entry.events_in_rows:
            self._check_event_row(request)
        elif not entry.started_mask & bit or entry.attempts[request.event_index] != request.attempt:
            self.violations.append(
                f"{request.job_id} {request.invocation_id} event {request.event_index} attempt"
                f" {request.attempt}: delivered, but storage says attempt"
                f" {entry.attempts[request.event_index]} started={bool(entry.started_mask & bit)}"
            )


    def _check_event_row(self, request) -> None:
        """A fan-out's event says it in its own row (engine/event_rows.py)."""
        state = self.store.run_in_transaction(
            lambda tx: TransactionRows(tx, request.project, request.job_id, request.invocation_id).event(
                request.event_index))
        if state.phase is not EventPhase.STARTED or state.attempt != request.attempt:
            self.violations.append(
                f"{request.job_id} {request.invocation_id} event {request.event_index} attempt"
                f" {request.attempt}: delivered, but its row says attempt {state.attempt} {state.phase}")


# --- the audit ---------------------------------------------------------------------------

@dataclass
class Audit:
    """What happened to every occurrence of a workload, and what went wrong."""

    jobs: int = 0
    occurrences: int = 0  # fire times the jobs' schedules had, all handled
    delivered: int = 0  # occurrences delivered (SUCCEEDED or FAILED after its attempts)
    skipped: Counter = field(default_factory=Counter)  # reason -> occurrences
    deliveries: int = 0  # calls of the target
    redelivered: int = 0  # calls of an attempt already made (same invocation id)
    duplicates: list[str] = field(default_factory=list)  # an occurrence with two invocations / ids
    missing: list[str] = field(default_factory=list)  # a fire time with no record
    unrecorded: list[str] = field(default_factory=list)  # a delivery of no recorded invocation
    undelivered: list[str] = field(default_factory=list)  # recorded as delivered, never called
    unfinished: list[str] = field(default_factory=list)  # not terminal at the end
    triggered: int = 0
    caught_up: int = 0  # occurrences delivered late by the catch-up policy (trigger "catchup")

    def problems(self) -> list[str]:
        return self.duplicates + self.missing + self.unrecorded + self.undelivered + self.unfinished

    def counts(self) -> dict:
        return {
            "jobs": self.jobs, "occurrences": self.occurrences, "delivered": self.delivered,
            "caught_up": self.caught_up, "skipped": dict(self.skipped), "calls": self.deliveries,
            "redelivered_same_id": self.redelivered, "duplicates": len(self.duplicates),
            "missing": len(self.missing), "unrecorded": len(self.unrecorded),
            "undelivered": len(self.undelivered), "unfinished": len(self.unfinished),
        }

    def summary(self) -> str:
        skipped = ", ".join(f"{reason} {n}" for reason, n in sorted(self.skipped.items())) or "none"
        return (f"jobs {self.jobs}, occurrences {self.occurrences}, delivered {self.delivered}"
                f" ({self.caught_up} caught up),"
                f" skipped ({skipped}), target calls {self.deliveries}, redelivered (same id)"
                f" {self.redelivered}, duplicates {len(self.duplicates)}, missing {len(self.missing)},"
                f" unrecorded {len(self.unrecorded)}, unfinished {len(self.unfinished)}")


def settle(h: Harness, workload: Workload, quiet: timedelta = timedelta(minutes=15)) -> dict:
    """Stop new occurrences (the project's file loses its jobs) and let what is in
    flight finish; returns each job's last handled fire time, read before the stop."""
    handled = {j: h.store.get_job(PROJECT, j).record.scheduled_until for j in workload.clock_jobs}
    h.store.fault = None
    h.engine.configs.import_project(ProjectSnapshot(PROJECT, "settled", jobs=()))
    h.run_until(h.clock.now() + quiet)
    return handled


def audit(h: Harness, workload: Workload, allowed_skips=("missed", "overlap", "disabled")) -> Audit:
    """Check every occurrence of every clock-driven job (fire times from START up to
    what the job handled) against the history and the target's calls."""
    result = Audit(jobs=len(workload.policies))
    calls = defaultdict(list)
    for request in h.target.requests:
        calls[request.job_id].append(request)
    result.deliveries = len(h.target.requests)
    attempts = Counter((r.job_id, r.invocation_id, r.event_index, r.attempt) for r in h.target.requests)
    result.redelivered = sum(n - 1 for n in attempts.values())
    for job_id, policy in workload.policies.items():
        rows = h.invocations(job_id, PROJECT)
        record = h.store.get_job(PROJECT, job_id).record
        by_id = {row.id: row for row in rows}
        for row in rows:
            if row.status not in TERMINAL:
                result.unfinished.append(f"{job_id} {row.id} {row.status}")
        for entry in record.active:
            result.unfinished.append(f"{job_id} {entry.invocation_id} still active")
        if policy.schedule_text == "triggered":
            # A job trigger's invocation is named by its source's scheduled time.
            result.triggered += len(rows)
            by_source = Counter((row.trigger, row.scheduled_time) for row in rows)
            result.duplicates += [f"{job_id}: triggered twice by {t}" for t, n in by_source.items() if n > 1]
        else:
            _audit_occurrences(result, job_id, policy, rows, record, allowed_skips)
        # Every call carries the id of a recorded invocation, one id per scheduled time.
        ids_per_time = defaultdict(set)
        for request in calls[job_id]:
            ids_per_time[request.scheduled_time].add(request.invocation_id)
            if request.invocation_id not in by_id:
                result.unrecorded.append(f"{job_id} {request.invocation_id} delivered, no history")
        result.duplicates += [f"{job_id} {t}: delivered under {sorted(ids)}"
                              for t, ids in ids_per_time.items() if len(ids) > 1]
        called = {r.invocation_id for r in calls[job_id]}
        for row in rows:
            if row.status in ("SUCCEEDED", "FAILED") and row.id not in called:
                result.undelivered.append(f"{job_id} {row.id} {row.status} but never delivered")
    return result


def _audit_occurrences(result: Audit, job_id, policy: JobPolicy, rows, record, allowed_skips) -> None:
    per_time = defaultdict(list)
    for row in rows:
        per_time[row.scheduled_time].append(row)
    result.duplicates += [f"{job_id} {t}: {len(group)} invocations" for t, group in per_time.items()
                          if len(group) > 1]
    expected = list(fire_times(policy.schedule, START, record.scheduled_until))
    result.occurrences += len(expected)
    for when in expected:
        group = per_time.get(when)
        if not group:
            result.missing.append(f"{job_id} {when}: no record")
            continue
        row = group[0]
        if row.status == "SKIPPED":
            result.skipped[row.reason] += 1
            if row.reason not in allowed_skips:
                result.missing.append(f"{job_id} {when}: skipped for {row.reason!r}")
        else:
            result.delivered += 1
            result.caught_up += row.trigger == "catchup"
    extra = set(per_time) - set(expected)
    result.missing += [f"{job_id} {t}: a record of no fire time" for t in sorted(extra)]


def assert_clean(result: Audit, min_occurrences: int = 0) -> None:
    problems = result.problems()
    assert not problems, f"{len(problems)} problems, first: {problems[:10]}"
    assert result.occurrences >= min_occurrences, result.summary()


def run_workload(h: Harness, until: datetime, watchdog: timedelta = timedelta(seconds=30)) -> None:
    """Run the chain as serve does: the queue, and the watchdog every `watchdog`."""
    h.every(watchdog, h.engine.maintenance.run_watchdog)
    h.run_until(until)
