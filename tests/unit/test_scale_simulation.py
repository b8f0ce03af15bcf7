"""bench/scale_simulation.py's model, small and fast: its invariants, not its figures
(the bench prints those)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.cost_model import F2_GHZ, MEASURED_CPU_MS, MEASURED_GHZ
from bench.queue_groups import cold_rate, cold_seconds
from bench.scale_simulation import F2_CPU, Limits, month_cost, simulate

JOBS = 3_000
READY = replace(Limits(), min_instances=200)  # instances there at :00: the queues are the bound


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


def test_the_cold_ramp_is_500_operations_a_second_and_50_percent_more_every_5_minutes():
    assert [cold_rate(t) for t in (0, 299, 300, 600)] == [500, 500, 750, 1125]
    assert cold_seconds(150_000) == 300
    assert cold_seconds(150_000 + 750 * 10) == 310


def test_a_cold_queue_group_holds_dispatches_and_creations_together_to_its_ramp():
    warm = simulate(2_000, 4, True, READY)
    cold = simulate(2_000, 4, True, replace(READY, cold_group=True))
    # 2,000 dispatches and 2,000 creations of next ticks through one group of 500 a second.
    assert max(cold.lateness) >= 4_000 / 500 - 1 > 2 * warm.percentile(0.99)
    assert cold.delivered == 2_000


def test_scattered_queue_names_and_ticks_created_outside_the_burst_each_shorten_a_cold_hour():
    cold = replace(READY, cold_group=True)
    today = simulate(2_000, 4, True, cold).percentile(0.99)
    scattered = simulate(2_000, 4, True, replace(cold, scattered=True)).percentile(0.99)
    ahead = simulate(2_000, 4, True, replace(cold, creates_ahead=True)).percentile(0.99)
    assert scattered < today / 2
    assert ahead < today * 0.6


def test_the_model_uses_the_measured_cpu_scaled_to_an_f2():
    assert Limits().cpu == F2_CPU == pytest.approx(MEASURED_CPU_MS / 1000 * MEASURED_GHZ / F2_GHZ)


def test_requests_app_engine_gives_up_on_come_back_after_the_queues_backoff_and_start_once():
    capped = replace(Limits(), max_instances=2)
    held = simulate(2_000, 4, True, capped)
    aborted = simulate(2_000, 4, True, replace(capped, pending_limit=10.0))
    assert held.aborted == 0 < aborted.aborted
    assert aborted.delivered == 2_000
    assert aborted.percentile(0.99) > held.percentile(0.99)
