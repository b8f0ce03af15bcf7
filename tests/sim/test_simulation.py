"""The simulator (sim/) in `make test`: a fixed set of seeds keeps every invariant, a
seed replays byte for byte, the kept regression seeds stay fixed, and the self-check
catches each deliberately broken engine. About 20 s on the shared 2-core machine under
load (a load average of 11); `make simulate SECONDS=N` runs random seeds for longer."""

from __future__ import annotations

import logging

import pytest

from sim.regressions import FIXED, OPEN
from sim.selfcheck import catch, run_with
from sim.simulation import Settings, Simulation
from sim.variants import VARIANTS

SEEDS = range(1, 13)  # about 1 h 45 min simulated each: 21 hours of simulated time in all
# Seeds run before a broken variant must have been caught: the self-check's budget is
# 30 s (python -m sim --self-check); counted in seeds here, so a loaded machine does
# not fail it. Each variant is caught by seed 1 or 2 today; a change to the simulated
# world draws other runs (one such change moved the unfenced result to seed 26).
SEED_BUDGET = 40


@pytest.fixture(autouse=True)
def _quiet_engine():
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def test_fixed_seeds_keep_every_invariant():
    failed = []
    for seed in SEEDS:
        result = Simulation(Settings(seed)).run()
        assert result.steps > 300 and result.sends > 50, result  # the run did something
        if not result.ok:
            failed.append(f"seed {seed}: {result.violation} (python -m sim --seed {seed})")
    assert not failed, "\n".join(failed)


def test_a_seed_replays_byte_for_byte():
    first, second = (Simulation(Settings(5)).run() for _ in range(2))
    assert (first.digest, first.steps, first.sends) == (second.digest, second.steps, second.sends)
    assert Simulation(Settings(6)).run().digest != first.digest


@pytest.mark.parametrize("finding", FIXED, ids=lambda finding: f"seed-{finding.seed}")
def test_regression_seeds_stay_fixed(finding):
    result = run_with(None, finding.settings())
    assert result.ok, f"{finding.what}: {result.violation}"


@pytest.mark.parametrize("finding", OPEN, ids=lambda finding: f"seed-{finding.seed}")
def test_open_findings_still_replay(finding):
    """A finding not fixed yet still shows with its seed; once fixed, move it to FIXED."""
    assert not run_with(None, finding.settings()).ok


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_self_check_catches_each_broken_engine(variant):
    caught = catch(variant, budget=float("inf"), max_seeds=SEED_BUDGET)
    assert caught.seed is not None, f"{variant} not caught in {SEED_BUDGET} seeds"
