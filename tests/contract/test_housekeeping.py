"""The watchdog and the clean-up at scale, on every backend: runs bounded by a time
budget, cursors that let no job starve the others, and work left by one run done by
the next."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from engine.adapters.cloud.datastore_entities import job_key, sharded_time
from engine.changes import JobChanges
from engine.config_import import JobSnapshot, ProjectSnapshot
from engine.maintenance import REPAIR_BACKOFF, REPAIR_SPREAD, Maintenance
from engine.metrics import Metrics
from statemachine.definition import JobDefinition
from statemachine.policy import JobPolicy
from tests.contract import samples
from tests.contract.samples import T0
from tests.contract.test_engine_scenarios import Scenario
from tests.contract.test_store import put
from tests.engine.harness import START


class TickingClock:
    """Every reading of the time moves it on by `step`: a run spends its budget in a
    known number of readings, whatever the machine's speed."""

    def __init__(self, now: datetime, step: timedelta):
        self.current, self.step = now, step

    def now(self) -> datetime:
        self.current += self.step
        return self.current


def _define(scenario: Scenario, job_ids: list[str]) -> None:
    jobs = tuple(JobSnapshot(job_id, JobPolicy(schedule_text="every 1m", revision="v1"),
                             JobDefinition(id=job_id, schedule="every 1m", target={"noop": {}}), False)
                 for job_id in job_ids)
    scenario.engine.configs.import_project(ProjectSnapshot("proj", "v1", jobs=jobs))


def _lose_every_task(backend) -> None:
    if backend.name == "sqlite":
        backend.store.connection().execute("DELETE FROM tasks")
    elif backend.name == "memory":
        backend.queue.clear()
    else:
        backend.queue.__init__()  # the queue lost everything
    assert backend.next_wake() is None


def _wedge(backend, job_id: str, watchdog_at: datetime) -> None:
    """Make the job's record unreadable, and its watchdog time the earliest: every
    step of it fails, and it heads the watchdog's query."""
    if backend.name == "sqlite":
        backend.store.connection().execute(
            "UPDATE jobs SET record = '{', watchdog_at = ? WHERE project = 'proj' AND job_id = ?",
            (watchdog_at.timestamp(), job_id))
        return
    if backend.name == "memory":  # rows are objects: a record that is not one fails every step
        tables, key = backend.store.tables, ("proj", job_id)
        tables.jobs[key] = dataclasses.replace(tables.jobs[key], record="{")
        tables.watchdog_at[key] = watchdog_at
        return
    with backend.client.context(cache_policy=False, global_cache_policy=False):
        entity = job_key("proj", job_id).get()
        entity.record, entity.watchdog_at = "{", watchdog_at
        entity.watchdog_key = sharded_time("proj", job_id, watchdog_at, backend.store.index_shards)
        entity.put()


def _broken_chains(scenario: Scenario, healthy: int, wedged: int) -> tuple[list[str], list[str]]:
    """Every-minute jobs whose tasks were all lost; the wedged ones head the watchdog's query."""
    good = [f"healthy-{n}" for n in range(healthy)]
    bad = [f"wedged-{n}" for n in range(wedged)]
    _define(scenario, bad + good)
    scenario.run_until(START + timedelta(minutes=1, seconds=30))
    _lose_every_task(scenario.backend)
    for n, job_id in enumerate(bad):
        _wedge(scenario.backend, job_id, START + timedelta(seconds=n))
    return good, bad


