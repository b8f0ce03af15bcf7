"""Where Sundial's schedules deliberately differ from croniter 7.0.0.

One test per difference. Each docstring says what croniter does; the assertions pin down
what Sundial does instead (docs/REFERENCE.md section 3, Quartz's documentation).
"""

from datetime import datetime

import pytest

from statemachine.schedule import ScheduleError, fire_times, next_fire, parse_schedule


def t(text: str) -> datetime:
    return datetime.fromisoformat(text)


def first(expression: str, after: str, count: int, zone: str = "UTC") -> list[datetime]:
    start = t(after)
    found = fire_times(parse_schedule(expression, zone), start, t("2100-01-01T00:00:00Z"),
                       limit=count)
    return list(found)


@pytest.mark.parametrize("zone, after, expected", [
    ("America/Los_Angeles", "2026-11-01T00:00:00-07:00",
     ["2026-11-01T01:30:00-07:00", "2026-11-02T01:30:00-08:00"]),
    ("Europe/London", "2026-10-25T00:00:00+01:00",
     ["2026-10-25T01:30:00+01:00", "2026-10-26T01:30:00+00:00"]),
    ("Australia/Lord_Howe", "2026-04-05T00:00:00+11:00",
     ["2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"]),
])
def test_croniter_difference_fixed_hour_job_fires_once_at_fall_back(zone, after, expected):
    """croniter with an aware start fires `30 1 * * *` at 01:30 twice on the fall-back day."""
    expression = "45 1 * * *" if zone == "Australia/Lord_Howe" else "30 1 * * *"
    assert first(expression, after, 2, zone) == [t(x) for x in expected]


def test_croniter_difference_hourly_wild_fires_in_a_30_minute_repeat():
    """croniter drops the second 01:40 when Lord Howe repeats only half an hour."""
    found = first("*/20 * * * *", "2026-04-05T01:30:00+11:00", 3, "Australia/Lord_Howe")
    assert found == [t("2026-04-05T01:40:00+11:00"), t("2026-04-05T01:40:00+10:30"),
                     t("2026-04-05T02:00:00+10:30")]


def test_croniter_difference_quartz_six_fields_put_seconds_first():
    """croniter reads a 6th field as seconds at the end (and rejects `?` in it)."""
    assert first("0 15 10 ? * *", "2026-01-01T00:00:00Z", 1) == [t("2026-01-01T10:15:00Z")]
    assert first("30 0 0 * * ?", "2026-01-01T00:00:00Z", 1) == [t("2026-01-01T00:00:30Z")]


def test_croniter_difference_quartz_day_of_week_1_is_sunday():
    """croniter numbers days of week from 0 = Sunday in every form, so Quartz `1` is Monday."""
    assert first("0 0 0 ? * 1", "2026-01-01T00:00:00Z", 1) == [t("2026-01-04T00:00:00Z")]
    assert first("0 0 0 ? * 2-6", "2026-01-02T00:00:00Z", 1) == [t("2026-01-05T00:00:00Z")]


def test_croniter_difference_quartz_nth_weekday_uses_quartz_numbering():
    """croniter reads `6#3` as the third Saturday; in Quartz it is the third Friday."""
    assert first("0 15 10 ? * 6#3", "2026-01-01T00:00:00Z", 1) == [t("2026-01-16T10:15:00Z")]


def test_croniter_difference_last_weekday_of_month_5L():
    """croniter rejects Quartz's `5L` (it spells the idea `L5`, Unix-numbered)."""
    assert first("0 0 12 ? * 5L", "2026-01-01T00:00:00Z", 1) == [t("2026-01-29T12:00:00Z")]


def test_croniter_difference_last_weekday_LW():
    """croniter rejects `LW`."""
    assert first("0 0 0 LW * ?", "2026-01-01T00:00:00Z", 1) == [t("2026-01-30T00:00:00Z")]


def test_croniter_difference_offset_from_last_day_L_minus_n():
    """croniter rejects `L-2`."""
    assert first("0 15 10 L-2 * ?", "2026-02-01T00:00:00Z", 1) == [t("2026-02-26T10:15:00Z")]


def test_croniter_difference_31W_skips_months_without_a_31st():
    """croniter clamps `31W` to the 30th in April; like a plain `31`, Sundial skips April."""
    assert first("0 0 0 31W * ?", "2026-04-01T00:00:00Z", 1) == [t("2026-05-29T00:00:00Z")]


def test_croniter_difference_quartz_both_day_fields_restricted_is_an_error():
    """croniter ORs `15` and `MON`; Quartz refuses the expression, and so does Sundial."""
    with pytest.raises(ScheduleError, match=r"both day-of-month and day-of-week"):
        parse_schedule("0 0 0 15 * MON")


def test_croniter_difference_a_schedule_past_its_last_year_returns_none():
    """croniter raises CroniterBadDateError after searching; Sundial answers None at once."""
    schedule = parse_schedule("0 0 0 1 1 ? 2020")
    assert next_fire(schedule, t("2026-03-01T00:00:00Z")) is None


def test_croniter_difference_an_impossible_date_is_rejected_when_parsed():
    """croniter accepts `0 0 30 2 *` and fails on every get_next; Sundial refuses to parse it."""
    with pytest.raises(ScheduleError, match="can never fire"):
        parse_schedule("0 0 30 2 *")


def test_croniter_difference_which_day_fields_count_as_restricted():
    """croniter ORs `*/7` in day-of-week with `1-7`, firing on each of the first seven days
    and every Sunday. Sundial follows crontab(5) (Vixie cron, cronie): a day field that
    starts with `*` is ANDed with the other, so this is the first Sunday of each month;
    `*/3` + `0-6` is every third day and `*/1` + `MON` every Monday."""
    assert first("1 1 1-7 * */7", "2026-01-01T00:00:00Z", 3) == [
        t("2026-01-04T01:01:00Z"), t("2026-02-01T01:01:00Z"), t("2026-03-01T01:01:00Z")]
    assert first("0 0 */3 * 0-6", "2026-01-01T00:00:00Z", 2) == [
        t("2026-01-04T00:00:00Z"), t("2026-01-07T00:00:00Z")]
    assert first("0 0 */1 * MON", "2026-01-01T00:00:00Z", 2) == [
        t("2026-01-05T00:00:00Z"), t("2026-01-12T00:00:00Z")]
