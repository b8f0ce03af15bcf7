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


class Overlap(str, Enum):
    """What an occurrence does while an invocation of its job is still active."""

    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    BUFFER_ALL = "buffer_all"
    ALLOW = "allow"


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
    scan_limit: int = 1000


DEFAULT_TUNING = Tuning()


@dataclass(frozen=True)
class JobPolicy:
    """Everything the state machine needs to know about a job's definition.

    Its field defaults are Sundial's builtin defaults, written only here: the config's
    (config/model.py BUILTIN_DEFAULTS) and the definition's (statemachine/definition.py)
    are read from them. Where the contract is silent they follow Cloud Scheduler and
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
    triggers: tuple[str, ...] = ()
    # The project throttle this job's deliveries count against ("" for none). A
    # throttled job never delivers inline after a tick: every attempt goes through
    # a start task on the throttle's queue, whose concurrency is the throttle.
    throttle: str = ""
    # Pause the job after this many consecutive FAILED invocations (0: never).
    pause_after_failures: int = 0
    # The job has an `on_failure` target: a FAILED invocation enqueues its notification.
    notify_failures: bool = False
    # Identifies the definition this policy came from (a hash of the whole job
    # entry, target included); equal revisions mean nothing to do.
    revision: str = ""

    @property
    def schedule(self) -> schedules.Schedule:
        if self.at:
            return schedules.AtSchedule(self.at)
        return schedules.parse_schedule(self.schedule_text, self.timezone)

    def timing_key(self) -> tuple[object, ...]:
        """The fields that decide fire times; a change to them re-plans the job."""
        return (self.schedule_text, self.timezone, self.at)

    def concurrency_limit(self) -> int:
        return self.max_concurrent if self.overlap is Overlap.ALLOW else 1


# Notifications of a failed invocation (`on_failure`) are retried on their own, fixed
# policy: the job's own retry policy defaults to a single attempt, too few for a
# message whose whole point is to get through when things are going wrong.
NOTIFY_RETRY = RetryPolicy(max_attempts=5, min_backoff=timedelta(seconds=1), max_backoff=timedelta(minutes=1))


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


def fanout_offsets(fanout: FanoutPolicy) -> list[timedelta]:
    """Offsets from the scheduled time of each event of one occurrence."""
    return [fanout.spread * index / fanout.count for index in range(fanout.count)]
