"""Parsing every schedule form, its errors, and the small public helpers."""

import dataclasses
from datetime import datetime, timedelta, timezone

import pytest

from statemachine.schedule import (
    AtSchedule,
    CronSchedule,
    EverySchedule,
    IntervalSchedule,
    ScheduleError,
    TriggeredSchedule,
    describe,
    fire_times,
    is_clock_driven,
    load_zone,
    next_fire,
    parse_at,
    parse_schedule,
)

UTC = timezone.utc


def t(text: str) -> datetime:
    return datetime.fromisoformat(text)


@pytest.mark.parametrize("text, expected", [
    ("every 10m", EverySchedule(timedelta(minutes=10))),
    ("every 1h offset 15m", EverySchedule(timedelta(hours=1), timedelta(minutes=15))),
    ("  Every   90s  ", EverySchedule(timedelta(seconds=90))),
    ("with 10m interval", IntervalSchedule(timedelta(minutes=10))),
    ("with 0s interval", IntervalSchedule(timedelta(0))),
    ("continuously", IntervalSchedule(timedelta(0))),
    ("triggered", TriggeredSchedule()),
    ("TRIGGERED", TriggeredSchedule()),
    ("0 * * * *", CronSchedule("0 * * * *", "UTC")),
    ("0  0\t* * *", CronSchedule("0 0 * * *", "UTC")),
    ("@daily", CronSchedule("@daily", "UTC")),
])
def test_every_form_parses(text, expected):
    assert parse_schedule(text) == expected


