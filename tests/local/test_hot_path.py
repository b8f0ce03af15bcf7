"""The embedded delivery path's shortcuts keep what they stand for: a job record's
stored text, and the record stage's batches (engine/adapters/local/)."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime

from engine.adapters.local.pipeline import _Inbox
from engine.adapters.local.sqlite_rows import RecordCache
from statemachine.durations import UTC
from statemachine.record import evolve, new_record, record_to_dict
from tests.unit.machine_helpers import policy


def _plain(record) -> str:
    return json.dumps(record_to_dict(record), separators=(",", ":"))


def test_a_records_text_is_the_plain_encoding_whatever_its_ids_hold():
    cache = RecordCache()
    tricky = new_record('p"policy":null', '"policy":null,"x"')
    with_policy = evolve(tricky, policy=policy(schedule_text="*/5 * * * * ?", throttle='t"q'),
                         tick_at=datetime(2026, 6, 1, tzinfo=UTC))
    for record in (new_record("p", "j"), tricky, with_policy):
        assert cache.record_text(record) == _plain(record)
    # Again from the cached policy text, and for a new policy object of another record.
    later = evolve(with_policy, generation=7)
    assert cache.record_text(later) == _plain(later)
    other = evolve(later, policy=policy(schedule_text="0 0 * * * ?"))
    assert cache.record_text(other) == _plain(other)
    assert json.loads(cache.record_text(other))["policy"]["schedule"] == "0 0 * * * ?"


def test_the_record_stage_takes_a_trickle_of_results_as_one_batch():
    inbox: _Inbox[int] = _Inbox(linger=30.0, most=3)
    taken: list[list[int] | None] = []
    taker = threading.Thread(target=lambda: taken.append(inbox.take()))
    inbox.put(1)
    taker.start()
    time.sleep(0.2)  # the taker has found 1 by now (without a linger it would take it alone)
    for item in (2, 3, 4):
        inbox.put(item)
    taker.join()
    assert taken == [[1, 2, 3]]  # it waited for a full batch, well within its linger
    inbox.finish()
    assert inbox.take() == [4]  # a stage told to finish takes what is left at once
    assert inbox.take() is None


def test_a_stage_that_does_not_linger_takes_what_is_there():
    inbox: _Inbox[int] = _Inbox()
    inbox.put(1)
    assert inbox.take() == [1]
