"""The text the SQLite store keeps for a job's definition: the canonical JSON its revision
hashes, encoded once for both; non-ASCII definitions keep the escaped form they always had.
And stored instants keep strftime's spelling, whatever the year."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import fields, replace
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config.jobs import revision_of
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.ports import StoredJob
from statemachine.definition import CatchupSpec, FanoutSpec, JobDefinition, RetrySpec
from statemachine.policy import Catchup, Overlap
from statemachine.record import new_record
from statemachine.stored_form import stored_time


def _stored_text(tmp_path, definition: JobDefinition) -> str:
    store = SqliteJobStore(tmp_path / "s.db")
    store.run_in_transaction(lambda tx: tx.put_job(StoredJob(new_record("p", definition.id), definition)))
    conn = sqlite3.connect(tmp_path / "s.db")
    try:
        return conn.execute("SELECT definition FROM jobs").fetchone()[0]
    finally:
        conn.close()


def test_the_store_keeps_the_text_the_revision_hashes(tmp_path):
    definition = JobDefinition(id="j", schedule="0 9 * * *", target={"http": {"url": "http://h/x", "body": "b"}})
    text = _stored_text(tmp_path, definition)
    assert text == definition.canonical_json
    assert revision_of(JobDefinition.from_dict(json.loads(text))) == revision_of(definition)
    assert JobDefinition.from_dict(json.loads(text)) == definition


def test_a_non_ascii_definition_is_kept_escaped_as_before(tmp_path):
    definition = JobDefinition(id="j", schedule="0 9 * * *", target={"http": {"url": "http://h/x", "body": "é"}})
    text = _stored_text(tmp_path, definition)
    assert text == json.dumps(definition.to_dict(), separators=(",", ":")) and text.isascii()
    assert JobDefinition.from_dict(json.loads(text)) == definition


def test_a_changed_copy_encodes_its_own_text():
    definition = JobDefinition(id="j", schedule="0 9 * * *", target={"noop": {}})
    assert '"schedule":"0 9 * * *"' in definition.canonical_json
    changed = replace(definition, schedule="0 10 * * *")
    assert '"schedule":"0 10 * * *"' in changed.canonical_json
    assert revision_of(changed) != revision_of(definition)


@pytest.mark.parametrize("instant", [
    datetime(1, 1, 1, tzinfo=timezone.utc), datetime(999, 12, 31, 23, 59, 59, tzinfo=timezone.utc),
    datetime(1000, 1, 1, tzinfo=timezone.utc), datetime(2026, 3, 29, 1, 30, 0, 5, tzinfo=timezone(timedelta(hours=2))),
    datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc),
])
def test_a_stored_instant_is_spelled_as_strftime_spells_it(instant):
    assert stored_time(instant) == instant.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@settings(max_examples=500, deadline=None)
@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
                    timezones=st.sampled_from([timezone.utc, timezone(timedelta(hours=14)),
                                               timezone(timedelta(hours=-9, minutes=-30))])))
def test_any_stored_instant_is_spelled_as_strftime_spells_it(instant):
    assert stored_time(instant) == instant.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
EVERY_FIELD = JobDefinition(
    id="j\u00e9\"x", target={"http": {"url": "http://h/x", "method": "PUT", "headers": {"Z": "1", "A": "\u2028"},
                                      "body": "${jobId}", "timeout": "30s", "async": True,
                                      "auth": {"oidc": {"service_account": "s@p.iam", "audience": "a"}}}},
    schedule="0 9 * * *", timezone="Europe/Berlin", disabled=True, overlap=Overlap.ALLOW, max_concurrent=4,
    catchup=CatchupSpec(Catchup.ALL, "2h"), timeout="1h30m", retry=RetrySpec(5, "2s", "7m"),
    fanout=FanoutSpec(100, "1m"), throttle="t\\", triggers=("b", "a", {"job": "c", "on": "failed"}),
    pause_after_failures=3,
    on_failure={"pubsub": {"topic": "projects/P/topics/T", "data": "", "attributes": {"k": "v"}}},
    on_recovery={"noop": {}}, description="line\nbreak \ud800", labels={"team": "data", "a": "1"},
    jitter="30s", start="2026-01-01T00:00:00Z", end="2027-01-01T00:00:00Z",
    exclude=({"name": "hé", "timezone": "UTC", "dates": ["2026-12-25"],
              "ranges": [{"start": "2026-12-27T00:00:00", "end": "2026-12-28T00:00:00"}]},),
    after=("up\u00e9", 'x"'), after_window="20m")


def test_the_canonical_text_is_the_sorted_encoding_with_every_field_set_or_left_out():
    assert all(getattr(EVERY_FIELD, f.name) not in (None, f.default) for f in fields(JobDefinition)
               if f.name not in ("at", "later"))  # a later release's fields: checked below
    one_off = replace(EVERY_FIELD, schedule=None, at=("2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"))
    bare = JobDefinition(id="j", schedule="every 5m", target={"noop": {}})
    http = {"url": "u", "method": "POST", "headers": {}, "body": "", "timeout": "1m", "async": False}
    targets = [{"http": http}, {"http": {**http, "extra": 1}}, {"http": {**http, "async": 1}},
               {"http": {**http, "body": 5}}, {"http": {**http, "headers": None}}, {"pubsub": {"topic": "t"}}]
    for definition in (EVERY_FIELD, one_off, bare, replace(bare, throttle="t", pause_after_failures=0),
                       *(replace(bare, target=target) for target in targets)):
        assert definition.canonical_json == _ENCODER.encode(definition.to_dict())
    kept = replace(EVERY_FIELD, later='{"sla":"5m","z":[1]}')  # kept as read: the encoder spells them
    assert kept.canonical_json == _ENCODER.encode(kept.to_dict()) and '"sla":"5m"' in kept.canonical_json


def test_a_field_not_of_its_type_is_encoded_as_the_encoder_does():
    # Booleans are ints to Python, not to JSON; the spelling steps aside for the encoder.
    for odd in (replace(EVERY_FIELD, max_concurrent=True), replace(EVERY_FIELD, disabled=1),
                replace(EVERY_FIELD, pause_after_failures=False), replace(EVERY_FIELD, timeout=90)):
        assert odd.canonical_json == _ENCODER.encode(odd.to_dict())


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=10), st.text(max_size=10), st.none() | st.text(max_size=10),
       st.lists(st.text(max_size=5), max_size=3), st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3))
def test_any_text_in_a_definition_is_spelled_as_the_encoder_spells_it(job_id, body, description, triggers, headers):
    target = {"http": {"url": job_id, "method": body, "headers": headers, "body": body, "timeout": "1m", "async": True}}
    definition = JobDefinition(id=job_id, schedule=body, target=target,
                               description=description, triggers=tuple(triggers), throttle=description)
    assert definition.canonical_json == _ENCODER.encode(definition.to_dict())
