"""The chain's queue shards (statemachine/shards.py): a job's shard is a stable hash of
its name, shard 0 keeps the configured queue's name, and every shard (whatever N is now)
counts as Sundial's own queue."""

from __future__ import annotations

from collections import Counter

import pytest

from config.settings import from_environment
from statemachine.safety import OwnService
from statemachine.shards import MAX_SHARDS, chain_queue_ids, is_chain_queue, shard_of


def test_a_jobs_shard_is_the_same_in_every_process_and_release():
    # Fixed values: a job whose shard changed between releases would move queue for no
    # reason (and Python's hash() would give each process its own answer).
    assert [shard_of("billing", "nightly-report", n) for n in (1, 8, 64)] == [0, 1, 25]
    assert [shard_of("p", f"j{i}", 4) for i in range(8)] == [2, 2, 0, 1, 3, 0, 2, 1]


def test_one_shard_is_todays_single_queue():
    assert chain_queue_ids("sundial", 1) == ["sundial"]
    assert {shard_of("p", f"j{i}", 1) for i in range(100)} == {0}


def test_shards_keep_the_queue_name_first_and_number_the_rest():
    assert chain_queue_ids("sundial", 4) == ["sundial", "sundial-1", "sundial-2", "sundial-3"]


def test_jobs_spread_evenly_over_the_shards():
    counts = Counter(shard_of("proj", f"job-{i}", 8) for i in range(16_000))
    assert set(counts) == set(range(8))
    assert max(counts.values()) < 1.1 * 2_000 and min(counts.values()) > 0.9 * 2_000


def test_a_changed_shard_count_moves_only_where_the_job_hashes():
    moved = [i for i in range(1_000) if shard_of("p", f"j{i}", 8) != shard_of("p", f"j{i}", 16)]
    assert 300 < len(moved) < 700  # about half move
    # Every job's shard at 16 is its shard at 8 or that plus 8 (same hash, modulo).
    assert all(shard_of("p", f"j{i}", 16) == shard_of("p", f"j{i}", 8) + 8 for i in moved)


@pytest.mark.parametrize("queue_id, own", [
    ("sundial", True), ("sundial-1", True), ("sundial-63", True), ("sundial-499", True),
    ("sundial-0", False), ("sundial-01", False), ("sundial-x", False), ("sundial-1a", False),
    ("sundials", False), ("other-1", False),
])
def test_every_shard_whatever_n_is_counts_as_the_chains(queue_id, own):
    assert is_chain_queue(queue_id, "sundial") is own
    refusal = OwnService("", "sundial").refusal("https://w.example.com/x", f"projects/p/locations/l/queues/{queue_id}")
    assert (refusal is not None) is own


def test_the_shard_count_comes_from_the_environment_and_bad_values_name_the_variable():
    assert from_environment({}).tasks_queue_shards == 1
    assert from_environment({"SUNDIAL_TASKS_QUEUE_SHARDS": "64"}).tasks_queue_shards == 64
    for bad in ("0", "x", "-2", str(MAX_SHARDS + 1)):
        with pytest.raises(SystemExit, match="SUNDIAL_TASKS_QUEUE_SHARDS"):
            from_environment({"SUNDIAL_TASKS_QUEUE_SHARDS": bad})