def test_cron_schedule_keeps_its_zone_and_is_an_immutable_value():
    schedule = parse_schedule("0 9 * * MON-FRI", "Europe/London")
    assert schedule == CronSchedule("0 9 * * MON-FRI", "Europe/London")
    assert schedule != CronSchedule("0 9 * * MON-FRI", "UTC")
    assert len({schedule, CronSchedule(" 0 9 * * MON-FRI ", "Europe/London")}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        schedule.text = "0 0 * * *"


def test_parsing_is_cached():
    first = parse_schedule("*/7 * * * *", "Asia/Tokyo")
    assert parse_schedule("*/7  * * * *", "Asia/Tokyo") is first


def test_names_and_macros_ignore_case_and_unix_accepts_question_mark():
    after = t("2026-01-01T00:00:00Z")
    assert next_fire(parse_schedule("0 0 * jan mon"), after) == t("2026-01-05T00:00:00Z")
    assert next_fire(parse_schedule("0 0 ? * MON"), after) == t("2026-01-05T00:00:00Z")
    assert next_fire(parse_schedule("@DAILY"), after) == t("2026-01-02T00:00:00Z")


ERRORS = [
    ("0 0 * *", "cron expression '0 0 * *' has 4 fields; expected 5"),
    ("0 0 0 0 0 0 0 0", "has 8 fields"),
    ("60 * * * *", "minute value 60 out of range 0-59 in '60 * * * *'"),
    ("0 24 * * *", "hour value 24 out of range 0-23"),
    ("0 0 32 * *", "day-of-month value 32 out of range 1-31"),
    ("0 0 0 * *", "day-of-month value 0 out of range 1-31"),
    ("0 0 1 13 *", "month value 13 out of range 1-12"),
    ("0 0 * * 8", "day-of-week value 8 out of range 0-7 (Unix: 0 and 7 = Sunday)"),
    ("0 0 0 ? * 8", "day-of-week value 8 out of range 1-7 (Quartz: 1 = Sunday) in '0 0 0 ? * 8'"),
    ("0 0 0 ? * 0", "day-of-week value 0 out of range 1-7 (Quartz: 1 = Sunday)"),
    ("60 0 0 * * ?", "second value 60 out of range 0-59"),
    ("0 0 0 1 1 ? 1969", "year value 1969 out of range 1970-2099"),
    ("0 0 0 1 1 ? 2100", "year value 2100 out of range 1970-2099"),
    ("0 0 0 1 1 ? 2030-2020", "year range '2030-2020' goes backwards"),
    ("0 0 1 FOO *", "unknown month name 'FOO'; use JAN-DEC"),
    ("0 0 * * FUNDAY", "unknown day-of-week name 'FUNDAY'; use SUN-SAT"),
    ("0 0 * * MONDAY", "unknown day-of-week name 'MONDAY'"),
    ("*/0 * * * *", "bad step '/0' in the minute field"),
    ("*/x * * * *", "bad step '/x' in the minute field"),
    ("1-2-3 * * * *", "bad minute field '1-2-3'"),
    ("a * * * *", "bad minute value 'a'"),
    ("0 ? * * *", "'?' is only allowed in day-of-month or day-of-week, not in the hour field"),
    ("0 0 0 15 * MON", "both day-of-month and day-of-week are restricted; Quartz needs '?'"),
    ("0 0 0 L * 2-6", "both day-of-month and day-of-week are restricted"),
    ("0 0 0 1-31 * 1-7", "both day-of-month and day-of-week are restricted"),
    ("0 0 0 ? * 2#6", "'#' week value 6 out of range 1-5"),
    ("0 0 0 ? * 9L", "day-of-week value 9 out of range 1-7"),
    ("0 0 0 L-31 * ?", "offset from the last day value 31 out of range 0-30"),
    ("0 0 0 L-31W * ?", "offset from the last day value 31 out of range 0-30"),
    ("0 0 0 L-xW * ?", "bad offset from the last day 'X'"),
    ("0 0 0 L-30W 2 ?", "can never fire"),
    ("0 0 30 2 */7", "can never fire"),  # from `*`: ANDed, so not "every Sunday in February"
    # Quartz: a step past its field is refused, the bound named (a step equal to the size
    # is refused for seconds, minutes and hours, allowed for the day and month fields).
    ("0/90 * * * * ?", "step '/90' is too large for the second field: a minute has 60 seconds, "
                       "so a step there must be at most 59"),
    ("0 */60 * * * ?", "step '/60' is too large for the minute field: an hour has 60 minutes"),
    ("0 0 0/24 * * ?", "step '/24' is too large for the hour field: a day has 24 hours, "
                       "so a step there must be at most 23"),
    ("0 0 0 1/32 * ?", "step '/32' is too large for the day-of-month field: a month has at most "
                       "31 days, so a step there must be at most 31"),
    ("0 0 0 1 1/13 ?", "step '/13' is too large for the month field: a year has 12 months"),
    ("0 0 0 ? * 1/8", "step '/8' is too large for the day-of-week field: a week has 7 days"),
    ("0 0 0 32W * ?", "day-of-month value 32 out of range 1-31"),
    ("0 0 0 ?,1 * ?", "bad day-of-month field '?'"),
    ("0 0 30 2 *", "cron expression '0 0 30 2 *' can never fire"),
    ("0 0 0 31 4,6,9,11 ?", "can never fire"),
    ("0 0 0 29 2 ? 2027", "can never fire"),
    ("@fortnightly", "unknown macro '@fortnightly'; use one of @annually"),
    ("", "schedule is empty"),
    ("   ", "schedule is empty"),
    ("whenever you like", "unrecognised schedule 'whenever you like'"),
    ("every 0s", "'every' fires at most once per second: the period must be at least 1s, got 0s"),
    ("every 999ms", "'every' fires at most once per second: the period must be at least 1s, got 999ms"),
    ("every 1ms", "'every' fires at most once per second"),
    ("every 1h offset 1h", "offset 1h must be less than the period 1h"),
    ("every 1h offset 90m", "offset 1h30m must be less than the period 1h"),
    ("every", "bad schedule 'every'"),
    ("every ten minutes", "bad schedule 'every ten minutes'"),
    ("every 10x", "bad duration '10x'"),
    ("every 0.5ms", "period must be a whole number of milliseconds"),
    ("with 10m", "bad schedule 'with 10m'"),
    ("with 10q interval", "bad duration '10q'"),
]


@pytest.mark.parametrize("text, message", ERRORS, ids=[e[0] or "empty" for e in ERRORS])
def test_parse_errors(text, message):
    with pytest.raises(ScheduleError) as error:
        parse_schedule(text)
    assert message in str(error.value)


@pytest.mark.parametrize("text", [
    "0/59 * * * * ?", "0 0/59 * * * ?", "0 0 0/23 * * ?", "0 0 0 1/31 * ?", "0 0 0 1 1/12 ?",
    "0 0 0 ? * 1/7", "0 0 0 1 1 ? 2026/100",  # Quartz's own bounds: the largest steps it takes
    "*/90 * * * *", "0 */24 * * *",  # Unix cron has no bound: `*/90` minutes is minute 0
])
def test_steps_at_the_bound_and_unix_steps_parse(text):
    assert parse_schedule(text).text == text


@pytest.mark.parametrize("text", ["0 * * * *", "every 10m", "triggered", "continuously"])
@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "utc", "", "../etc/passwd", "America",
                                  "localtime"])
