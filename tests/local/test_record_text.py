"""A record's and a policy's text spelled directly (engine/adapters/local/record_text.py)
is byte for byte the plain encoding of `record_to_dict` and `policy_to_dict`: for every
field set away from its default, any text in the strings, instants in any zone and any
year; and a record with lists to write goes the general way."""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import date, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.adapters.local.record_text import policy_text, record_text
from engine.adapters.local.sqlite_rows import RecordCache
from statemachine.calendars import Calendar
from statemachine.durations import UTC
from statemachine.policy import Catchup, FanoutPolicy, JobPolicy, Overlap, RetryPolicy
from statemachine.record import ActiveInvocation, Awaited, JobRecord, JobState, Occurrence, evolve, new_record
from statemachine.record_form import record_to_dict
from statemachine.stored_form import policy_to_dict


def _plain(data) -> str:
    return json.dumps(data, separators=(",", ":"))


T = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=UTC)
BERLIN = timezone(timedelta(hours=2))

EVERY_POLICY_FIELD = JobPolicy(
    schedule_text='0 "x" \u00e9\U0001f600 \\ \n', timezone="Europe/Berlin",
    at=(T, datetime(999, 1, 2, 3, 4, 5, tzinfo=UTC), datetime(2027, 1, 1, 9, tzinfo=BERLIN)),
    overlap=Overlap.ALLOW, max_concurrent=3, catchup=Catchup.ALL, catchup_window=timedelta(minutes=90),
    timeout=timedelta(hours=2, milliseconds=7), attempt_timeout=timedelta(seconds=30),
    retry=RetryPolicy(5, timedelta(seconds=2), timedelta(minutes=7)), fanout=FanoutPolicy(10_000, timedelta(days=1)),
    triggers=("a", 'b"\u2028', ""), triggers_on_failure=("f", "\u00e9"),
    throttle="t\x00q", pause_after_failures=4, notify_failures=True,
    notify_recoveries=True, jitter=timedelta(milliseconds=1500), start=T, end=datetime(2030, 1, 1, tzinfo=BERLIN),
    exclude=(Calendar("h\u00e9", "Europe/Berlin", (date(2026, 12, 25),),
                      ((datetime(2026, 12, 27), datetime(2026, 12, 28)),)),),
    after=("u\u00e9", 'v"'), after_window=timedelta(minutes=20), reports_to=("down",),
    revision="0123456789abcdef", later='{"sla":{"within":"5m"},"z\u00e9":[1]}')

EVERY_RECORD_FIELD = JobRecord(
    project='p"policy":null', job_id="j\ud800\u00ff", state=JobState.PAUSED, policy=EVERY_POLICY_FIELD,
    disabled=False, paused=True, pause_reason="5 failures \t in a row", paused_at=T, paused_by="user:a@b.c",
    generation=2**70, nonce_counter=12, tick_at=datetime(2026, 3, 29, 3, 30, tzinfo=BERLIN), tick_nonce="3/12",
    scheduled_until=T, paused_through=T + timedelta(hours=1), watchdog_at=T + timedelta(seconds=30),
    consecutive_failures=5, failures_since_success=6, last_finished_at=T, last_succeeded_at=T - timedelta(days=1))


def test_every_field_of_a_record_and_its_policy_is_spelled_as_the_plain_encoding():
    # Every field away from its default: a field added to the dataclass but not here fails below.
    assert all(getattr(EVERY_RECORD_FIELD, f.name) != f.default for f in fields(JobRecord)
               if f.name not in ("active", "buffered", "runs", "dropping", "awaiting", "later"))
    assert all(getattr(EVERY_POLICY_FIELD, f.name) != getattr(JobPolicy(), f.name) for f in fields(JobPolicy))
    assert policy_text(EVERY_POLICY_FIELD) == _plain(policy_to_dict(EVERY_POLICY_FIELD))
    for record in (EVERY_RECORD_FIELD, new_record("p", "j"), evolve(EVERY_RECORD_FIELD, tick_nonce=None)):
        policy = "null" if record.policy is None else policy_text(record.policy)
        assert record_text(record, policy) == _plain(record_to_dict(record))
        assert RecordCache().record_text(record) == _plain(record_to_dict(record))
    # A record that keeps a later release's fields goes the general way, and reads back as written.
    kept = evolve(EVERY_RECORD_FIELD, later='{"sla":1,"version":3}')
    assert record_text(kept, "null") is None
    assert json.loads(RecordCache().record_text(kept)) == record_to_dict(kept)
    assert record_to_dict(kept)["version"] == 3 and record_to_dict(kept)["sla"] == 1


def test_a_policy_without_its_optional_fields_leaves_them_out():
    plain = JobPolicy(schedule_text="every 5m", revision="r")
    assert policy_text(plain) == _plain(policy_to_dict(plain))
    assert "jitter_ms" not in policy_text(plain) and '"start"' not in policy_text(plain)


def test_a_record_with_lists_to_write_goes_the_general_way():
    active = ActiveInvocation("i1", T, "schedule", T + timedelta(minutes=10))
    for record in (evolve(EVERY_RECORD_FIELD, active=(active,)),
                   evolve(EVERY_RECORD_FIELD, buffered=(Occurrence("i2", T, "manual"),)),
                   evolve(EVERY_RECORD_FIELD, awaiting=(Awaited(T, T + timedelta(hours=1), ("a",)),))):
        assert record_text(record, "null") is None
        assert RecordCache().record_text(record) == _plain(record_to_dict(record))


texts = st.text(max_size=12)
instants = st.none() | st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
                                    timezones=st.sampled_from([UTC, BERLIN, timezone(timedelta(hours=-5))]))


@settings(max_examples=300, deadline=None)
@given(texts, texts, texts, instants, instants, st.integers(0, 2**64), st.booleans(), st.none() | texts,
       st.lists(texts, max_size=3), texts)
def test_any_strings_instants_and_counts_are_spelled_as_the_plain_encoding(
        project, job_id, reason, tick_at, paused_at, generation, paused, nonce, triggers, schedule):
    policy = JobPolicy(schedule_text=schedule, triggers=tuple(triggers), throttle=reason,
                       start=tick_at, end=paused_at, revision=job_id)
    record = JobRecord(project, job_id, JobState.SCHEDULED, policy, False, paused, reason, paused_at, reason,
                       generation, generation, tick_at, nonce, tick_at, paused_at, watchdog_at=tick_at,
                       consecutive_failures=generation, last_finished_at=paused_at)
    assert policy_text(policy) == _plain(policy_to_dict(policy))
    assert record_text(record, policy_text(policy)) == _plain(record_to_dict(record))


def test_policies_that_differ_in_one_shared_field_each_get_their_own_text():
    # The fields most jobs of a file share are spelled once per combination: a policy
    # differing from a cached one in any single field is spelled anew.
    base = JobPolicy(schedule_text="every 5m", revision="r")
    assert policy_text(base) == _plain(policy_to_dict(base))
    for f in fields(JobPolicy):
        changed = evolve(base, **{f.name: getattr(EVERY_POLICY_FIELD, f.name)})
        assert policy_text(changed) == _plain(policy_to_dict(changed)), f.name
        assert policy_text(base) == _plain(policy_to_dict(base))
