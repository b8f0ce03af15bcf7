"""A job's policies and the pure functions that apply them.

A `JobPolicy` is the part of a job's definition that the state machine needs:
when it fires, what overlapping and missed occurrences do, how long an
invocation may take, how attempts are retried and how an occurrence fans out.
Targets and templates are the shell's business and are not here.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

from statemachine import schedule as schedules
from statemachine.budget import ROWS_PER_STEP
from statemachine.calendars import Calendar
from statemachine.vocabulary import Trigger


class Overlap(str, Enum):
    """What an occurrence does while an invocation of its job is still active."""

    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    BUFFER_ALL = "buffer_all"
    ALLOW = "allow"
    REPLACE = "replace"  # abort the active invocation (ABORTED/replaced) and start the new one


class Catchup(str, Enum):
    """What happens to occurrences whose time passed while their tick was late."""

    NONE = "none"
    LATEST = "latest"
    ALL = "all"


@dataclass(frozen=True)
class RetryPolicy:
    """Attempts of one delivery: `max_attempts` in all, exponential backoff between."""

    max_attempts: int = 1
    min_backoff: timedelta = timedelta(seconds=1)
    max_backoff: timedelta = timedelta(minutes=5)


@dataclass(frozen=True)
class FanoutPolicy:
    """`count` events per occurrence, event i due at scheduled time + i * spread / count."""

    count: int = 1
    spread: timedelta = timedelta(0)


@dataclass(frozen=True)
class Tuning:
    """Timings of the chain itself, the same for every job of a deployment.

    Tests of the shell shrink them; the defaults suit Cloud Tasks.
    """

    # A tick more than this early is re-armed for its time; less early but more
    # than `accept_early` is handed back to the queue to retry.
    rearm_early: timedelta = timedelta(seconds=1)
    accept_early: timedelta = timedelta(milliseconds=50)
    # How long past its time a tick may still arrive before the watchdog re-arms it.
    tick_grace: timedelta = timedelta(seconds=30)
    # How long past its due time an attempt may still start before the watchdog
    # re-issues it.
    start_grace: timedelta = timedelta(seconds=60)
    # An occurrence handled within this time of its scheduled time is on time;
    # older ones are "missed" and go through the catch-up policy.
    late_tolerance: timedelta = timedelta(seconds=60)
    # At most this many fire times are examined in one transaction; a longer
    # backlog continues in an immediate follow-up tick.
    scan_limit: int = ROWS_PER_STEP
    # How long before its time an occurrence may be staged (statemachine/staging.py):
    # its tick runs this early, commits the attempt as starting, and the request waits
    # in the sending process until the occurrence's time. Zero: no staging (Cloud
    # Tasks runs each tick at its time).
    stage_ahead: timedelta = timedelta(0)
    # How much earlier than its task's time a queue may run a staging tick: the
    # embedded dispatcher hands the early ticks that fall due close together to one
    # transaction at the start of their grain, so the composition root sets this to
    # cover that grain (app/bootstrap.py; engine/adapters/local/early_ticks.py).
    early_slack: timedelta = timedelta(milliseconds=250)
    # Whether a fan-out invocation keeps each event's progress in a row of its own (job
    # record version 2, statemachine/fanout.py) or inline in the record (version 1, all
    # that the release before this one reads). The composition root sets it from the
    # operator's written-layout switch (SUNDIAL_RECORD_VERSION: rows unless set to 1 to
    # prepare a rollback); the core's own tests keep rows.
    fanout_rows: bool = True

    @property
    def stages(self) -> bool:
        """Whether this backend stages occurrences at all: only then does a step look
        for staged attempts to give up (staging.after_step)."""
        return self.stage_ahead > timedelta(0)


DEFAULT_TUNING = Tuning()


@dataclass(frozen=True)
class JobPolicy:
    """Everything the state machine needs to know about a job's definition.

    Its field defaults are Sundial's builtin defaults, written only here: the config's
    (config/model.py BUILTIN_DEFAULTS) and the definition's (statemachine/definition.py)
    are read from them. Where nothing else decides, they follow Cloud Scheduler and
    Temporal: one attempt, no overlap, catch up the latest missed occurrence of the last hour.
    """

    schedule_text: str = "triggered"
    timezone: str = "UTC"
    at: tuple[datetime, ...] = ()
    overlap: Overlap = Overlap.SKIP
    max_concurrent: int = 1
    catchup: Catchup = Catchup.LATEST
    catchup_window: timedelta = timedelta(hours=1)
    timeout: timedelta = timedelta(minutes=10)
    # The longest one attempt may take (the target's own timeout); a start task
    # that comes again later than this after its attempt started is taken as the
    # redelivery of an attempt lost with its process, and delivered again.
    attempt_timeout: timedelta = timedelta(seconds=60)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    fanout: FanoutPolicy = field(default_factory=FanoutPolicy)
    # Jobs started when an invocation ends SUCCEEDED (`triggers`), and when it ends FAILED
    # (`triggers` entries with `on: failed` or `on: finished`; those with `finished` are in both).
    triggers: tuple[str, ...] = ()
    triggers_on_failure: tuple[str, ...] = ()
    # Fan-in (statemachine/fanin.py): the upstream jobs that must each SUCCEED for one
    # scheduled time before this job runs for it (`after`), and how long after the first
    # upstream's report the others have (`after_window`); then the time is SKIPPED/upstream.
    after: tuple[str, ...] = ()
    after_window: timedelta = timedelta(hours=1)
    # The jobs whose `after` names this one: each end of an invocation of this one is
    # reported to them (set by the config import, which sees the whole project).
    reports_to: tuple[str, ...] = ()
    # The project throttle this job's deliveries count against ("" for none). A
    # throttled job never delivers inline after a tick: every attempt goes through
    # a start task on the throttle's queue, whose concurrency is the throttle.
    throttle: str = ""
    # Pause the job after this many consecutive FAILED invocations (0: never).
    pause_after_failures: int = 0
    # The job has an `on_failure` target: a FAILED invocation enqueues its notification.
    notify_failures: bool = False
    # The job has an `on_recovery` target: the first SUCCEEDED invocation after FAILED
    # ones enqueues its notification (statemachine/hooks.py).
    notify_recoveries: bool = False
    # Each occurrence of the schedule is delivered up to this much after its time, by a
    # fixed amount per (job, scheduled time): see `occurrence_delay`.
    jitter: timedelta = timedelta(0)
    # No occurrence of a clock-driven schedule before `start` nor after `end` (both fire).
    start: datetime | None = None
    end: datetime | None = None
    # Exclusion calendars: an occurrence of the schedule (on time or caught up) whose time
    # falls in one is recorded SKIPPED/excluded instead of starting (statemachine/calendars.py).
    exclude: tuple[Calendar, ...] = ()
    # Identifies the definition this policy came from (a hash of the whole job
    # entry, target included); equal revisions mean nothing to do.
    revision: str = ""
    # The stored fields of a later release that this one does not know, as JSON text
    # ("" for none): kept as read and written back (stored_form.py), so that a rollback
    # to this release loses nothing the later one needs when it comes back.
    later: str = ""

    @property
    def schedule(self) -> schedules.Schedule:
        # Asked for several times in every step of the job: built once per policy object,
        # and kept with the timing it was built from (a copy with a new timing, which
        # `record.evolve` would make by copying this object's state, builds its own).
        timing = self.timing_key()
        cached = self.__dict__.get("_schedule")
        if cached is not None and cached[0] == timing:
            return cached[1]  # type: ignore[no-any-return]
        built = self._build_schedule()
        object.__setattr__(self, "_schedule", (timing, built))
        return built

    def _build_schedule(self) -> schedules.Schedule:
        inner = schedules.AtSchedule(self.at) if self.at else schedules.parse_schedule(
            self.schedule_text, self.timezone)
        if (self.start is None and self.end is None) or not schedules.is_clock_driven(inner):
            return inner
        return schedules.BoundedSchedule(inner, self.start, self.end)  # type: ignore[arg-type]

    def timing_key(self) -> tuple[object, ...]:
        """The fields that decide fire times; a change to them re-plans the job."""
        return (self.schedule_text, self.timezone, self.at, self.start, self.end)

    def concurrency_limit(self) -> int:
        return self.max_concurrent if self.overlap is Overlap.ALLOW else 1


# Notifications of a failed invocation (`on_failure`) are retried on their own, fixed
# policy: the job's own retry policy defaults to a single attempt, too few for a
# message whose whole point is to get through when things are going wrong.
NOTIFY_RETRY = RetryPolicy(max_attempts=5, min_backoff=timedelta(seconds=1), max_backoff=timedelta(minutes=1))

# An attempt interrupted (its process died or stopped, or its task's run was lost before
# an answer) is sent again under its invocation id without counting against
# `max_attempts`, up to this many times per invocation (per event, for a fan-out's events
# in rows); a further interruption counts as a failed attempt: retried if attempts remain,
# else FAILED/`interrupted`. The bound ends a loop in which the attempt itself brings its
# process down (a crash on its answer), which would otherwise never let the job go.
MAX_INTERRUPTIONS = 3
INTERRUPTED = "interrupted"  # the reason such an attempt fails with (docs/REFERENCE.md section 4)


def exponential_step(first: timedelta, most: timedelta, failures: int) -> timedelta:
    """`first`, doubled for each failure in a row after the first (1-based), capped at
    `most`: the one backoff curve, under the machine's jittered retries and the shell's own."""
    step: timedelta = first * (2 ** min(failures - 1, 40))
    return min(step, most)


def compute_backoff(retry: RetryPolicy, failed_attempt: int, jitter_key: str) -> timedelta:
    """The wait before the attempt after `failed_attempt` (1-based).

    Exponential from `min_backoff` (exponential_step), plus a deterministic jitter of up
    to half of it chosen by hashing `jitter_key`, so retries of many invocations spread
    out and a replay of the same decision gives the same answer. The jitter only adds:
    no attempt follows the previous one's answer by less than `min_backoff`. The total
    stays within `max_backoff` (where the step has reached it, the wait is exactly that).
    """
    step = exponential_step(retry.min_backoff, retry.max_backoff, failed_attempt)
    digest = hashlib.blake2b(f"{jitter_key}/{failed_attempt}".encode(), digest_size=8).digest()
    fraction = int.from_bytes(digest, "big") / 2**64
    jittered: timedelta = step + step * (fraction / 2)
    return max(step, min(jittered, retry.max_backoff))


def occurrence_delay(policy: JobPolicy, project: str, job_id: str, scheduled_time: datetime,
                     trigger: str) -> timedelta:
    """How long after its scheduled time an occurrence's first attempt is due: its
    `jitter` share, in [0, jitter) whole milliseconds, for occurrences of the schedule
    (on time or caught up); none for manual, backfill and job triggers.

    A hash of (project, job, scheduled time in ms), not a draw: a retry, the watchdog
    and a second process all compute the same delay for the same occurrence.
    """
    span = int(policy.jitter / timedelta(milliseconds=1))
    if span <= 0 or trigger not in (Trigger.SCHEDULE, Trigger.CATCHUP):
        return timedelta(0)
    ms = int((scheduled_time - schedules.EPOCH) / timedelta(milliseconds=1))
    digest = hashlib.sha256(f"{project}/{job_id}/{ms}".encode()).digest()
    return timedelta(milliseconds=int.from_bytes(digest[:8], "big") % span)


def fanout_offsets(fanout: FanoutPolicy) -> list[timedelta]:
    """Offsets from the scheduled time of each event of one occurrence."""
    if fanout.count == 1:
        return _NO_OFFSET
    return [fanout.spread * index / fanout.count for index in range(fanout.count)]


_NO_OFFSET = [timedelta(0)]  # (callers only read it)
