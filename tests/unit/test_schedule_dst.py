"""Daylight saving, exactly as docs/REFERENCE.md section 3 says, in 2026.

America/Los_Angeles: gap 02:00 -> 03:00 on 8 March, repeat of 01:00-02:00 on 1 November.
Europe/London: gap 01:00 -> 02:00 on 29 March, repeat of 01:00-02:00 on 25 October.
Australia/Lord_Howe (30-minute shift): gap 02:00 -> 02:30 on 4 October, repeat of
01:30-02:00 on 5 April.

Expected times are written in local time with the offset in force, so `-07:00` versus
`-08:00` tells the first occurrence of a repeated time from the second.
"""

from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from statemachine.schedule import fire_times, is_hourly_wild, next_fire, parse_schedule

LA, LONDON, LORD_HOWE = "America/Los_Angeles", "Europe/London", "Australia/Lord_Howe"

ROWS = [
    # --- Los Angeles, spring forward: 02:00-03:00 does not exist ------------------------------
    ("fixed time in the gap fires at 03:00", "30 2 * * *", LA, "2026-03-07T12:00:00-08:00",
     ["2026-03-08T03:00:00-07:00", "2026-03-09T02:30:00-07:00"]),
    ("fixed 02:00 fires at 03:00", "0 2 * * *", LA, "2026-03-07T12:00:00-08:00",
     ["2026-03-08T03:00:00-07:00", "2026-03-09T02:00:00-07:00"]),
    ("Quartz fixed time in the gap", "0 30 2 * * ?", LA, "2026-03-07T12:00:00-08:00",
     ["2026-03-08T03:00:00-07:00", "2026-03-09T02:30:00-07:00"]),
    ("gap times collapse with the real 03:00", "0,30 2,3 * * *", LA, "2026-03-08T01:59:00-08:00",
     ["2026-03-08T03:00:00-07:00", "2026-03-08T03:30:00-07:00", "2026-03-09T02:00:00-07:00"]),
    ("every minute of the missing hour fires once", "* 2 * * *", LA, "2026-03-08T01:00:00-08:00",
     ["2026-03-08T03:00:00-07:00", "2026-03-09T02:00:00-07:00", "2026-03-09T02:01:00-07:00"]),
    ("fixed hours every 2 hours", "0 */2 * * *", LA, "2026-03-08T01:00:00-08:00",
     ["2026-03-08T03:00:00-07:00", "2026-03-08T04:00:00-07:00", "2026-03-08T06:00:00-07:00"]),
    ("hourly-wild skips the gap", "30 * * * *", LA, "2026-03-08T00:45:00-08:00",
     ["2026-03-08T01:30:00-08:00", "2026-03-08T03:30:00-07:00", "2026-03-08T04:30:00-07:00"]),
    ("hourly-wild on the hour", "0 * * * *", LA, "2026-03-08T01:00:00-08:00",
     ["2026-03-08T03:00:00-07:00", "2026-03-08T04:00:00-07:00"]),
    ("hourly-wild every 20 minutes", "*/20 * * * *", LA, "2026-03-08T01:30:00-08:00",
     ["2026-03-08T01:40:00-08:00", "2026-03-08T03:00:00-07:00", "2026-03-08T03:20:00-07:00"]),
    ("Quartz hourly-wild 0/30", "0 0/30 * * * ?", LA, "2026-03-08T01:30:00-08:00",
     ["2026-03-08T03:00:00-07:00", "2026-03-08T03:30:00-07:00"]),
    ("hourly-wild every second skips the gap", "* * * * * ?", LA, "2026-03-08T01:59:59-08:00",
     ["2026-03-08T03:00:00-07:00", "2026-03-08T03:00:01-07:00"]),
    # --- Los Angeles, fall back: 01:00-02:00 happens twice --------------------------------------
    ("fixed repeated time fires once, first", "30 1 * * *", LA, "2026-10-31T12:00:00-07:00",
     ["2026-11-01T01:30:00-07:00", "2026-11-02T01:30:00-08:00"]),
    ("fixed 01:00 fires once", "0 1 * * *", LA, "2026-10-31T12:00:00-07:00",
     ["2026-11-01T01:00:00-07:00", "2026-11-02T01:00:00-08:00"]),
    ("fixed, asked during the repeat", "30 1 * * *", LA, "2026-11-01T01:10:00-08:00",
     ["2026-11-02T01:30:00-08:00"]),
    ("fixed, asked after the first occurrence", "30 1 * * *", LA, "2026-11-01T01:30:00-07:00",
     ["2026-11-02T01:30:00-08:00"]),
    ("fixed minutes in the repeated hour", "*/30 1 * * *", LA, "2026-11-01T00:50:00-07:00",
     ["2026-11-01T01:00:00-07:00", "2026-11-01T01:30:00-07:00", "2026-11-02T01:00:00-08:00"]),
    ("fixed hours around the repeat", "15 1-3 * * *", LA, "2026-11-01T00:00:00-07:00",
     ["2026-11-01T01:15:00-07:00", "2026-11-01T02:15:00-08:00", "2026-11-01T03:15:00-08:00"]),
    ("hourly-wild fires in both 01:00s", "0 * * * *", LA, "2026-11-01T00:30:00-07:00",
     ["2026-11-01T01:00:00-07:00", "2026-11-01T01:00:00-08:00", "2026-11-01T02:00:00-08:00",
      "2026-11-01T03:00:00-08:00"]),
    ("@hourly fires in both 01:00s", "@hourly", LA, "2026-11-01T00:30:00-07:00",
     ["2026-11-01T01:00:00-07:00", "2026-11-01T01:00:00-08:00", "2026-11-01T02:00:00-08:00"]),
    ("hourly-wild at half past", "30 * * * *", LA, "2026-11-01T00:45:00-07:00",
     ["2026-11-01T01:30:00-07:00", "2026-11-01T01:30:00-08:00", "2026-11-01T02:30:00-08:00"]),
    ("hourly-wild every 20 minutes", "*/20 * * * *", LA, "2026-11-01T01:30:00-07:00",
     ["2026-11-01T01:40:00-07:00", "2026-11-01T01:00:00-08:00", "2026-11-01T01:20:00-08:00",
      "2026-11-01T01:40:00-08:00", "2026-11-01T02:00:00-08:00"]),
    ("hourly-wild asked during the repeat", "*/20 * * * *", LA, "2026-11-01T01:05:00-08:00",
     ["2026-11-01T01:20:00-08:00", "2026-11-01T01:40:00-08:00", "2026-11-01T02:00:00-08:00"]),
    ("Quartz hourly-wild", "0 0 * * * ?", LA, "2026-11-01T00:30:00-07:00",
     ["2026-11-01T01:00:00-07:00", "2026-11-01T01:00:00-08:00", "2026-11-01T02:00:00-08:00"]),
    ("hourly-wild 0/1", "0 0 0/1 * * ?", LA, "2026-11-01T00:30:00-07:00",
     ["2026-11-01T01:00:00-07:00", "2026-11-01T01:00:00-08:00"]),
    ("Quartz hourly-wild at half past", "0 30 * * * ?", LA, "2026-11-01T00:45:00-07:00",
     ["2026-11-01T01:30:00-07:00", "2026-11-01T01:30:00-08:00", "2026-11-01T02:30:00-08:00"]),
    ("Quartz 0-23 at half past", "0 30 0-23 * * ?", LA, "2026-11-01T00:45:00-07:00",
     ["2026-11-01T01:30:00-07:00", "2026-11-01T01:30:00-08:00", "2026-11-01T02:30:00-08:00"]),
    ("all 24 hours listed", "30 " + ",".join(map(str, range(24))) + " * * *", LA,
     "2026-11-01T00:45:00-07:00", ["2026-11-01T01:30:00-07:00", "2026-11-01T01:30:00-08:00"]),
    # --- London ---------------------------------------------------------------------------------
    ("London fixed in the gap", "30 1 * * *", LONDON, "2026-03-28T12:00:00+00:00",
     ["2026-03-29T02:00:00+01:00", "2026-03-30T01:30:00+01:00"]),
    ("London hourly-wild skips the gap", "30 * * * *", LONDON, "2026-03-29T00:00:00+00:00",
     ["2026-03-29T00:30:00+00:00", "2026-03-29T02:30:00+01:00"]),
    ("London fixed repeated time once", "30 1 * * *", LONDON, "2026-10-24T12:00:00+01:00",
     ["2026-10-25T01:30:00+01:00", "2026-10-26T01:30:00+00:00"]),
    ("London hourly-wild both 01:00s", "0 * * * *", LONDON, "2026-10-25T00:30:00+01:00",
     ["2026-10-25T01:00:00+01:00", "2026-10-25T01:00:00+00:00", "2026-10-25T02:00:00+00:00"]),
    # --- Lord Howe: a 30-minute gap (02:00 -> 02:30) ---------------------------------------------
    ("Lord Howe fixed 02:00 fires at 02:30", "0 2 * * *", LORD_HOWE, "2026-10-03T12:00:00+10:30",
     ["2026-10-04T02:30:00+11:00", "2026-10-05T02:00:00+11:00"]),
    ("Lord Howe fixed 02:15 fires at 02:30", "15 2 * * *", LORD_HOWE, "2026-10-03T12:00:00+10:30",
     ["2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"]),
    ("Lord Howe gap times collapse with the real 02:30", "0,15,30 2 * * *", LORD_HOWE,
     "2026-10-04T01:59:00+10:30", ["2026-10-04T02:30:00+11:00", "2026-10-05T02:00:00+11:00"]),
    ("Lord Howe hourly-wild skips 02:00", "0 * * * *", LORD_HOWE, "2026-10-04T01:30:00+10:30",
     ["2026-10-04T03:00:00+11:00", "2026-10-04T04:00:00+11:00"]),
    ("Lord Howe hourly-wild every 15 minutes", "*/15 * * * *", LORD_HOWE,
     "2026-10-04T01:50:00+10:30", ["2026-10-04T02:30:00+11:00", "2026-10-04T02:45:00+11:00"]),
    ("Lord Howe hourly-wild at half past", "30 * * * *", LORD_HOWE, "2026-10-04T01:45:00+10:30",
     ["2026-10-04T02:30:00+11:00", "2026-10-04T03:30:00+11:00"]),
    # --- Lord Howe: a 30-minute repeat (01:30-02:00 twice) ---------------------------------------
    ("Lord Howe fixed repeated time once", "45 1 * * *", LORD_HOWE, "2026-04-04T12:00:00+11:00",
     ["2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"]),
    ("Lord Howe fixed 01:00 is not repeated", "0 1 * * *", LORD_HOWE, "2026-04-04T12:00:00+11:00",
     ["2026-04-05T01:00:00+11:00", "2026-04-06T01:00:00+10:30"]),
    ("Lord Howe fixed 02:00 exists once", "0 2 * * *", LORD_HOWE, "2026-04-04T12:00:00+11:00",
     ["2026-04-05T02:00:00+10:30", "2026-04-06T02:00:00+10:30"]),
    ("Lord Howe hourly-wild every 15 minutes", "*/15 * * * *", LORD_HOWE,
     "2026-04-05T01:10:00+11:00",
     ["2026-04-05T01:15:00+11:00", "2026-04-05T01:30:00+11:00", "2026-04-05T01:45:00+11:00",
      "2026-04-05T01:30:00+10:30", "2026-04-05T01:45:00+10:30", "2026-04-05T02:00:00+10:30"]),
    ("Lord Howe hourly-wild on the hour", "0 * * * *", LORD_HOWE, "2026-04-05T00:30:00+11:00",
     ["2026-04-05T01:00:00+11:00", "2026-04-05T02:00:00+10:30"]),
    ("Lord Howe hourly-wild at half past", "30 * * * *", LORD_HOWE, "2026-04-05T00:45:00+11:00",
     ["2026-04-05T01:30:00+11:00", "2026-04-05T01:30:00+10:30", "2026-04-05T02:30:00+10:30"]),
]


