"""Fault 3: storage failing at each step of the chain — the tick's commit, a start
task's commit, the save of an attempt's result, the watchdog's repairs (and its
query), the config import — one step per trial and all of them in one more, for
four minutes, 30% of that step's transactions:
each failure fails before the body runs, after it ran (rolled back), or after it
committed (the caller sees an error for a write that landed); on the Datastore
backend also "committed, but the tasks sent after the commit were lost".

Checked: at the instant of every call of the target, storage holds the attempt
as starting (for a tick-started invocation, its job record's active entry); a
history row exists for every invocation whose result was saved; once the
failures stop every job fires again, nothing stays RUNNING past its deadline,
and the audit of the whole run finds no occurrence missing or doubled."""

from __future__ import annotations

import itertools
import random
from datetime import timedelta

import pytest

from tests.engine.harness import LOSE_TASKS, MODES, START, Harness
from tests.faults.support import (
    PERIODS,
    PROJECT,
    SCALE,
    SEED,
    WriteBeforeCall,
    assert_clean,
    audit,
    flaky_answers,
    mixed_jobs,
    report,
    run_workload,
    scaled,
    settle,
    watch_records,
)
from tests.faults.test_queue_purged import purge
from tests.support.cloud_stores import ON_BOTH_IN_LONG_RUNS
from tests.support.emulators import FirestoreEmulator

STEPS = ("tick", "start", "result", "watchdog", "import")
EVERY_STEP = "every step"  # all five at once
FAULTS_FROM, FAULTS_UNTIL = START + timedelta(minutes=1), START + timedelta(minutes=5)
QUIET_UNTIL = START + timedelta(minutes=10)
RATE = 0.3
# On the emulator (~10 ms a transaction) one trial fails every step at once; the
# long run (SUNDIAL_FAULTS_SCALE >= 2) adds one trial per step there too.
DATASTORE_STEPS = (EVERY_STEP,) + (STEPS if SCALE >= 2 else ())


@pytest.mark.parametrize("step", STEPS + (EVERY_STEP,))
def test_storage_failing_at_one_step_of_the_chain(tmp_path, step):
    run_storage_trial(Harness(tmp_path, sqlite=True), step, sqlite=True)


@pytest.mark.parametrize("step", STEPS + (EVERY_STEP,))
def test_storage_failing_at_one_step_of_the_chain_in_memory(step):
    # The in-memory backend commits its tasks with its writes, as SQLite does.
    run_storage_trial(Harness(), step, sqlite=True)


@pytest.mark.parametrize("step", DATASTORE_STEPS)
@pytest.mark.parametrize("cloud_database", ON_BOTH_IN_LONG_RUNS, indirect=True)
def test_storage_failing_on_datastore(tmp_path, cloud_database, step):
    from tests.contract.backends import DatastoreBackend, FirestoreBackend

    kind = FirestoreBackend if isinstance(cloud_database, FirestoreEmulator) else DatastoreBackend
    run_storage_trial(Harness(tmp_path, backend=kind(cloud_database)), step, sqlite=False)


