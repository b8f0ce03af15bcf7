"""bench/scale_simulation.py's model, small and fast: its invariants, not its figures
(the bench prints those)."""

from __future__ import annotations

from dataclasses import replace

from bench.scale_simulation import Limits, month_cost, simulate

JOBS = 3_000


def test_every_job_starts_exactly_once_and_never_early():
    for aligned in (True, False):
        for shards in (1, 4):
            outcome = simulate(JOBS, shards, aligned)
            assert outcome.delivered == JOBS == len(outcome.lateness)
            assert min(outcome.lateness) > 0


def test_lateness_grows_with_the_load_and_shrinks_with_the_shards():
    p99 = {(jobs, shards): simulate(jobs, shards, True).percentile(0.99)
           for jobs in (1_000, 3_000) for shards in (1, 4)}
    assert p99[(1_000, 1)] < p99[(3_000, 1)]
    assert p99[(1_000, 4)] < p99[(3_000, 4)]
    assert p99[(3_000, 4)] < p99[(3_000, 1)]
    # One queue's 500 dispatches a second bound the last job from below.
    assert max(simulate(3_000, 1, True).lateness) >= 3_000 / 500 - 1


def test_a_spread_hour_is_on_time_and_a_write_ceiling_or_an_instance_cap_makes_it_later():
    spread = simulate(JOBS, 1, False)
    assert spread.percentile(0.99) < 1.0
    fast = simulate(JOBS, 8, True).percentile(0.99)
    assert simulate(JOBS, 8, True, replace(Limits(), db_writes=1_000.0)).percentile(0.99) > fast
    assert simulate(JOBS, 8, True, replace(Limits(), max_instances=2)).percentile(0.99) > fast


def test_starts_enqueued_ahead_take_writes_out_of_the_burst():
    limited = replace(Limits(), db_writes=1_000.0)
    today = simulate(JOBS, 8, True, limited).percentile(0.99)
    ahead = simulate(JOBS, 8, True, replace(limited, ahead=True)).percentile(0.99)
    assert ahead < today


def test_a_months_cost_has_every_item_and_grows_with_the_instances():
    outcome = simulate(JOBS, 4, True)
    items = month_cost(outcome, JOBS)
    assert {"datastore writes", "cloud tasks", "app engine"} <= set(items)
    outcome.instance_seconds *= 2
    assert month_cost(outcome, JOBS)["app engine"] > items["app engine"]
