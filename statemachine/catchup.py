"""Which fire times a tick delivers, and which it records as missed.

A tick handles every fire time in (scheduled_until, horizon]. Only the newest of
them can be on time: it is delivered when it is within `late_tolerance` of now.
Every other one was missed: it fell due while nothing ran (Sundial was down, or
the chain was broken), or a newer one is due already, so it is handled late. The
catch-up policy decides for those: `none` delivers none of them, `latest` the most
recent one within the window (only when no on-time occurrence supersedes it), `all`
each one within the window, in order. Anything older than the window is missed.

Every time recorded SKIPPED (missed, or paused) is listed, at most `scan_limit` of them
per plan: a longer backlog continues in the next tick. The times `all` delivers are not
listed but given as one range (`caught`), however many there are, so that a month's
backlog is one plan, and no tick lists tens of thousands of occurrences.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from statemachine.policy import Catchup, JobPolicy, Tuning
from statemachine.runs import before
from statemachine.schedule import Schedule, fire_times, next_fire
from statemachine.vocabulary import Trigger

SCHEDULE, CATCHUP = Trigger.SCHEDULE, Trigger.CATCHUP


@dataclass(frozen=True)
class DuePlan:
    deliver: tuple[tuple[datetime, str], ...]  # (scheduled time, trigger), in order
    missed: tuple[datetime, ...]
    paused: tuple[datetime, ...]  # fell due while the job was paused
    handled_until: datetime  # every fire time up to here is in deliver or missed
    more: bool  # the scan stopped at the limit: a follow-up tick must continue
    following: datetime | None = None  # the next fire time after handled_until, if known
    # The fire times in (after, through] are caught up (trigger catchup), before `deliver`.
    caught: tuple[datetime, datetime] | None = None


def plan_due(
    schedule: Schedule,
    since: datetime,
    horizon: datetime,
    now: datetime,
    policy: JobPolicy,
    tuning: Tuning,
    paused_through: datetime | None = None,
) -> DuePlan:
    if horizon <= since:
        return DuePlan((), (), (), since, False)
    if paused_through is None or paused_through <= since:
        single = _single_on_time(schedule, since, horizon, now, tuning)
        if single is not None:
            return single
    if policy.catchup is Catchup.ALL:
        return _plan_all(schedule, since, horizon, now, policy, tuning, paused_through)
    times = list(fire_times(schedule, since, horizon, limit=tuning.scan_limit + 1))
    more = len(times) > tuning.scan_limit
    if more:
        times = times[: tuning.scan_limit]
    handled_until = times[-1] if more else horizon
    paused = tuple(t for t in times if paused_through is not None and t <= paused_through)
    times = times[len(paused):]
    # Only the newest due fire time can be on time: the ones it supersedes are late,
    # however recent (and with more to scan, this batch holds no newest one at all).
    newest_on_time = bool(times) and not more and times[-1] >= now - tuning.late_tolerance
    on_time = times[-1:] if newest_on_time else []
    late = times[:-1] if newest_on_time else times
    caught = _caught_up(late, bool(on_time) or more, now, policy)
    caught_set = set(caught)
    return DuePlan(
        deliver=tuple((t, CATCHUP) for t in caught) + tuple((t, SCHEDULE) for t in on_time),
        missed=tuple(t for t in late if t not in caught_set),
        paused=paused,
        handled_until=handled_until,
        more=more,
    )


def _single_on_time(schedule: Schedule, since: datetime, horizon: datetime, now: datetime,
                    tuning: Tuning) -> DuePlan | None:
    """The common case, cheaply: exactly one fire time is due, and it is on time."""
    first = next_fire(schedule, since)
    if first is None or first > horizon or first < now - tuning.late_tolerance:
        return None
    following = next_fire(schedule, first)
    if following is not None and following <= horizon:
        return None
    return DuePlan(((first, SCHEDULE),), (), (), horizon, False, following)


def delivered_late(schedule: Schedule, moment: datetime, now: datetime, policy: JobPolicy,
                   tuning: Tuning) -> bool:
    """Whether the fire time `moment`, handled only `now`, is still delivered: the rule
    a tick applies (plan_due), for one occurrence judged on its own. It is on time while no
    newer fire time is due and it is within `late_tolerance`; otherwise it was missed, and
    the catch-up policy decides (a newer due one supersedes it under `latest`)."""
    following = next_fire(schedule, moment)
    superseded = following is not None and following <= now
    if not superseded and moment >= now - tuning.late_tolerance:
        return True
    return bool(_caught_up([moment], superseded, now, policy))


def _caught_up(late: list[datetime], superseded: bool, now: datetime, policy: JobPolicy) -> list[datetime]:
    """The late fire times that the catch-up policy still delivers."""
    in_window = [t for t in late if t >= now - policy.catchup_window]
    if policy.catchup is Catchup.ALL:
        return in_window
    if policy.catchup is Catchup.LATEST and not superseded:
        return in_window[-1:]
    return []


def _plan_all(schedule: Schedule, since: datetime, horizon: datetime, now: datetime, policy: JobPolicy,
              tuning: Tuning, paused_through: datetime | None) -> DuePlan:
    """`catchup: all`: the times up to `listed` are listed (paused, or missed: older than
    the window); every later one is caught up, as a range, but the newest when on time."""
    window_start = now - policy.catchup_window
    listed = max(since, min(horizon, max(paused_through or since, before(window_start))))
    times = list(fire_times(schedule, since, listed, limit=tuning.scan_limit + 1))
    paused = tuple(t for t in times if paused_through is not None and t <= paused_through)
    if len(times) > tuning.scan_limit:
        times = times[: tuning.scan_limit]
        return DuePlan((), tuple(times[len(paused):]), paused[: len(times)], times[-1], True)
    missed = times[len(paused):]
    on_time_from = now - tuning.late_tolerance
    newest = _newest(schedule, max(listed, before(on_time_from)), horizon)
    first_caught = next_fire(schedule, listed)
    if first_caught is None or first_caught > horizon:  # nothing after `listed`: the newest is listed
        if missed and missed[-1] >= on_time_from:
            return DuePlan(((missed[-1], SCHEDULE),), tuple(missed[:-1]), paused, horizon, False)
        return DuePlan((), tuple(missed), paused, horizon, False)
    through = horizon if newest is None else before(newest)
    caught = (listed, through) if first_caught <= through else None
    on_time = () if newest is None else ((newest, SCHEDULE),)
    return DuePlan(on_time, tuple(missed), paused, horizon, False, caught=caught)


def _newest(schedule: Schedule, after: datetime, until: datetime) -> datetime | None:
    """The last fire time in (after, until]; `after` is close enough to `until` for a scan."""
    newest = None
    for moment in fire_times(schedule, after, until):
        newest = moment
    return newest
