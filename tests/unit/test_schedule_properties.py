"""Properties of fire times, checked with hypothesis around real daylight-saving changes."""

from datetime import datetime, timedelta, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from statemachine.schedule import (
    ScheduleError,
    fire_times,
    is_hourly_wild,
    next_fire,
    parse_schedule,
)
from statemachine.zones import next_cron

UTC = timezone.utc
MINUTE = timedelta(minutes=1)
ZONES = ["America/Los_Angeles", "Europe/London", "Australia/Lord_Howe", "America/Santiago",
         "America/Havana", "Pacific/Chatham", "America/St_Johns", "Asia/Kolkata", "UTC"]
DST_ZONES = ZONES[:7]
FAST = settings(max_examples=200, deadline=None)


@lru_cache(maxsize=None)
def transitions(zone: str) -> tuple[datetime, ...]:
    """Instants (UTC) in 2025-2027 at which the zone's offset changes, to the minute."""
    tz, found = ZoneInfo(zone), []
    moment = datetime(2025, 1, 1, tzinfo=UTC)
    previous = moment.astimezone(tz).utcoffset()
    while moment < datetime(2028, 1, 1, tzinfo=UTC):
        moment += timedelta(hours=1)
        offset = moment.astimezone(tz).utcoffset()
        if offset != previous:
            low = moment - timedelta(hours=1)
            while moment - low > MINUTE:
                middle = low + (moment - low) / 2
                if middle.astimezone(tz).utcoffset() == offset:
                    moment = middle
                else:
                    low = middle
            found.append(moment)
            previous = offset
    return tuple(found)


@st.composite
def instants(draw, zone: str) -> datetime:
    """An instant, usually within a few hours of one of the zone's transitions."""
    seconds = st.integers(-6 * 3600, 6 * 3600).map(lambda s: timedelta(seconds=s))
    if zone in DST_ZONES and draw(st.integers(0, 3)):  # three times in four
        return draw(st.sampled_from(transitions(zone))) + draw(seconds)
    return draw(st.datetimes(datetime(2020, 1, 1), datetime(2035, 1, 1), timezones=st.just(UTC)))


UNIX = st.tuples(
    st.sampled_from(["*", "0", "30", "*/15", "0,30", "5-10", "*/7", "59", "45"]),
    st.sampled_from(["*", "*/1", "0/1", "1", "2", "0-3", "*/2", "1,2", "22-2", "0", "23"]),
    st.sampled_from(["*", "1", "15", "L", "1W", "LW", "29", "31", "1-7", "*/3"]),
    st.sampled_from(["*", "*/2", "2", "MAR-OCT", "11", "3,4,9,10"]),
    st.sampled_from(["*", "MON-FRI", "0", "SAT,SUN", "5L", "1#2", "?"]),
).map(" ".join)
QUARTZ = st.tuples(
    st.sampled_from(["0", "30", "*/20"]),
    st.sampled_from(["0", "*/15", "30", "0-5"]),
    st.sampled_from(["*", "0/1", "1", "2", "1-3", "0/2", "3"]),
    st.sampled_from([("?", "*"), ("*", "?"), ("L", "?"), ("15W", "?"), ("?", "6L"),
                     ("?", "2#1"), ("?", "2-6"), ("L-2", "?"), ("?", "1,7")]),
    st.sampled_from(["*", "JAN-JUN", "4", "10"]),
).map(lambda p: f"{p[0]} {p[1]} {p[2]} {p[3][0]} {p[4]} {p[3][1]}")
EXPRESSIONS = UNIX | QUARTZ


def schedule_or_skip(expression: str, zone: str):
    try:
        return parse_schedule(expression, zone)
    except ScheduleError:
        assume(False)  # e.g. `31` in February only: refused as never firing


