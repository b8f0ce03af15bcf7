"""The embedded delivery path's shortcuts keep what they stand for: a job record's
stored text, and the record stage's batches (engine/adapters/local/)."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime

from engine.adapters.local.inbox import Inbox
from engine.adapters.local.pipeline import wait_for_writes
from engine.adapters.local.record_cache import Generations, RecordCache
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.ports import JobSource, StoredJob
from statemachine.definition import JobDefinition
from statemachine.durations import UTC
from statemachine.record import evolve, new_record
from statemachine.record_form import record_to_dict
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
    inbox: Inbox[int] = Inbox(linger=30.0, most=3)
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
    inbox: Inbox[int] = Inbox()
    inbox.put(1)
    assert inbox.take() == [1]


def test_a_record_written_a_moment_ago_is_read_back_without_decoding_whatever_came_between():
    # The cache used to forget everything once it held LIMIT records: a staged attempt's
    # record, written at its commit, was then decoded again when read at its time.
    cache = RecordCache()
    staged = evolve(new_record("p", "staged"), generation=1)
    text = cache.record_text(staged)
    cache.remember(text, staged)
    for index in range(RecordCache.LIMIT + RecordCache.LIMIT // 2):
        other = new_record("p", f"j{index}")
        cache.remember(cache.record_text(other), other)
        if index % 97 == 0:
            assert cache.decode(text) is staged  # read now and then: kept, never decoded anew
    assert cache.decode(text) is staged


def test_generations_keep_the_latest_entries_and_what_was_used_since():
    kept: Generations[int, str] = Generations(4)
    for key in range(10):  # young {8, 9}, old {4, 5, 6, 7}; 0-3 dropped
        kept.put(key, str(key))
    assert kept.get(9) == "9" and kept.get(0) is None
    assert kept.get(5) == "5"  # a hit in the old generation moves it back into the young
    kept.put(10, "10")  # young full: {8, 9, 5, 10} becomes old, 4, 6 and 7 go
    assert [kept.get(key) for key in (4, 5, 6, 7, 8, 10)] == [None, "5", None, None, "8", "10"]


def test_results_wait_for_the_writer_to_write_what_is_due_for_a_while_at_most():
    left = [3]

    def backlog() -> int:  # three requests written, one each time it is asked
        left[0] = max(left[0] - 1, 0)
        return left[0]
    began = time.monotonic()
    wait_for_writes(backlog, most=5.0)
    assert left == [0] and time.monotonic() - began < 1.0  # went on once all were written
    began = time.monotonic()
    wait_for_writes(lambda: 1000, most=0.1)  # a writer that never catches up holds results 0.1 s at most
    assert 0.1 <= time.monotonic() - began < 1.0


def test_a_staged_job_read_back_unchanged_is_the_callers_own_object_and_a_changed_one_is_read_anew(tmp_path):
    # A burst's staged jobs outnumber the record cache; read back at their time, those
    # whose rows still hold what their commit wrote are not decoded again.
    store = SqliteJobStore(tmp_path / "s.db")
    definition = JobDefinition(id="j", schedule="* * * * *", target={"noop": {}})
    job = StoredJob(evolve(new_record("p", "j"), generation=1), definition, JobSource.CONFIG)
    store.run_in_transaction(lambda tx: tx.put_job(job))
    text = store.records.written_text(job.record)
    assert text is not None and store.records.written_text(evolve(job.record)) is None  # by object, not value
    store.records = RecordCache()  # nothing cached: only the known text can spare the decode
    assert store.get_jobs([("p", "j")], {("p", "j"): (job, text)})[("p", "j")] is job
    for changed in (StoredJob(evolve(job.record, generation=2), definition, JobSource.CONFIG),
                    StoredJob(job.record, definition, JobSource.CONFIG, config_error="broken")):
        store.run_in_transaction(lambda tx: tx.put_job(changed))
        read = store.get_jobs([("p", "j")], {("p", "j"): (job, text)})[("p", "j")]
        assert read is not job and read == changed
