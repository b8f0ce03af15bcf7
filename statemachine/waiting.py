"""Occurrences that wait for the overlap policy to let them start, kept so that the job
record's size does not grow with their number.

Two queues, in one order: the order they came in.
- `runs`: waiting fire times of a clock-driven schedule (`schedule` ones under
  `buffer_all`, `catchup` ones under `catchup: all`, a backfill's under every policy), as ranges of the schedule
  (statemachine/runs.py). A fire time that came right after the last run's, with the
  same trigger, extends it; one after a gap (times recorded SKIPPED or started in
  between), or with the other trigger, opens a new run. Runs are capped (MAX_RUNS):
  an occurrence that would open one more is recorded SKIPPED/overlap.
- `buffered`: occurrences one by one: a person's and other jobs' triggers (capped
  under `buffer_all`, see admission.MAX_TRIGGERED_WAITING), a relative schedule's
  (at most one waits: its next tick is armed once the job is idle), and those of
  records written before runs existed. Each notes how far the runs reached when it
  came (`behind`): run times up to there start before it, later ones after it.

Occurrences that stop waiting without being delivered (pause, disable, a newer one
under `buffer_one`) are recorded SKIPPED: up to DROP_BATCH in the step that drops them,
the rest from `dropping`, a batch per tick (statemachine/ticks.py), so that no commit
writes an unbounded number of rows.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Callable

from statemachine import actions as act
from statemachine import ids
from statemachine.budget import ROWS_PER_STEP
from statemachine.chain import arm
from statemachine.policy import JobPolicy
from statemachine.record import JobRecord, Occurrence, evolve
from statemachine.runs import Run, single
from statemachine.schedule import is_clock_driven
from statemachine.vocabulary import SkipReason, Trigger

Result = tuple[JobRecord, list[act.Action]]

MAX_RUNS = 50  # about 130 bytes each in the stored record
DROP_BATCH = ROWS_PER_STEP  # SKIPPED rows written by one step for occurrences that stop waiting

FROM_SCHEDULE = (Trigger.SCHEDULE, Trigger.CATCHUP)


def occurrence(record: JobRecord, moment: datetime, trigger: str, key: str = "") -> Occurrence:
    """The occurrence of the job's schedule at `moment`, with its deterministic id; a
    backfill's (`key` its request id) has an id of its own, apart from the schedule's."""
    if trigger == Trigger.BACKFILL:
        invocation = ids.invocation_id(record.project, record.job_id, moment, ids.BACKFILL, key)
    else:
        invocation = ids.invocation_id(record.project, record.job_id, moment, ids.OCCURRENCE)
    return Occurrence(invocation, moment, trigger)


def push(record: JobRecord, waiting: Occurrence, policy: JobPolicy) -> Result:
    """Queue one occurrence behind everything that waits."""
    if waiting.trigger in FROM_SCHEDULE and is_clock_driven(policy.schedule):
        run = single(policy, waiting.scheduled_time, waiting.trigger)
        if run is not None:
            return push_run(record, run)
    behind = record.runs[-1].through if record.runs else None
    return evolve(record, buffered=record.buffered + (replace(waiting, behind=behind),)), []


def push_run(record: JobRecord, run: Run) -> Result:
    """Queue the run's occurrences behind everything that waits."""
    if record.runs:
        joined = record.runs[-1].joined(run)
        if joined is not None:
            return evolve(record, runs=record.runs[:-1] + (joined,)), []
    if len(record.runs) < MAX_RUNS:
        return evolve(record, runs=record.runs + (run,)), []
    first = run.first()
    if first is not None and run.without_through(first) is None:
        return drop_runs(record, [run], SkipReason.OVERLAP)  # one row
    # A longer run's rows are written by ticks, not by this step, which may have
    # written a batch of rows already (a tick's catch-up).
    return defer(record, [(SkipReason.OVERLAP, run)]), []


def pop(record: JobRecord) -> tuple[JobRecord, Occurrence]:
    """Take the occurrence that has waited longest (the record must have one)."""
    first = record.runs[0].first() if record.runs else None
    if record.buffered:
        head = record.buffered[0]
        if first is None or head.behind is None or first > head.behind:
            return evolve(record, buffered=record.buffered[1:]), replace(head, behind=None)
    if first is None:
        raise ValueError(f"job {record.project}/{record.job_id} has nothing waiting")
    run = record.runs[0]
    rest = run.without_through(first)
    return evolve(record, runs=(() if rest is None else (rest,)) + record.runs[1:]), occurrence(
        record, first, run.trigger, run.key)


def peek(record: JobRecord, limit: int) -> list[Occurrence]:
    """The first `limit` waiting occurrences, in the order they will start."""
    shown: list[Occurrence] = []
    while record.has_waiting and len(shown) < limit:
        record, head = pop(record)
        shown.append(head)
    return shown


