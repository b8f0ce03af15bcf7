"""The embedded path's knobs (engine/adapters/local/tuning.py): the defaults keep every
relation the modules' prose relies on, and a tuning that breaks one is refused."""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import timedelta

import pytest

from engine.adapters.local.tuning import DEFAULT_LOCAL_TUNING, LocalTuning
from engine.retry import Backoff

MS = timedelta(milliseconds=1)


def test_the_defaults_are_the_values_the_measurements_were_taken_with():
    tuning = LocalTuning()
    assert (tuning.lease_lookahead, tuning.handover_grain, tuning.early_grain) == (150 * MS, 10 * MS, 100 * MS)
    assert tuning.early_slack == 250 * MS
    assert (tuning.record_linger, tuning.writes_first, tuning.last_commits) == (50 * MS, 2000 * MS, 500 * MS)
    assert (tuning.mark_lead, tuning.gather, tuning.release_mark_span) == (50 * MS, 4 * MS, 250 * MS)
    assert (tuning.leased_per_worker, tuning.burst_tasks, tuning.record_tries) == (4, 1_000, 12)
    assert tuning.record_backoff == Backoff(first=500 * MS, most=timedelta(seconds=1))
    assert (tuning.release_part, tuning.most_held, tuning.instant_requests, tuning.gather_most) == (
        64, 10_000, 256, 64)


@pytest.mark.parametrize("broken, names", [
    ({"early_grain": 251 * MS, "lease_lookahead": 500 * MS}, "early_grain must not exceed early_slack"),
    ({"early_grain": 151 * MS}, "early_grain must not exceed lease_lookahead"),
    ({"handover_grain": 151 * MS}, "handover_grain"),
    ({"gather": 250 * MS}, "gather must be shorter than release_mark_span"),
    ({"release_mark_span": 40 * MS}, "mark_lead"),
    ({"record_linger": timedelta(seconds=2)}, "record_linger"),
    ({"release_part": 10_001}, "release_part"),
])
def test_each_broken_relation_is_refused(broken, names):
    with pytest.raises(ValueError, match=names):
        replace(DEFAULT_LOCAL_TUNING, **broken)


@pytest.mark.parametrize("name", [field.name for field in fields(LocalTuning)])
def test_a_knob_at_zero_is_refused(name):
    zeros = {timedelta: timedelta(0), int: 0, Backoff: Backoff(timedelta(0), timedelta(seconds=1))}
    zero = zeros[type(getattr(DEFAULT_LOCAL_TUNING, name))]
    with pytest.raises(ValueError, match=name):
        replace(DEFAULT_LOCAL_TUNING, **{name: zero})


def test_small_knobs_that_keep_the_relations_are_taken():
    small = LocalTuning(lease_lookahead=20 * MS, handover_grain=MS, early_grain=10 * MS, record_linger=MS,
                        writes_first=100 * MS, last_commits=100 * MS, mark_lead=5 * MS, gather=MS,
                        release_mark_span=20 * MS, instant_requests=4, release_part=2)
    assert small.instant_requests == 4