@pytest.mark.parametrize("name, expression, zone, after, expected", ROWS,
                         ids=[row[0] + f" [{row[1]}]" for row in ROWS])
def test_daylight_saving(name, expression, zone, after, expected):
    schedule = parse_schedule(expression, zone)
    start = datetime.fromisoformat(after)
    times = [datetime.fromisoformat(text) for text in expected]
    found = list(fire_times(schedule, start, start + timedelta(days=400), limit=len(times)))
    assert found == times
    # The offsets written above must be the ones the zone really uses at those instants.
    zone_info = ZoneInfo(zone)
    for moment, text in zip(found, expected):
        assert moment.astimezone(zone_info).isoformat() == text


def local_day_fires(expression: str, zone: str, day: date) -> list[datetime]:
    tz = ZoneInfo(zone)
    start = datetime(day.year, day.month, day.day, tzinfo=tz) - timedelta(microseconds=1)
    end = datetime(day.year, day.month, day.day, 23, 59, 59, tzinfo=tz)
    return list(fire_times(parse_schedule(expression, zone), start, end))


@pytest.mark.parametrize("zone, spring, fall", [
    (LA, date(2026, 3, 8), date(2026, 11, 1)),
    (LONDON, date(2026, 3, 29), date(2026, 10, 25)),
])
def test_an_hourly_job_runs_23_times_in_spring_and_25_in_autumn(zone, spring, fall):
    assert len(local_day_fires("0 * * * *", zone, spring)) == 23
    assert len(local_day_fires("0 * * * *", zone, fall)) == 25
    assert len(local_day_fires("0 * * * *", zone, spring + timedelta(days=1))) == 24


