"""Storage written by a release, opened and driven by today's code (the layout is
versioned, and what today's release wrote is upgraded in place).

Each fixture directory holds what one release left at one instant, on SQLite and on
Datastore (see make_release_fixtures.py for the scenario); each is opened once per
backend and driven six minutes forward (restore.py), and the tests below read what
happened. Counts combine what the release sent before the snapshot (its facts) with
what today's code sent after it.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from engine.adapters.local.schema import MIGRATIONS
from statemachine.durations import parse_instant
from statemachine.record import RECORD_VERSION
from tests.upgrade.restore import RELEASES, Resumed, open_datastore, open_sqlite

MINUTE = timedelta(minutes=1)


@pytest.fixture(scope="module", params=[(r, b) for r in RELEASES for b in ("sqlite", "datastore")],
                ids=lambda param: f"{param[0]}-{param[1]}")
def resumed(request, tmp_path_factory) -> Resumed:
    release, backend = request.param
    if backend == "sqlite":
        opened = open_sqlite(release, tmp_path_factory.mktemp(f"upgrade-{release}"))
    else:
        opened = open_datastore(release, request.getfixturevalue("datastore_emulator"))
    return Resumed(opened).play()


def _active(resumed: Resumed, job_id: str) -> dict:
    [entry] = resumed.facts["jobs"][job_id]["active"]
    return entry


def _released(resumed: Resumed, invocation_id: str, kind: str = "event") -> list[dict]:
    """What the release sent for the invocation before the snapshot."""
    return [s for s in resumed.facts["sent"] if s["invocation"] == invocation_id and s["kind"] == kind]


def _sent_today(resumed: Resumed, job_id: str) -> list:
    """The job's own events today's code sent, in order (notifications left out)."""
    return [r for r in resumed.sent if r.job_id == job_id and "http" not in r.target]


def _row(resumed: Resumed, job_id: str, invocation_id: str):
    [row] = [r for r in resumed.rows[job_id] if r.id == invocation_id]
    return row


def test_every_job_loads_as_the_release_left_it(resumed):
    versions = {job_id: json.loads(text)["version"] for job_id, text in resumed.opened.records_at_open.items()}
    assert versions == dict.fromkeys(resumed.facts["jobs"], resumed.facts["record_version"])
    assert set(resumed.loaded) == set(resumed.facts["jobs"])
    for job_id, facts in resumed.facts["jobs"].items():
        view = resumed.views[job_id]
        assert (view["state"], view["paused"]) == (facts["state"], facts["paused"]), job_id
        assert view["active_invocations"] == [a["id"] for a in facts["active"]], job_id
    # The history the release wrote reads back, each row as it was, and stays.
    for job_id, facts in resumed.facts["jobs"].items():
        kept = {row.id: (row.status, row.reason, row.trigger) for row in resumed.rows[job_id]}
        for row in facts["invocations"]:
            if row["status"] in ("SUCCEEDED", "FAILED", "SKIPPED", "ABORTED"):
                assert kept[row["id"]] == (row["status"], row["reason"], row["trigger"]), (job_id, row)


def test_the_unchanged_config_file_changes_nothing_at_start(resumed):
    assert resumed.reimported == 0


def test_the_storage_is_upgraded_in_place(resumed):
    # Every job and invocation the release stored is still there, under its own key.
    assert len(resumed.opened.keys_at_open) > len(resumed.facts["jobs"])
    assert resumed.opened.keys_at_open <= resumed.opened.stored_keys()
    if resumed.opened.schema_versions is not None:  # SQLite: the file's migrations ran, in it
        before, after = resumed.opened.schema_versions
        assert (before, after) == (resumed.facts["sqlite_schema_version"], len(MIGRATIONS))


def test_the_fanout_in_flight_delivers_each_event_once_overall(resumed):
    entry = _active(resumed, "fanout")
    earlier = _released(resumed, entry["id"])
    today = [(r.event_index, r.attempt) for r in resumed.sent if r.invocation_id == entry["id"]]
    # Nothing the release finished is sent again; every other event's current attempt
    # is sent once (each succeeds today), numbered on from where the release left it.
    expected = [(index, entry["attempts"][index]) for index in range(entry["event_count"])
                if index not in entry["done"]]
    assert sorted(today) == expected
    sent = [(s["event"], s["attempt"]) for s in earlier] + today
    assert len(sent) == len(set(sent))  # no attempt of any event went out twice
    succeeded = [s["event"] for s in earlier if s["outcome"] == "succeeded"] + [index for index, _ in today]
    assert sorted(succeeded) == list(range(entry["event_count"]))
    row = _row(resumed, "fanout", entry["id"])
    assert (row.status, row.event_count) == ("SUCCEEDED", entry["event_count"])
    # It finished the old way, its events in the job's record: no progress rows of its own.
    assert resumed.progress[entry["id"]] == {}


def test_the_fanout_occurrences_after_it_deliver_each_event_once(resumed):
    entry = _active(resumed, "fanout")
    later = [r for r in resumed.sent if r.job_id == "fanout" and r.invocation_id != entry["id"]]
    by_invocation: dict[str, list[int]] = {}
    for request in later:
        by_invocation.setdefault(request.invocation_id, []).append(request.event_index)
    assert len(by_invocation) >= 4
    for invocation_id, events in by_invocation.items():
        row = _row(resumed, "fanout", invocation_id)
        if row.status != "SUCCEEDED":  # the last one, still spreading its events at the end
            assert row is resumed.rows["fanout"][-1] and row.status == "RUNNING"
            continue
        assert sorted(events) == list(range(entry["event_count"])), invocation_id
        assert resumed.progress[invocation_id]  # begun by today's code: its events have rows


@pytest.mark.parametrize("job_id", ["buffered", "catchup"])
def test_buffered_occurrences_are_delivered_in_order_once_each(resumed, job_id):
    facts = resumed.facts["jobs"][job_id]
    waiting = [b["id"] for b in facts["buffered"]]
    assert waiting  # (else the fixture shows nothing here)
    # The one the release left in flight answered 202; its completion comes now.
    in_flight = _active(resumed, job_id)["id"]
    assert resumed.completions[in_flight] == "SUCCEEDED"
    today = [r.invocation_id for r in _sent_today(resumed, job_id)]
    assert today[:len(waiting)] == waiting
    released = {s["invocation"] for s in resumed.facts["sent"] if s["job"] == job_id}
    assert len(today) == len(set(today)) and not released & set(today)
    for waited in facts["buffered"]:
        row = _row(resumed, job_id, waited["id"])
        assert (row.status, row.trigger) == ("SUCCEEDED", waited["trigger"])
        assert row.scheduled_time == parse_instant(waited["scheduled_time"])
    # Then the job runs on time again: one invocation a minute, each delivered once.
    scheduled = [r.scheduled_time for r in _sent_today(resumed, job_id)][len(waiting):]
    assert len(scheduled) >= 4 and all(b - a == MINUTE for a, b in zip(scheduled, scheduled[1:]))


def test_the_paused_job_stays_paused_then_resumes(resumed):
    assert resumed.facts["jobs"]["paused"]["paused"]
    assert resumed.paused_job.record.paused and resumed.paused_job.record.state.value == "PAUSED"
    assert resumed.paused_sent == 0
    fired = [r.scheduled_time for r in _sent_today(resumed, "paused")]
    assert len(fired) >= 3 and fired[0] > resumed.resumed_at
    assert all(b - a == MINUTE for a, b in zip(fired, fired[1:]))
    assert not resumed.jobs["paused"].record.paused


def test_the_ordinary_job_keeps_firing_every_minute(resumed):
    snapshot = resumed.snapshot_time
    fired = [r.scheduled_time for r in _sent_today(resumed, "ordinary")]
    first = snapshot.replace(second=0, microsecond=0) + MINUTE
    assert fired == [first + MINUTE * n for n in range(6)]
    rows = {row.scheduled_time: row.status for row in resumed.rows["ordinary"]}
    assert all(rows[time] == "SUCCEEDED" for time in fired)


def test_the_pending_notification_is_sent_once_on_the_attempt_it_was_due(resumed):
    [failed] = resumed.facts["jobs"]["notify"]["invocations"]
    status, attempt = failed["notification"]
    assert status == "pending"
    today = [r for r in resumed.sent if r.invocation_id == failed["id"]]
    assert [("http" in r.target, r.attempt) for r in today] == [(True, attempt)]
    row = _row(resumed, "notify", failed["id"])
    assert (row.status, row.notification.status.value, row.notification.attempt) == ("FAILED", "sent", attempt)


def test_the_attempt_left_in_flight_settles_and_the_job_fires_again(resumed):
    entry = _active(resumed, "inflight")
    assert entry["started"] and not entry["done"]
    again = [r for r in resumed.sent if r.invocation_id == entry["id"]]
    assert len(again) <= 1
    row = _row(resumed, "inflight", entry["id"])
    assert row.status == ("SUCCEEDED" if again else "FAILED")
    fired = [r.scheduled_time for r in _sent_today(resumed, "inflight") if r.invocation_id != entry["id"]]
    end = resumed.snapshot_time + timedelta(minutes=6)
    assert fired[-3:] == [end - MINUTE * n for n in (2, 1, 0)]


def test_every_record_once_written_is_stored_at_the_lowest_version_that_holds_it(resumed):
    # Version 2 only while a fan-out keeps its events in rows; else 1, which the release reads.
    before, after = resumed.opened.records_at_open, resumed.opened.stored_records()
    written = {job_id: json.loads(after[job_id]) for job_id in after if after[job_id] != before[job_id]}
    assert written.keys() >= {"ordinary", "fanout", "buffered", "catchup", "paused", "inflight"}
    for job_id, record in written.items():
        in_rows = any(entry.get("events_in_rows") for entry in record["active"])
        assert record["version"] == (RECORD_VERSION if in_rows else 1), job_id




def test_attempts_left_in_flight_before_epochs_existed_are_driven_on_from_epoch_zero(resumed):
    # The release stored no epoch (the fencing token of an attempt's issue): its in-flight
    # attempt reads as epoch 0, and the tests above show it settled and delivered at most once more.
    # (Should a release's fixture ever carry epochs, this reading goes untested: make one that does not.)
    assert "epoch" not in _active(resumed, "inflight")