@FAST
@given(st.data(), EXPRESSIONS, st.sampled_from(ZONES))
def test_next_fire_is_strictly_after_and_a_real_matching_local_time(data, expression, zone):
    schedule = schedule_or_skip(expression, zone)
    after = data.draw(instants(zone))
    found = next_fire(schedule, after)
    assert found is not None and found > after and found.tzinfo is UTC
    tz = ZoneInfo(zone)
    local = found.astimezone(tz)
    wall = local.replace(tzinfo=None)
    # The wall time exists: it maps back to the same instant.
    assert wall.replace(tzinfo=tz, fold=local.fold).astimezone(UTC) == found
    if not _matches(schedule, wall):
        # Only a fixed-hour time skipped by a gap may fire at a wall time it does not name,
        # and then only at the first instant after the gap.
        assert not is_hourly_wild(schedule)
        assert (found - timedelta(seconds=1)).astimezone(tz).utcoffset() < local.utcoffset()


def _matches(schedule, wall: datetime) -> bool:
    return schedule._spec.first_match(wall) == wall


@FAST
@given(st.data(), EXPRESSIONS, st.sampled_from(DST_ZONES))
def test_no_fire_is_skipped_between_after_and_the_next_fire(data, expression, zone):
    schedule = schedule_or_skip(expression, zone)
    after = data.draw(instants(zone))
    found = next_fire(schedule, after)
    assert found is not None
    gap = (found - after) // timedelta(microseconds=1)
    later = after + timedelta(microseconds=data.draw(st.integers(0, gap - 1)))
    assert next_fire(schedule, later) == found


@FAST
@given(st.data(), EXPRESSIONS, st.sampled_from(DST_ZONES))
def test_fire_times_increase_and_fixed_hours_never_repeat_a_wall_time(data, expression, zone):
    schedule = schedule_or_skip(expression, zone)
    after = data.draw(instants(zone))
    found = list(fire_times(schedule, after, after + timedelta(days=2), limit=300))
    assert all(a < b for a, b in zip(found, found[1:]))
    if not is_hourly_wild(schedule):
        walls = [moment.astimezone(ZoneInfo(zone)).replace(tzinfo=None) for moment in found]
        assert len(set(walls)) == len(walls)


@FAST
@given(st.data(), st.sampled_from(["0 30 2 * * ?", "0 0 1 * * ?", "0 45 1 * * ?",
                                   "0 0 0 * * ?", "0 15 2 * * ?", "0 0 23 * * ?", "30 1 * * *"]),
       st.sampled_from(DST_ZONES))
def test_a_once_a_day_fixed_job_fires_exactly_once_per_local_date(data, expression, zone):
    tz = ZoneInfo(zone)
    near = data.draw(instants(zone)).astimezone(tz).date()
    start = datetime(near.year, near.month, near.day, tzinfo=UTC) - timedelta(days=1)
    found = fire_times(parse_schedule(expression, zone), start, start + timedelta(days=3))
    dates = [moment.astimezone(tz).date() for moment in found]
    assert dates.count(near) == 1


SIMPLE_UNIX = st.tuples(
    st.sampled_from(["*", "0", "30", "*/15", "0,30", "5-10", "*/7", "59"]),
    st.sampled_from(["*", "*/1", "1", "2", "0-3", "*/2", "1,2", "22-2", "0", "23", "3"]),
    # Not `*/1` or `0-6`: croniter's notion of an open day field is a quirk of its own
    # (see test_schedule_croniter_differences).
    st.sampled_from(["*", "1", "15", "29", "31", "1-7", "*/3", "1-31", "?"]),
    st.sampled_from(["*", "*/2", "MAR-OCT", "3,4,9,10,11"]),
    st.sampled_from(["*", "MON-FRI", "0", "SAT,SUN", "7", "1-3", "?"]),
).map(" ".join)


@settings(max_examples=100, deadline=None)
@given(st.data(), SIMPLE_UNIX, st.sampled_from(DST_ZONES))
def test_fire_times_match_a_minute_by_minute_reading_of_the_contract(data, expression, zone):
    """Brute force: walk every UTC minute of an 8-hour window and apply docs/REFERENCE.md section 3."""
    schedule = schedule_or_skip(expression, zone)
    start = data.draw(instants(zone)).replace(second=0, microsecond=0)
    end = start + timedelta(hours=8)
    assert list(fire_times(schedule, start, end)) == _oracle(expression, zone, start, end)


