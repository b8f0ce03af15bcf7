"""The simulator's self-check: each broken engine of `variants.py` must be caught
(an invariant broken) within a budget of seconds, running seeds 1, 2, 3, ..."""

from __future__ import annotations

import time
from dataclasses import dataclass

from sim.simulation import Result, Settings, Simulation
from sim.variants import VARIANTS


@dataclass(frozen=True)
class Caught:
    variant: str
    seed: int | None  # None: not caught within the budget
    seeds_run: int
    seconds: float
    violation: str


def run_with(variant: str | None, settings: Settings) -> Result:
    """One simulation, of the real engine (None) or of a broken variant."""
    simulation = Simulation(settings)
    if variant is None:
        return simulation.run()
    with VARIANTS[variant](simulation):
        return simulation.run()


def catch(variant: str, budget: float = 30.0, max_seeds: int | None = None) -> Caught:
    """Run seeds 1, 2, ... of `variant` until one breaks an invariant, `budget` seconds
    pass or `max_seeds` seeds ran."""
    began = time.perf_counter()
    seed = 0
    while time.perf_counter() - began < budget and (max_seeds is None or seed < max_seeds):
        seed += 1
        result = run_with(variant, Settings(seed))
        if not result.ok:
            return Caught(variant, seed, seed, time.perf_counter() - began, result.violation)
    return Caught(variant, None, seed, time.perf_counter() - began, "")