def count(record: JobRecord, trigger_kind: Callable[[str], bool]) -> int:
    """How many of the occurrences held one by one have a trigger of this kind."""
    return sum(1 for waiting in record.buffered if trigger_kind(waiting.trigger))


# --- occurrences that stop waiting ---------------------------------------------------------

def stop_waiting(record: JobRecord, reason: str, now: datetime) -> Result:
    """Nothing waits any more (a pause, a disable): each is recorded SKIPPED with
    `reason`, DROP_BATCH now and the rest by ticks. The job's tick goes too, unless one
    is needed for the rest of the rows."""
    policy = record.live_policy
    queue: list[Dropped] = []
    alone: list[Occurrence] = []  # held one by one, and not a fire time of the schedule
    while record.has_waiting:
        first = record.runs[0].first() if record.runs else None
        head = record.buffered[0] if record.buffered else None
        if head is None or (first is not None and head.behind is not None and first <= head.behind):
            queue.append((reason, record.runs[0]))
            record = evolve(record, runs=record.runs[1:])
            continue
        record = evolve(record, buffered=record.buffered[1:])
        run = single(policy, head.scheduled_time, head.trigger) if _from_schedule(head, policy) else None
        if run is None:
            alone.append(head)
        else:
            queue.append((reason, run))
    # What waits one by one is capped (admission.MAX_TRIGGERED_WAITING), so it all fits.
    actions: list[act.Action] = [act.RecordSkipped.of(waiting, reason) for waiting in alone]
    skipped, rest = _record_some(record, _joined(queue), DROP_BATCH - len(actions))
    dropping = record.dropping + rest
    record, armed = arm(evolve(record, dropping=dropping), now if dropping else None)
    return record, actions + skipped + armed


def _from_schedule(waiting: Occurrence, policy: JobPolicy) -> bool:
    return waiting.trigger in FROM_SCHEDULE and is_clock_driven(policy.schedule)


def _joined(queue: list[Dropped]) -> list[Dropped]:
    """The queue with each run joined to the one before it when nothing lies between."""
    joined: list[Dropped] = []
    for reason, run in queue:
        both = joined[-1][1].joined(run) if joined and joined[-1][0] == reason else None
        if both is None:
            joined.append((reason, run))
        else:
            joined[-1] = (reason, both)
    return joined


def drop_unless(record: JobRecord, kept: Callable[[str], bool], reason: str) -> Result:
    """Every waiting occurrence whose trigger is not `kept` is recorded SKIPPED."""
    dropped = [waiting for waiting in record.buffered if not kept(waiting.trigger)]
    runs = [run for run in record.runs if not kept(run.trigger)]
    record = evolve(record, buffered=tuple(w for w in record.buffered if kept(w.trigger)),
                    runs=tuple(run for run in record.runs if kept(run.trigger)))
    skipped = [act.RecordSkipped.of(waiting, reason) for waiting in dropped]
    record, batch = drop_runs(record, runs, reason, DROP_BATCH - len(skipped))
    return record, skipped + batch


def drop_runs(record: JobRecord, runs: list[Run], reason: str, budget: int = DROP_BATCH) -> Result:
    """The runs' occurrences are recorded SKIPPED: `budget` of them now, the rest by later ticks."""
    actions, rest = _record_some(record, [(reason, run) for run in runs], budget)
    return evolve(record, dropping=record.dropping + rest), actions


def defer(record: JobRecord, queue: list[Dropped]) -> JobRecord:
    """The queue's occurrences are to be recorded SKIPPED by later ticks (the caller arms one)."""
    return evolve(record, dropping=tuple(_joined(list(record.dropping) + queue)))


def record_dropped(record: JobRecord) -> Result:
    """Record the next batch of the dropped occurrences SKIPPED."""
    actions, rest = _record_some(record, list(record.dropping))
    return evolve(record, dropping=rest), actions


Dropped = tuple[str, Run]  # (reason, run): occurrences to record SKIPPED with that reason


def _record_some(record: JobRecord, queue: list[Dropped],
                 budget: int = DROP_BATCH) -> tuple[list[act.Action], tuple[Dropped, ...]]:
    """SKIPPED rows for up to `budget` occurrences from the head of `queue`, and what is left of it."""
    actions: list[act.Action] = []
    while queue and len(actions) < budget:
        reason, run = queue[0]
        times = list(run.times(budget - len(actions)))
        actions += [act.RecordSkipped.of(occurrence(record, t, run.trigger, run.key), reason) for t in times]
        rest = run.without_through(times[-1]) if times else None
        if rest is None:
            queue.pop(0)
        else:
            queue[0] = (reason, rest)
    return actions, tuple(queue)