def _oracle(expression: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """Fire times in (start, end] by the contract's words, matching with croniter's fields."""
    tz, wild = ZoneInfo(zone), _croniter_fields(expression)[1] is None
    fires, moment = set(), start
    while moment < end:
        moment += MINUTE
        local = moment.astimezone(tz)
        if _cron_match(expression, local) and (wild or not local.fold):
            fires.add(moment)  # a wall time that exists; fixed hours: first occurrence only
        before = (moment - MINUTE).astimezone(tz)
        if not wild and local.utcoffset() > before.utcoffset():  # a gap ends at `moment`
            wall = before.replace(tzinfo=None) + MINUTE
            while wall < local.replace(tzinfo=None):  # every missing wall minute
                if _cron_match(expression, wall):
                    fires.add(moment)
                wall += MINUTE
    return sorted(fires)


@lru_cache(maxsize=None)
def _croniter_fields(expression: str) -> list[set[int] | None]:
    """croniter's expansion of each field; None for a field that allows everything."""
    fields = croniter.expand(expression)[0]
    full = (60, 24, 31, 12, 7)
    return [None if f == ["*"] or (i == 1 and len(f) == full[i]) else set(f)
            for i, f in enumerate(fields)]


def _cron_match(expression: str, wall: datetime) -> bool:
    minute, hour, dom, month, dow = _croniter_fields(expression)
    def allows(values, value):
        return values is None or value in values
    if not (allows(minute, wall.minute) and allows(hour, wall.hour)
            and allows(month, wall.month)):
        return False
    by_day, by_week = allows(dom, wall.day), allows(dow, wall.isoweekday() % 7)
    if dom is not None and dow is not None and not _from_star(expression):
        return by_day or by_week  # crontab(5) ORs two restricted day fields ...
    return by_day and by_week


def _from_star(expression: str) -> bool:
    """... unless one is written from `*` (`*/3`): then both must match."""
    return any(field.startswith("*") for field in expression.split()[2:5:2])


@FAST
@given(SIMPLE_UNIX, st.datetimes(datetime(2000, 1, 1), datetime(2040, 1, 1)))
def test_agrees_with_croniter_in_utc_for_plain_unix_expressions(expression, after):
    schedule = schedule_or_skip(expression, "UTC")
    fields = _croniter_fields(expression)
    assume(not (_from_star(expression) and fields[2] is not None and fields[4] is not None))
    expected = croniter(expression, after).get_next(datetime)  # croniter ORs `*/3` + `MON`
    assert next_fire(schedule, after.replace(tzinfo=UTC)) == expected.replace(tzinfo=UTC)


@FAST
@given(st.integers(1000, 10**7), st.data(),
       st.datetimes(datetime(1960, 1, 1), datetime(2100, 1, 1), timezones=st.just(UTC)))
def test_every_fires_on_the_epoch_grid_within_one_period(period_ms, data, after):
    offset_ms = data.draw(st.integers(0, period_ms - 1))
    period, offset = timedelta(milliseconds=period_ms), timedelta(milliseconds=offset_ms)
    found = next_fire(parse_schedule(f"every {period_ms}ms offset {offset_ms}ms"), after)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert after < found <= after + period
    assert (found - epoch - offset) % period == timedelta(0)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(ZONES).flatmap(lambda zone: st.tuples(st.just(zone), instants(zone))),
       st.sampled_from(["0 30 2 * * ?", "*/7 * * * * ?", "59 59 1 * * ?", "0 0 * * * ?", "15 * 2-3 * * ?",
                        "0 0 3 ? * SUN", "30 */10 * * * ?"]),
       st.integers(0, 999_999), st.integers(0, 999_999))
def test_next_fire_within_one_second_is_that_seconds_whatever_the_microseconds(zoned, text, first, second):
    # next_fire keeps one answer per (schedule, second): it must be what next_cron says
    # for each instant of that second, asked in either order.
    zone, moment = zoned
    schedule = parse_schedule(text, zone)
    for micro in (first, second, 0):
        after = moment.replace(microsecond=micro)
        assert next_fire(schedule, after) == next_cron(schedule._spec, schedule._zone, after)
        assert next_fire(schedule, after) > after
