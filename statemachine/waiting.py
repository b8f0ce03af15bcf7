"""Occurrences that wait for the overlap policy to let them start, kept so that the job
record's size does not grow with their number.

Two queues, in one order: the order they came in.
- `runs`: waiting fire times of a clock-driven schedule (`schedule` ones under
  `buffer_all`, `catchup` ones under `catchup: all`), as ranges of the schedule
  (statemachine/runs.py). A fire time that came right after the last run's, with the
  same trigger, extends it; one after a gap (times recorded SKIPPED or started in
  between), or with the other trigger, opens a new run. Runs are capped (MAX_RUNS):
  an occurrence that would open one more is recorded SKIPPED/overlap.
- `buffered`: occurrences one by one: a person's and other jobs' triggers (capped
  under `buffer_all`, see invocations.MAX_TRIGGERED_WAITING), a relative schedule's
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
from statemachine.chain import arm
from statemachine.policy import JobPolicy
from statemachine.record import JobRecord, Occurrence, evolve
from statemachine.runs import Run, single
from statemachine.schedule import is_clock_driven
from statemachine.vocabulary import SkipReason, Trigger

Result = tuple[JobRecord, list[act.Action]]

MAX_RUNS = 50  # about 130 bytes each in the stored record
DROP_BATCH = 1000  # SKIPPED rows written by one step for occurrences that stop waiting

FROM_SCHEDULE = (Trigger.SCHEDULE, Trigger.CATCHUP)


def occurrence(record: JobRecord, moment: datetime, trigger: str) -> Occurrence:
    """The occurrence of the job's schedule at `moment`, with its deterministic id."""
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
    return drop_runs(record, [run], SkipReason.OVERLAP)


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
        record, first, run.trigger)


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
    `reason`. The job's tick goes too, unless one is needed for the rest of the rows."""
    actions: list[act.Action] = []
    while record.has_waiting and len(actions) < DROP_BATCH:
        record, head = pop(record)
        actions.append(act.RecordSkipped.of(head, reason))
    actions += [act.RecordSkipped.of(waiting, reason) for waiting in record.buffered]
    dropping = record.dropping + tuple((reason, run) for run in record.runs)
    record, armed = arm(evolve(record, buffered=(), runs=(), dropping=dropping), now if dropping else None)
    return record, actions + armed


def drop_unless(record: JobRecord, kept: Callable[[str], bool], reason: str) -> Result:
    """Every waiting occurrence whose trigger is not `kept` is recorded SKIPPED."""
    dropped = [waiting for waiting in record.buffered if not kept(waiting.trigger)]
    runs = [run for run in record.runs if not kept(run.trigger)]
    record = evolve(record, buffered=tuple(w for w in record.buffered if kept(w.trigger)),
                    runs=tuple(run for run in record.runs if kept(run.trigger)))
    record, skipped = drop_runs(record, runs, reason)
    return record, [act.RecordSkipped.of(waiting, reason) for waiting in dropped] + skipped


def drop_runs(record: JobRecord, runs: list[Run], reason: str) -> Result:
    """The runs' occurrences are recorded SKIPPED: DROP_BATCH of them now, the rest by later ticks."""
    actions, rest = _record_some(record, [(reason, run) for run in runs])
    return evolve(record, dropping=record.dropping + rest), actions


def record_dropped(record: JobRecord) -> Result:
    """Record the next batch of the dropped occurrences SKIPPED."""
    actions, rest = _record_some(record, list(record.dropping))
    return evolve(record, dropping=rest), actions


Dropped = tuple[str, Run]  # (reason, run): occurrences to record SKIPPED with that reason


def _record_some(record: JobRecord, queue: list[Dropped]) -> tuple[list[act.Action], tuple[Dropped, ...]]:
    """SKIPPED rows for up to DROP_BATCH occurrences from the head of `queue`, and what is left of it."""
    actions: list[act.Action] = []
    while queue and len(actions) < DROP_BATCH:
        reason, run = queue[0]
        times = list(run.times(DROP_BATCH - len(actions)))
        actions += [act.RecordSkipped.of(occurrence(record, t, run.trigger), reason) for t in times]
        rest = run.without_through(times[-1]) if times else None
        if rest is None:
            queue.pop(0)
        else:
            queue[0] = (reason, rest)
    return actions, tuple(queue)
