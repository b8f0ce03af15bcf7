"""How often a job is expected to run, from its definition alone (pure): the value of
/metrics' `sundial_job_expected_period_seconds`, on which docs/ALERTS.md's rule "has
not succeeded within two periods" stands.

- `every P`: P.
- a cron expression: the longer of the two gaps between fire times around `now`, the
  one from its last fire time to its next and the one before it (from the fire time
  before the last). A regular schedule (every hour, every day at 09:00) has one gap, so
  this is simply its period; an irregular one (`0 9 * * MON-FRI`) has the weekend's
  gap (72 h) from the Friday run until the Tuesday run, and a day the rest of the week.
  That is what makes the rule exact: while the job's last success is no older than its
  fire time before the last one, the time since it is shorter than these two gaps put
  together, so at most twice the period; once its last two fire times have both gone by
  without success, it is longer (for a regular schedule, as soon as the last fire time
  is past).
- `with X interval` and `continuously` (X = 0): X (or `min_backoff`, when longer) plus
  the job's `timeout`. The next run starts that long after the previous one ends, and a
  run may take up to its timeout and still succeed, so successes of a healthy job come
  at most this far apart.
- `triggered` jobs and one-off `at` times have no period (None), nor has a schedule
  that never fires again (an `end` that has passed).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from statemachine.policy import JobPolicy
from statemachine.schedule import (
    BoundedSchedule,
    CronSchedule,
    EverySchedule,
    IntervalSchedule,
    next_fire,
)

__all__ = ["expected_period"]

_SECOND = timedelta(seconds=1)
_MICROSECOND = timedelta(microseconds=1)
# How far back a fire time is looked for: a leap day's cron fires every 4 (sometimes 8)
# years, and no schedule this side of a year field fires less often than that.
_FARTHEST = timedelta(days=366 * 30)


def expected_period(policy: JobPolicy, now: datetime) -> timedelta | None:
    """The period of the job whose policy this is, as it stands at `now` (the module's
    doc); None for a job that is not expected to run by the clock any more."""
    schedule = policy.schedule
    if isinstance(schedule, IntervalSchedule):
        return max(schedule.interval, policy.retry.min_backoff) + policy.timeout
    if isinstance(schedule, BoundedSchedule):
        if next_fire(schedule, now) is None:
            return None  # past its `end`
        schedule = schedule.inner
    if isinstance(schedule, EverySchedule):
        return schedule.period
    if isinstance(schedule, CronSchedule):
        return _cron_period(schedule, now)
    return None  # triggered, `at`


@dataclass(frozen=True)
class _Measured:
    """A cron schedule's period, the same from its last fire time (`since`) until its
    next (`until`): every job of the schedule reads it there without a `next_fire`."""

    since: datetime
    until: datetime
    period: timedelta | None


_MEASURED: dict[CronSchedule, _Measured] = {}
_MEASURED_MOST = 65536  # distinct schedules kept; a project of 10,000 jobs may have as many


def _cron_period(schedule: CronSchedule, now: datetime) -> timedelta | None:
    known = _MEASURED.get(schedule)
    if known is None or not known.since <= now < known.until:
        known = _measure(schedule, now)
        if len(_MEASURED) >= _MEASURED_MOST:
            _MEASURED.clear()
        _MEASURED[schedule] = known
    return known.period


def _measure(schedule: CronSchedule, now: datetime) -> _Measured:
    """The longer of the gaps before the next fire time and before the last one; the gap
    after the next one where there is no fire time before it (the first ever)."""
    upcoming = next_fire(schedule, now)
    if upcoming is None:
        return _Measured(now, datetime.max.replace(tzinfo=now.tzinfo), None)  # fires no more
    following = next_fire(schedule, upcoming)
    ahead = None if following is None else following - upcoming
    last = _last_fire_before(schedule, upcoming, ahead or _SECOND)
    if last is None:
        return _Measured(datetime.min.replace(tzinfo=now.tzinfo), upcoming, ahead)
    previous = _last_fire_before(schedule, last, upcoming - last)
    period = upcoming - last if previous is None else max(upcoming - last, last - previous)
    return _Measured(last, upcoming, period)


def _last_fire_before(schedule: CronSchedule, moment: datetime, guess: timedelta) -> datetime | None:
    """The latest fire time before `moment`. Most schedules are even, so `guess` back
    (the gap next to it) is tried first: two `next_fire` calls. Otherwise a window
    reaching back widens (four times each round) until a fire time falls inside, then
    halves down to a second, cron's resolution: a few dozen calls, where listing every
    fire time of the window could be thousands (`* * * * MON` on a Tuesday)."""
    candidate = moment - guess
    if next_fire(schedule, candidate - _MICROSECOND) == candidate and next_fire(schedule, candidate) == moment:
        return candidate
    span = max(guess, _SECOND)
    while True:
        start = moment - span
        found = next_fire(schedule, start)
        if found is not None and found < moment:
            return _bisect(schedule, start, moment)
        if span >= _FARTHEST:
            return None
        span = min(span * 4, _FARTHEST)


def _bisect(schedule: CronSchedule, low: datetime, moment: datetime) -> datetime | None:
    """The last fire time before `moment`, given one after `low`: a fire time after an
    instant before the last is that one or earlier; after any later instant it is
    `moment` or later. Narrowed to a second, the window holds one whole second."""
    high = moment
    while high - low > _SECOND:
        middle = low + (high - low) / 2
        found = next_fire(schedule, middle)
        if found is not None and found < moment:
            low = middle
        else:
            high = middle
    return next_fire(schedule, low)
