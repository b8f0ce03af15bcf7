"""Waiting occurrences (overlap `buffer_all`, `catchup: all`): each delivered once, in
order, with its own time, trigger and id, by a job record whose size does not grow
with how many wait."""

import json

import pytest

from tests.unit.waiting_scenarios import GOLDEN, SCENARIOS, run, summary

GOLDEN_RUNS = json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_small_run_delivers_and_skips_what_the_machine_did_before(name):
    """The same deliveries (time, trigger, id) and finishes in the same order, and the
    same SKIPPED rows, as when every waiting occurrence sat in the record one by one."""
    assert summary(run(name)) == GOLDEN_RUNS[name]
