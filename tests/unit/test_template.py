"""Template variables: the seed example, DST edge days, syntax and errors, properties."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine.durations import UTC, parse_instant
from statemachine.template import (
    HOOK_VARIABLES,
    KNOWN_VARIABLES,
    HookValues,
    TemplateContext,
    TemplateError,
    render,
    template_variables,
    validate_template,
    variables,
)

LA = "America/Los_Angeles"
KNOWN_LIST = (
    "attempt, endOfPreviousDay, eventCount, eventIndex, invocationId, jobId, processTime,"
    " project, scheduledTime, serviceHost, startOfDay, startOfDayOneWeekAgo, startOfHour,"
    " startOfPreviousDay, todaysDate, yesterdaysDate"
)
HOOK_LIST = "attempts, failures, invocationUrl, reason, status"
TIME_VARIABLES = (
    "processTime",
    "startOfHour",
    "startOfDay",
    "startOfPreviousDay",
    "endOfPreviousDay",
    "startOfDayOneWeekAgo",
    "todaysDate",
    "yesterdaysDate",
)


def at(instant: str, timezone: str = "UTC", **fields) -> TemplateContext:
    return TemplateContext(parse_instant(instant), timezone, **fields)


def time_values(instant: str, timezone: str) -> dict[str, str]:
    values = variables(at(instant, timezone))
    return {name: values[name] for name in TIME_VARIABLES}


# --- values --------------------------------------------------------------------------


def test_seed_example_in_seattle():
    assert time_values("2018-03-21T17:09-07:00", LA) == {
        "endOfPreviousDay": "2018-03-20T23:59:59.999-07:00",
        "processTime": "2018-03-21T17:09:00.000-07:00",
        "startOfDay": "2018-03-21T00:00:00.000-07:00",
        "startOfDayOneWeekAgo": "2018-03-14T00:00:00.000-07:00",
        "startOfHour": "2018-03-21T17:00:00.000-07:00",
        "startOfPreviousDay": "2018-03-20T00:00:00.000-07:00",
        "todaysDate": "2018-03-21",
        "yesterdaysDate": "2018-03-20",
    }


def test_seed_request_templates_render():
    context = at("2018-03-21T17:09-07:00", LA)
    reporter = '{"startDateTime":"${startOfPreviousDay}","endDateTime":"${endOfPreviousDay}"}'
    assert render(reporter, context) == (
        '{"startDateTime":"2018-03-20T00:00:00.000-07:00",'
        '"endDateTime":"2018-03-20T23:59:59.999-07:00"}'
    )
    assert render('{"date":"${yesterdaysDate}"}', context) == '{"date":"2018-03-20"}'


def test_identity_and_delivery_variables():
    context = at(
        "2018-03-21T17:09-07:00",
        LA,
        project="bridge",
        job_id="exporter-hourly",
        invocation_id="inv-42",
        attempt=3,
        event_index=2,
        event_count=5,
    )
    text = (
        "${project}/${jobId}/${invocationId}@${scheduledTime}"
        "#${attempt} ${eventIndex}/${eventCount}"
    )
    assert render(text, context) == (
        "bridge/exporter-hourly/inv-42@2018-03-22T00:09:00.000Z#3 2/5"
    )


def test_scheduled_time_is_utc_with_milliseconds_whatever_the_zone():
    context = TemplateContext(
        datetime(2026, 1, 2, 3, 4, 5, 678_901, tzinfo=ZoneInfo("Asia/Kolkata")), "Asia/Kolkata"
    )
    assert render("${scheduledTime}", context) == "2026-01-01T21:34:05.678Z"
    assert render("${processTime}", context) == "2026-01-02T03:04:05.678+05:30"


def test_utc_zone_uses_numeric_offset():
    assert render("${startOfDay}", at("2026-05-01T10:00Z")) == "2026-05-01T00:00:00.000+00:00"


def test_day_after_spring_forward_in_los_angeles():
    # 2026-03-08 lasts 23 hours; each value carries the offset in force at its instant.
    assert time_values("2026-03-09T10:00-07:00", LA) == {
        "processTime": "2026-03-09T10:00:00.000-07:00",
        "startOfHour": "2026-03-09T10:00:00.000-07:00",
        "startOfDay": "2026-03-09T00:00:00.000-07:00",
        "startOfPreviousDay": "2026-03-08T00:00:00.000-08:00",
        "endOfPreviousDay": "2026-03-08T23:59:59.999-07:00",
        "startOfDayOneWeekAgo": "2026-03-02T00:00:00.000-08:00",
        "todaysDate": "2026-03-09",
        "yesterdaysDate": "2026-03-08",
    }


def test_on_the_23_hour_day_in_los_angeles():
    values = time_values("2026-03-08T03:00-07:00", LA)
    assert values["startOfDay"] == "2026-03-08T00:00:00.000-08:00"
    assert values["startOfHour"] == "2026-03-08T03:00:00.000-07:00"
    assert values["endOfPreviousDay"] == "2026-03-07T23:59:59.999-08:00"


def test_day_after_fall_back_in_los_angeles():
    # 2026-11-01 lasts 25 hours: now minus 24 h would still be on 2026-11-01.
    values = time_values("2026-11-02T00:30-08:00", LA)
    assert values["startOfDay"] == "2026-11-02T00:00:00.000-08:00"
    assert values["startOfPreviousDay"] == "2026-11-01T00:00:00.000-07:00"
    assert values["endOfPreviousDay"] == "2026-11-01T23:59:59.999-08:00"
    assert values["startOfDayOneWeekAgo"] == "2026-10-26T00:00:00.000-07:00"
    assert values["yesterdaysDate"] == "2026-11-01"


@pytest.mark.parametrize(
    ("instant", "hour_start"),
    [
        ("2026-11-01T00:30-07:00", "2026-11-01T00:00:00.000-07:00"),
        ("2026-11-01T01:30-07:00", "2026-11-01T01:00:00.000-07:00"),  # first pass, PDT
        ("2026-11-01T01:30-08:00", "2026-11-01T01:00:00.000-08:00"),  # second pass, PST
        ("2026-11-01T02:30-08:00", "2026-11-01T02:00:00.000-08:00"),
    ],
)
def test_start_of_hour_keeps_the_fold_at_fall_back(instant, hour_start):
    assert time_values(instant, LA)["startOfHour"] == hour_start


def test_london_23_and_25_hour_days():
    spring = time_values("2026-03-30T09:15+01:00", "Europe/London")
    assert spring["startOfPreviousDay"] == "2026-03-29T00:00:00.000+00:00"
    assert spring["endOfPreviousDay"] == "2026-03-29T23:59:59.999+01:00"
    assert spring["startOfDay"] == "2026-03-30T00:00:00.000+01:00"
    autumn = time_values("2026-10-26T09:15Z", "Europe/London")
    assert autumn["startOfPreviousDay"] == "2026-10-25T00:00:00.000+01:00"
    assert autumn["endOfPreviousDay"] == "2026-10-25T23:59:59.999+00:00"
    assert autumn["startOfDayOneWeekAgo"] == "2026-10-19T00:00:00.000+01:00"


def test_half_hour_offset_zone_starts_hours_on_the_local_wall_hour():
    values = time_values("2026-03-09T12:45+05:30", "Asia/Kolkata")
    assert values["startOfHour"] == "2026-03-09T12:00:00.000+05:30"
    assert values["startOfDay"] == "2026-03-09T00:00:00.000+05:30"


def test_lord_howe_half_hour_daylight_saving():
    # Lord Howe Island moves its clocks by 30 minutes: +10:30 in winter, +11:00 in summer.
    normal = time_values("2026-01-15T07:45+11:00", "Australia/Lord_Howe")
    assert normal["startOfHour"] == "2026-01-15T07:00:00.000+11:00"
    # 2025-10-05 02:00 +10:30 jumps to 02:30 +11:00: the wall hour 02 begins at 02:30.
    spring = time_values("2025-10-05T02:45+11:00", "Australia/Lord_Howe")
    assert spring["startOfHour"] == "2025-10-05T02:30:00.000+11:00"
    assert spring["startOfDay"] == "2025-10-05T00:00:00.000+10:30"
    # 2025-04-06 02:00 +11:00 falls back to 01:30 +10:30; 01:45 happens twice and its
    # wall hour began once, at 01:00 +11:00.
    autumn = time_values("2025-04-06T01:45+10:30", "Australia/Lord_Howe")
    assert autumn["startOfHour"] == "2025-04-06T01:00:00.000+11:00"
    assert autumn["processTime"] == "2025-04-06T01:45:00.000+10:30"


@pytest.mark.parametrize(
    ("zone", "instant", "day_start", "previous_end"),
    [
        # Clocks jump from 00:00 to 01:00: the day begins at 01:00.
        ("America/Santiago", "2022-09-11T10:00-03:00", "2022-09-11T01:00:00.000-03:00",
         "2022-09-10T23:59:59.999-04:00"),
        ("America/Havana", "2024-03-10T12:00-04:00", "2024-03-10T01:00:00.000-04:00",
         "2024-03-09T23:59:59.999-05:00"),
        ("Asia/Beirut", "2023-03-26T12:00+03:00", "2023-03-26T01:00:00.000+03:00",
         "2023-03-25T23:59:59.999+02:00"),
    ],
)
def test_day_without_a_midnight_starts_at_its_first_instant(
    zone, instant, day_start, previous_end
):
    values = time_values(instant, zone)
    assert values["startOfDay"] == day_start
    assert values["endOfPreviousDay"] == previous_end


def test_the_day_after_a_midnightless_day_refers_back_to_its_first_instant():
    values = time_values("2022-09-12T10:00-03:00", "America/Santiago")
    assert values["startOfPreviousDay"] == "2022-09-11T01:00:00.000-03:00"


def test_day_with_two_midnights_starts_at_the_first():
    # Havana falls back from 01:00 -04:00 to 00:00 -05:00 on 2024-11-03.
    values = time_values("2024-11-03T00:30-05:00", "America/Havana")
    assert values["startOfDay"] == "2024-11-03T00:00:00.000-04:00"
    assert values["startOfHour"] == "2024-11-03T00:00:00.000-05:00"


def test_skipped_calendar_day_does_not_break_rendering():
    # Samoa skipped 2011-12-30 entirely; the previous "day" is empty and starts when
    # 2011-12-31 does.
    values = time_values("2011-12-31T10:00+14:00", "Pacific/Apia")
    assert values["startOfPreviousDay"] == values["startOfDay"] == "2011-12-31T00:00:00.000+14:00"
    assert values["yesterdaysDate"] == "2011-12-30"


def test_values_come_from_the_scheduled_time_only():
    early = at("2026-06-01T23:59:59.999Z")
    assert render("${todaysDate} ${processTime}", early) == (
        "2026-06-01 2026-06-01T23:59:59.999+00:00"
    )


# --- syntax --------------------------------------------------------------------------


def test_double_dollar_escapes_a_literal_variable_opening():
    context = at("2026-01-01T00:00Z", project="p")
    assert render("$${project} is ${project}", context) == "${project} is p"
    assert render("cost: $5, $$, $ {x}, $}", context) == "cost: $5, $$, $ {x}, $}"
    # Scanned left to right: a lone `$` then the `$${` escape.
    assert render("$$${project}", context) == "$${project}"
    validate_template("$${unknownThing")


def test_values_are_not_expanded_again():
    context = at("2026-01-01T00:00Z", project="${jobId}", job_id="j", invocation_id="$${x}")
    assert render("${project} ${invocationId}", context) == "${jobId} $${x}"


def test_unknown_variable_message_names_it_and_its_offset():
    with pytest.raises(TemplateError) as caught:
        validate_template('{"since":"${startOfWeek}"}')
    assert str(caught.value) == (
        f"unknown variable ${{startOfWeek}} at offset 10; known: {KNOWN_LIST}; in on_failure and on_recovery"
        f" also: {HOOK_LIST}"
    )


def test_variable_names_are_case_sensitive():
    with pytest.raises(TemplateError, match=r"unknown variable \$\{StartOfDay\} at offset 0"):
        validate_template("${StartOfDay}")


def test_empty_variable_is_unknown():
    with pytest.raises(TemplateError, match=r"^unknown variable \$\{\} at offset 2;"):
        validate_template("a ${}")


@pytest.mark.parametrize(
    ("text", "offset"),
    [("abc ${startOfDay", 4), ("${", 0), ("x ${start of day}", 2), ('{"a":"${"}', 6)],
)
def test_unterminated_variable_message(text, offset):
    with pytest.raises(TemplateError) as caught:
        validate_template(text)
    assert str(caught.value) == (
        f"unterminated ${{ at offset {offset}: expected a variable name and '}}';"
        " write $${ for a literal ${"
    )


def test_render_raises_the_same_errors():
    with pytest.raises(TemplateError, match="unknown variable"):
        render("${nope}", at("2026-01-01T00:00Z"))


def test_template_variables_lists_names_once_in_order():
    text = "${startOfHour} ${project} $${attempt} ${startOfHour}"
    assert template_variables(text) == ["startOfHour", "project"]
    assert template_variables("plain") == []


def test_known_variables_are_exactly_the_contract_list():
    assert KNOWN_VARIABLES == set(KNOWN_LIST.split(", ")) | set(HOOK_LIST.split(", "))
    assert HOOK_VARIABLES == set(HOOK_LIST.split(", "))
    assert set(variables(at("2026-01-01T00:00Z"))) == KNOWN_VARIABLES - HOOK_VARIABLES


def test_context_rejects_naive_times_and_unknown_zones():
    with pytest.raises(ValueError, match="timezone-aware"):
        TemplateContext(datetime(2026, 1, 1))
    with pytest.raises(TemplateError, match="unknown time zone 'Mars/Olympus'"):
        TemplateContext(datetime(2026, 1, 1, tzinfo=UTC), "Mars/Olympus")


# --- properties ----------------------------------------------------------------------

ZONES = [
    "UTC",
    LA,
    "Europe/London",
    "Asia/Kolkata",
    "Australia/Lord_Howe",
    "America/Santiago",
    "America/Havana",
    "Asia/Beirut",
    "Pacific/Apia",
    "Asia/Kathmandu",
]

instants = st.datetimes(
    min_value=datetime(1950, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
contexts = st.builds(
    TemplateContext,
    scheduled_time=instants,
    timezone=st.sampled_from(ZONES),
    project=st.text(max_size=10),
    job_id=st.text(max_size=10),
    invocation_id=st.text(max_size=10),
    attempt=st.integers(1, 100),
    event_index=st.integers(0, 100),
    event_count=st.integers(1, 100),
    # A hook's context: every variable has a value (a target's may not use the hook's).
    hook=st.builds(HookValues, status=st.sampled_from(["FAILED", "SUCCEEDED"]), reason=st.text(max_size=20),
                   attempts=st.integers(1, 100), failures=st.integers(0, 100), invocation_url=st.text(max_size=10)),
)
pieces = st.one_of(
    st.text(alphabet="ab ${}\n\"é", max_size=6),
    st.sampled_from(sorted(KNOWN_VARIABLES)).map(lambda name: "${" + name + "}"),
    st.just("$${"),
)
templates = st.lists(pieces, max_size=8).map("".join)


@settings(max_examples=300)
@given(templates, contexts)
def test_render_never_raises_on_a_validated_template(text, context):
    try:
        validate_template(text)
    except TemplateError:
        return
    assert isinstance(render(text, context), str)


@given(st.text().filter(lambda text: "${" not in text), contexts)
def test_text_without_a_variable_opening_is_returned_unchanged(text, context):
    validate_template(text)
    assert render(text, context) is text


@given(
    st.lists(
        st.tuples(st.text(alphabet="ab{}\n", max_size=4), st.sampled_from(sorted(KNOWN_VARIABLES))),
        max_size=5,
    ),
    contexts,
)
def test_render_is_literal_text_plus_values(parts, context):
    values = variables(context)
    text = "".join(literal + "${" + name + "}" for literal, name in parts)
    assert render(text, context) == "".join(literal + values[name] for literal, name in parts)


@settings(max_examples=300)
@given(instants, st.sampled_from(ZONES))
def test_day_and_hour_boundaries_bracket_the_scheduled_time(instant, zone_name):
    check_boundaries(instant, zone_name)


def check_boundaries(instant: datetime, zone_name: str) -> None:
    zone = ZoneInfo(zone_name)
    values = variables(TemplateContext(instant, zone_name))
    local = instant.astimezone(zone)
    day_start = datetime.fromisoformat(values["startOfDay"])
    hour_start = datetime.fromisoformat(values["startOfHour"])
    previous_end = datetime.fromisoformat(values["endOfPreviousDay"])
    truncated = instant.replace(microsecond=instant.microsecond // 1000 * 1000)
    assert datetime.fromisoformat(values["processTime"]) == truncated
    assert values["todaysDate"] == local.date().isoformat()
    # The day starts at its first instant: on that date, and one millisecond earlier is not.
    assert day_start <= hour_start <= instant
    assert day_start.astimezone(zone).date() == local.date()
    assert previous_end == day_start - timedelta(milliseconds=1)
    assert previous_end.astimezone(zone).date() < local.date()
    # The hour start lies in the same local wall hour as the scheduled time.
    hour_local = hour_start.astimezone(zone)
    assert (hour_local.date(), hour_local.hour) == (local.date(), local.hour)
    # Every offset printed is the one in force at that instant.
    for name in ("startOfDay", "startOfPreviousDay", "startOfDayOneWeekAgo", "startOfHour"):
        printed = datetime.fromisoformat(values[name])
        assert printed.utcoffset() == printed.astimezone(zone).utcoffset()


def _transitions(zone: ZoneInfo, start: datetime, end: datetime):
    """UTC instants (to the hour) at which the zone's offset changes."""
    moment, offset = start, start.astimezone(zone).utcoffset()
    while moment < end:
        moment += timedelta(minutes=30)
        if moment.astimezone(zone).utcoffset() != offset:
            offset = moment.astimezone(zone).utcoffset()
            yield moment


@pytest.mark.parametrize(
    "zone_name", [LA, "Europe/London", "Australia/Lord_Howe", "America/Santiago", "America/Havana"]
)
def test_boundaries_around_every_recent_transition(zone_name):
    # Hypothesis rarely lands near a transition; sweep the day either side of each one.
    start, end = datetime(2022, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)
    for transition in _transitions(ZoneInfo(zone_name), start, end):
        for quarter in range(-26 * 4, 26 * 4):
            check_boundaries(transition + timedelta(minutes=15 * quarter, seconds=7), zone_name)