def test_lord_howe_half_hourly_job_loses_one_and_gains_one():
    assert len(local_day_fires("*/30 * * * *", LORD_HOWE, date(2026, 10, 4))) == 47
    assert len(local_day_fires("*/30 * * * *", LORD_HOWE, date(2026, 4, 5))) == 49


@pytest.mark.parametrize("zone", [LA, LONDON, LORD_HOWE])
def test_a_fixed_daily_job_fires_once_on_every_local_day_of_2026(zone):
    tz = ZoneInfo(zone)
    schedule = parse_schedule("0 30 1 * * ?", zone)
    start = datetime(2026, 1, 1, tzinfo=tz)
    found = list(fire_times(schedule, start, datetime(2027, 1, 1, tzinfo=tz)))
    days = [moment.astimezone(tz).date() for moment in found]
    assert len(days) == 365 and len(set(days)) == 365


@pytest.mark.parametrize("expression, wild", [
    ("0 * * * *", True), ("0 */1 * * *", True), ("0 0/1 * * *", True), ("0 0-23 * * *", True),
    ("0 0 * * * ?", True), ("0 0 0/1 * * ?", True), ("@hourly", True), ("* * * * *", True),
    ("0 */2 * * *", False), ("0 1 * * *", False), ("0 1-23 * * *", False), ("@daily", False),
    ("every 1h", False), ("triggered", False),
])
def test_is_hourly_wild(expression, wild):
    assert is_hourly_wild(parse_schedule(expression, LA)) is wild


def test_hour_range_covering_every_hour_behaves_like_a_star():
    """`0-23` is hourly-wild too: the contract's `*`, `*/1`, `0/1` are examples of it."""
    after = datetime.fromisoformat("2026-11-01T00:30:00-07:00")
    star, ranged = parse_schedule("0 * * * *", LA), parse_schedule("0 0-23 * * *", LA)
    until = after + timedelta(hours=5)
    assert list(fire_times(ranged, after, until)) == list(fire_times(star, after, until))


def test_next_fire_accepts_after_in_any_zone():
    schedule = parse_schedule("30 1 * * *", LA)
    in_tokyo = datetime.fromisoformat("2026-11-01T17:10:00+09:00")  # 01:10 PDT
    assert next_fire(schedule, in_tokyo) == datetime.fromisoformat("2026-11-01T01:30:00-07:00")