def test_a_bad_time_zone_is_an_error_for_every_form(text, zone):
    with pytest.raises(ScheduleError, match="unknown time zone"):
        parse_schedule(text, zone)


def test_the_error_names_the_zone():
    with pytest.raises(ScheduleError, match="unknown time zone 'Mars/Olympus_Mons'"):
        parse_schedule("0 * * * *", "Mars/Olympus_Mons")
    with pytest.raises(ScheduleError, match="Mars/Olympus_Mons"):
        load_zone("Mars/Olympus_Mons")
    assert str(load_zone("Europe/London")) == "Europe/London"


def test_schedule_errors_are_value_errors_and_non_strings_are_refused():
    assert issubclass(ScheduleError, ValueError)
    with pytest.raises(ScheduleError, match="schedule must be a string"):
        parse_schedule(5)
    with pytest.raises(ScheduleError, match="time zone must be a string"):
        parse_schedule("0 * * * *", None)


# --- at ---------------------------------------------------------------------------------------

def test_parse_at_sorts_and_removes_duplicates_in_utc():
    schedule = parse_at(["2020-12-25T14:00:00Z", "2020-12-24T14:00:00Z",
                         "2020-12-24T15:00:00+01:00"])
    assert schedule.times == (t("2020-12-24T14:00:00Z"), t("2020-12-25T14:00:00Z"))
    assert all(moment.tzinfo is UTC for moment in schedule.times)


def test_at_fires_strictly_after_and_then_never():
    schedule = parse_at(["2020-12-24T14:00:00Z", "2020-12-25T14:00:00Z"])
    assert next_fire(schedule, t("2020-12-24T13:59:59Z")) == t("2020-12-24T14:00:00Z")
    assert next_fire(schedule, t("2020-12-24T14:00:00Z")) == t("2020-12-25T14:00:00Z")
    assert next_fire(schedule, t("2020-12-25T14:00:00Z")) is None
    assert list(fire_times(schedule, t("2020-01-01T00:00:00Z"), t("2020-12-24T14:00:00Z"))) == [
        t("2020-12-24T14:00:00Z")]


@pytest.mark.parametrize("values, message", [
    ([], "'at' needs at least one timestamp"),
    (["2020-12-24T14:00:00Z", "2020-12-25T14:00:00"],
     "at[1]: timestamp '2020-12-25T14:00:00' has no offset"),
    (["tomorrow"], "at[0]: bad ISO-8601 timestamp 'tomorrow'"),
    ("2020-12-24T14:00:00Z", "'at' must be a list"),
    ([datetime(2020, 12, 24, 14)], "at[0] '2020-12-24T14:00:00' has no offset"),
])
def test_parse_at_errors(values, message):
    with pytest.raises(ScheduleError) as error:
        parse_at(values)
    assert message in str(error.value)


def test_parse_at_accepts_aware_datetimes_from_yaml():
    schedule = parse_at([datetime(2020, 12, 24, 14, tzinfo=UTC)])
    assert schedule == AtSchedule((t("2020-12-24T14:00:00Z"),))


# --- describe, is_clock_driven, validation of directly built values ----------------------------

@pytest.mark.parametrize("text", [
    "0 * * * *", "0 15 10 ? * 6L 2002-2005", "@weekly", "every 10m", "every 1h offset 15m",
    "every 1500ms", "with 10m interval", "with 1h30m interval", "continuously", "triggered",
])
@pytest.mark.parametrize("zone", ["UTC", "America/Los_Angeles"])
def test_describe_round_trips(text, zone):
    schedule = parse_schedule(text, zone)
    assert parse_schedule(describe(schedule), zone) == schedule


def test_describe_canonical_spellings():
    assert describe(parse_schedule("with 0s interval")) == "continuously"
    assert describe(parse_schedule("every 60m offset 0s")) == "every 1h"
    assert describe(parse_schedule(" 0  0 * * * ")) == "0 0 * * *"
    at = parse_at([f"2020-12-{day:02d}T14:00:00Z" for day in range(1, 8)])
    assert describe(at) == ("at 2020-12-01T14:00:00Z, 2020-12-02T14:00:00Z, "
                            "2020-12-03T14:00:00Z, 2020-12-04T14:00:00Z, "
                            "2020-12-05T14:00:00Z and 2 more")