def test_wedged_jobs_at_the_head_do_not_keep_the_others_from_their_repair(backend):
    scenario = Scenario(backend)
    good, bad = _broken_chains(scenario, healthy=5, wedged=3)
    scenario.clock.current = now = START + timedelta(minutes=5)
    metrics = scenario.engine.metrics

    # Pages of 2: the wedged jobs fill the first page and a half.
    assert scenario.engine.maintenance.run_watchdog(page_size=2) == 8
    for job_id in good:
        assert backend.store.get_job("proj", job_id).record.watchdog_at > now, job_id
    assert len(backend.queued_names()) == len(good)  # a new tick each; none for the wedged
    assert metrics.counter("sundial_watchdog_repair_failures_total") == 3
    # Deferred: the next runs do not meet them at the head ...
    def due_wedged(at: datetime) -> list[str]:
        return sorted(job_id for _, job_id in backend.store.jobs_due_for_watchdog(at, 100)[0] if job_id in bad)

    assert due_wedged(now + REPAIR_BACKOFF - timedelta(seconds=1)) == []
    # ... and try them again once the backoff has run out.
    scenario.clock.current = later = now + REPAIR_BACKOFF + timedelta(seconds=REPAIR_SPREAD + 1)
    assert due_wedged(later) == bad
    scenario.engine.maintenance.run_watchdog(page_size=2)
    assert metrics.counter("sundial_watchdog_repair_failures_total") == 6


def test_a_run_stops_at_its_budget_and_the_next_runs_finish_the_repairs(backend):
    scenario = Scenario(backend)
    good, _ = _broken_chains(scenario, healthy=9, wedged=0)
    scenario.clock.current = START + timedelta(minutes=5)
    # One reading of the run's clock per repair and per page, a second each.
    clock, metrics = TickingClock(scenario.clock.current, timedelta(seconds=1)), Metrics()
    watchdog = Maintenance(backend.store, scenario.engine.changes, clock, metrics)
    runs = []
    while backend.store.jobs_due_for_watchdog(clock.current, 100)[0]:
        runs.append(watchdog.run_watchdog(budget=timedelta(seconds=4), page_size=2))
    assert sum(runs) == len(good) and len(runs) >= 3 and all(runs), runs
    assert metrics.counter("sundial_maintenance_budget_spent_total", run="watchdog") == len(runs) - 1
    for job_id in good:
        assert backend.store.get_job("proj", job_id).record.watchdog_at > scenario.clock.current


def _progress(store, row, parts: int) -> None:
    def body(tx):
        for part in range(parts):
            tx.put_progress(row.project, row.job_id, row.id, f"event/{part}", {"attempt": 1})

    store.run_in_transaction(body)


def _parts(store, row) -> int:
    return len(store.run_in_transaction(lambda tx: tx.list_progress(row.project, row.job_id, row.id)))


def test_a_backlog_larger_than_a_run_is_removed_over_several_runs_and_nothing_else(store):
    history, now = timedelta(days=45), T0 + timedelta(days=50)
    cutoff = now - history
    old = [samples.invocation(T0 + timedelta(minutes=m), job_id=f"job-{m % 3}",
                              status=("SUCCEEDED", "FAILED", "SKIPPED", "ABORTED")[m % 4]) for m in range(23)]
    running = [samples.invocation(T0 + timedelta(hours=h), status=s)
               for h, s in ((-1, "RUNNING"), (1, "STARTING"), (2, "RUNNING"))]
    young = [samples.invocation(cutoff + timedelta(minutes=m), status="SUCCEEDED") for m in range(1, 4)]
    put(store, *old, *running, *young)
    # Fan-outs, all old: one still running, whose rows come first and fill more than a
    # batch, then two that finished.
    for row, parts in ((running[0], 6), (old[0], 3), (old[1], 3)):
        _progress(store, row, parts)

    clock = TickingClock(now, timedelta(seconds=1))
    cleanup = Maintenance(store, JobChanges(store, clock, Metrics()), clock, Metrics())
    removed = []
    while not removed or removed[-1]:
        removed.append(cleanup.cleanup(history, budget=timedelta(seconds=2), batch=4))
        assert len(removed) < 30, removed
    assert len(removed) >= 4, removed  # more than one run's budget
    kept = {(r.job_id, r.id) for job in ("job", "job-0", "job-1", "job-2")
            for r in store.list_invocations("proj", job, 100, None)[0]}
    assert kept == {(r.job_id, r.id) for r in running + young}
    assert [_parts(store, row) for row in (running[0], old[0], old[1])] == [6, 0, 0]