def run_storage_trial(h: Harness, step: str, sqlite: bool) -> None:
    steps = STEPS if step == EVERY_STEP else (step,)
    seed = SEED + (STEPS + (EVERY_STEP,)).index(step) + 30
    rng = random.Random(seed)
    # On the emulator: fewer jobs with longer periods.
    periods = PERIODS if sqlite else (20, 30)
    workload = mixed_jobs(scaled(20, sqlite, small=4), random.Random(seed), periods=periods)
    h.target.check = written = WriteBeforeCall(h.store)
    h.target.respond = flaky_answers(0.1, seed)
    workload.import_into(h)
    records = watch_records(h)
    all_modes = MODES if sqlite else MODES + (LOSE_TASKS,)
    modes = itertools.cycle(all_modes)
    rate = 0.5 if step in ("start", "watchdog") else RATE  # they have fewer transactions to fail
    h.tag_steps()

    since_last = [0]  # transactions of the failing steps since the last failure

    def fault(current: str):
        if current not in steps or not FAULTS_FROM <= h.clock.now() < FAULTS_UNTIL:
            return None
        covered = {mode for (at, mode) in h.store.injected if at in steps}
        # At random, and every other one until each way of failing has happened.
        if rng.random() < rate or (since_last[0] >= 1 and covered != set(all_modes)):
            since_last[0] = 0
            return next(modes)  # each way of failing in turn
        since_last[0] += 1
        return None

    h.store.fault = fault
    if "watchdog" in steps:
        # Give the watchdog chains to repair while it fails: purge the queue now and then.
        h.store.fail_queries = lambda name: FAULTS_FROM <= h.clock.now() < FAULTS_UNTIL and rng.random() < 0.2
        for second in (65, 130, 195, 260):  # each purge's repairs are done before the next
            h.add_source(_Once(START + timedelta(seconds=second), lambda: purge(h)))
    importer = None
    if "import" in steps:
        # The project's file changes every 20 s: every job's timezone flips between
        # UTC and Paris, a timing change (new generation, the old ticks stale, the
        # backlog settled under the old timing) that keeps the same fire times.
        # serve re-reads the file every 5 s and imports what changed.
        variants = [workload, mixed_jobs(len(workload.clock_jobs), random.Random(seed), content="v2",
                                         periods=periods, timezone="Europe/Paris")]

        def import_current():
            h.store.step = "import"
            try:
                variant = variants[int((h.clock.now() - START).total_seconds() // 20) % 2]
                h.engine.configs.import_project(variant.snapshot())
            finally:
                h.store.step = ""

        importer = h.every(timedelta(seconds=5), import_current)
    run_workload(h, FAULTS_UNTIL)
    injected = {mode for (at, mode) in h.store.injected if at in steps}
    assert injected == set(all_modes), h.store.injected  # each way of failing, at least once
    if step == EVERY_STEP:
        assert {at for (at, _) in h.store.injected} >= set(STEPS), h.store.injected
    h.store.fault = None
    h.store.fail_queries = None
    h.run_until(QUIET_UNTIL)
    _assert_nothing_stuck(h, workload)
    if importer is not None:
        importer.stop()  # the file keeps its jobs no longer
    settle(h, workload)
    result = audit(h, workload)
    report(f"storage failing: {step}", "sqlite" if h.backend is None else h.backend.name, {
        **result.counts(), "injected": {f"{at}/{mode}": n for (at, mode), n in sorted(h.store.injected.items())},
        "checked_before_call": written.checked, "not_stored_at_call": len(written.violations)}, records)
    assert_clean(result)
    assert not written.violations, written.violations[:5]


class _Once:
    """Runs `work` once, at `at`."""

    def __init__(self, at, work):
        self.at, self.work = at, work

    def next_wake(self):
        return self.at

    def run_due(self, now) -> int:
        if self.at is None or now < self.at:
            return 0
        self.at = None
        self.work()
        return 1


def _assert_nothing_stuck(h: Harness, workload) -> None:
    """Five minutes after the failures stopped: every job has fired again, every
    chain is on time, nothing is RUNNING past its deadline or without its job
    knowing, and every invocation whose result was saved has its history row."""
    now = h.clock.now()
    for job_id in workload.clock_jobs:
        record = h.store.get_job(PROJECT, job_id).record
        period = workload.periods[job_id]
        assert record.scheduled_until >= now - period, f"{job_id}: chain behind ({record.scheduled_until})"
        assert record.tick_at is not None and record.tick_at > now - timedelta(seconds=1), job_id
        for entry in record.active:
            assert entry.deadline > now, f"{job_id}: {entry.invocation_id} past its deadline"
        rows = h.invocations(job_id, PROJECT)
        fired = [r for r in rows if r.scheduled_time > FAULTS_UNTIL and r.status in ("SUCCEEDED", "FAILED")]
        assert fired, f"{job_id}: did not fire again after the failures stopped"
        active = {entry.invocation_id for entry in record.active}
        for row in rows:
            if row.status in ("STARTING", "RUNNING"):
                assert row.id in active, f"{job_id}: {row.id} {row.status}, but its job has it no longer"
    finished = {(r.job_id, r.invocation_id) for r in h.target.requests}
    for job_id, invocation in finished:
        record = h.store.get_job(PROJECT, job_id).record
        if record.find_active(invocation) is None:  # its result was saved: history must exist
            assert h.store.get_invocation(PROJECT, job_id, invocation) is not None, (job_id, invocation)