@pytest.mark.parametrize("schedule, clock", [
    (parse_schedule("0 * * * *"), True), (parse_schedule("every 1m"), True),
    (parse_at(["2020-12-24T14:00:00Z"]), True), (parse_schedule("with 1m interval"), False),
    (parse_schedule("continuously"), False), (parse_schedule("triggered"), False),
])
def test_is_clock_driven(schedule, clock):
    assert is_clock_driven(schedule) is clock


@pytest.mark.parametrize("schedule", [parse_schedule("with 10m interval"),
                                      parse_schedule("continuously"), TriggeredSchedule()])
def test_relative_and_triggered_schedules_never_fire_by_the_clock(schedule):
    assert next_fire(schedule, t("2026-01-01T00:00:00Z")) is None
    assert list(fire_times(schedule, t("2026-01-01T00:00:00Z"), t("2027-01-01T00:00:00Z"))) == []


@pytest.mark.parametrize("build, message", [
    (lambda: EverySchedule(timedelta(0)), "at most once per second"),
    (lambda: EverySchedule(timedelta(milliseconds=250)), "at most once per second"),
    (lambda: EverySchedule(timedelta(hours=1), timedelta(minutes=-1)), "must be less than"),
    (lambda: EverySchedule(60), "period must be a timedelta"),
    (lambda: IntervalSchedule(timedelta(seconds=-1)), "must not be negative"),
    (lambda: AtSchedule((datetime(2020, 1, 1),)), "at[0]"),
    (lambda: CronSchedule("0 * * *"), "has 4 fields"),
    (lambda: CronSchedule("0 * * * *", "Nowhere/Special"), "unknown time zone"),
])
def test_values_built_directly_are_validated(build, message):
    with pytest.raises(ScheduleError) as error:
        build()
    assert message in str(error.value)


# --- next_fire and fire_times contracts ----------------------------------------------------------

def test_results_are_aware_utc_whatever_the_zones():
    schedule = parse_schedule("0 9 * * *", "Asia/Kolkata")
    result = next_fire(schedule, t("2026-01-01T00:00:00-05:00"))  # 10:30 in Kolkata
    assert result == t("2026-01-02T09:00:00+05:30") and result.tzinfo is UTC
    every = next_fire(parse_schedule("every 1h"), t("2026-01-01T00:30:00+05:30"))
    assert every == t("2026-01-01T00:00:00Z") - timedelta(hours=4) and every.tzinfo is UTC


def test_naive_datetimes_are_refused_eagerly():
    schedule = parse_schedule("0 * * * *")
    with pytest.raises(ValueError, match="after must be a timezone-aware datetime"):
        next_fire(schedule, datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="until must be a timezone-aware datetime"):
        fire_times(schedule, t("2026-01-01T00:00:00Z"), datetime(2026, 1, 2))
    with pytest.raises(ValueError, match="limit must not be negative"):
        fire_times(schedule, t("2026-01-01T00:00:00Z"), t("2026-01-02T00:00:00Z"), limit=-1)


def test_fire_times_window_is_after_exclusive_until_inclusive_and_limited():
    schedule = parse_schedule("0 * * * *")
    after, until = t("2026-01-01T00:00:00Z"), t("2026-01-01T03:00:00Z")
    assert list(fire_times(schedule, after, until)) == [
        t("2026-01-01T01:00:00Z"), t("2026-01-01T02:00:00Z"), t("2026-01-01T03:00:00Z")]
    assert list(fire_times(schedule, after, until, limit=2)) == [
        t("2026-01-01T01:00:00Z"), t("2026-01-01T02:00:00Z")]
    assert list(fire_times(schedule, after, until, limit=0)) == []
    assert list(fire_times(schedule, until, after)) == []


def test_fire_times_is_lazy():
    endless = fire_times(parse_schedule("* * * * * ?"), t("2026-01-01T00:00:00Z"),
                         t("2099-01-01T00:00:00Z"))
    assert next(endless) == t("2026-01-01T00:00:01Z")


def test_the_end_of_time_is_never_rather_than_a_crash():
    late = datetime(9999, 12, 31, 12, tzinfo=UTC)
    assert next_fire(parse_schedule("0 0 * * *"), late) is None
    assert next_fire(parse_schedule("0 0 * * *", "America/Los_Angeles"), late) is None
    assert next_fire(parse_schedule("every 1d"), late) is None
