"""Backfills and re-runs: which past occurrences a person may ask for again.

A backfill is every fire time of the job's own schedule in [start, end), each as an
invocation of its own (trigger `backfill`, its own scheduled time and template values).
The times travel as one run (statemachine/runs.py) whose `key` is the request's id, so
the record holds a range however many times it covers, and each invocation is written
by the step that starts it: a thousand times never meet in one commit. The ids follow
from (job, time, request id), so a request repeated with the same id names the same
invocations, and never those of the schedule's own occurrences at the same times.

Backfills are for the past: `end` may not be later than now, nor `start` earlier than
1970 (invocation ids count milliseconds from there, statemachine/ids.py). A re-run (a person's
trigger with a scheduled time) names one past instant, any instant within the job's
history window (a manual trigger's time is not a fire time of the schedule, and
re-running it is fair).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from statemachine import ids
from statemachine.errors import SundialError
from statemachine.policy import JobPolicy
from statemachine.runs import Run, before, of_policy
from statemachine.schedule import IntervalSchedule, is_clock_driven
from statemachine.vocabulary import Trigger

MAX_BACKFILL = 1000  # invocations one backfill request may ask for
_COUNTED = 100_000  # how far an over-long range is counted for its error message
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class BackfillError(SundialError):
    """The request cannot be a backfill or a re-run as asked; the message says why."""


@dataclass(frozen=True)
class Backfill:
    run: Run | None  # None: no fire time in the range
    times: tuple[datetime, ...]

    def invocation_ids(self, project: str, job_id: str) -> list[str]:
        key = self.run.key if self.run is not None else ""
        return [ids.invocation_id(project, job_id, t, ids.BACKFILL, key) for t in self.times]


def plan(policy: JobPolicy, start: datetime, end: datetime, now: datetime, key: str,
         limit: int = MAX_BACKFILL) -> Backfill:
    """The fire times of the policy's schedule in [start, end), as one run keyed `key`."""
    _require_aware(start, "start")
    _require_aware(end, "end")
    if start >= end:
        raise BackfillError(f"start ({_shown(start)}) must be before end ({_shown(end)})")
    if start < _EPOCH:
        raise BackfillError(f"start ({_shown(start)}) is before 1970-01-01T00:00:00Z, where invocation ids "
                            "begin counting")
    if end > now:
        raise BackfillError(f"end ({_shown(end)}) is in the future (now is {_shown(now)}); a backfill "
                            "covers past fire times only, and the schedule delivers the later ones")
    _require_fire_times(policy)
    run = of_policy(policy, before(start), before(end), Trigger.BACKFILL, key)
    if run is None:
        return Backfill(None, ())
    times = tuple(run.times(limit + 1))
    if len(times) > limit:
        counted = sum(1 for _ in run.times(_COUNTED + 1))
        many = f"more than {_COUNTED:,}" if counted > _COUNTED else f"{counted:,}"
        raise BackfillError(f"the range holds {many} fire times of the job's schedule; a backfill may ask "
                            f"for at most {limit:,}: split the range")
    return Backfill(run, times)


def rerun_time(scheduled_time: datetime, now: datetime, history: timedelta | None = None) -> datetime:
    """The scheduled time of a re-run, to the millisecond (the resolution of invocation
    ids and of X-Sundial-Scheduled-Time). It must be past (or now), and no earlier than
    the job's history window (`history` before now; None: no window), nor than 1970
    (invocation ids count milliseconds from there)."""
    _require_aware(scheduled_time, "scheduled_time")
    if scheduled_time > now:
        raise BackfillError(f"scheduled_time ({_shown(scheduled_time)}) is in the future (now is "
                            f"{_shown(now)}); a re-run repeats a past occurrence")
    if history is not None and history < now - _EPOCH:
        earliest, window = now - history, f"the history window ({history.days} days)"
    else:
        earliest, window = _EPOCH, "1970"
    if scheduled_time < earliest:
        raise BackfillError(f"scheduled_time ({_shown(scheduled_time)}) is before {_shown(earliest)}: a re-run "
                            f"repeats an occurrence no older than {window}")
    return scheduled_time.replace(microsecond=scheduled_time.microsecond // 1000 * 1000)


def _require_fire_times(policy: JobPolicy) -> None:
    schedule = policy.schedule
    if isinstance(schedule, IntervalSchedule):
        raise BackfillError(f"the job's schedule '{policy.schedule_text}' counts from the end of each "
                            "invocation, so it has no fire times to backfill; trigger it instead")
    if not is_clock_driven(schedule):
        raise BackfillError(f"the job's schedule '{policy.schedule_text}' has no fire times to backfill "
                            "(it runs only when triggered); trigger it instead")


def _require_aware(moment: datetime, name: str) -> None:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise BackfillError(f"{name} must carry an offset or Z")


def _shown(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")
