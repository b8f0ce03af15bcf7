"""`python -m sim --seed N` replays one seed; `python -m sim --seconds S` runs random
seeds for S seconds. A failing seed is printed with the command that replays it."""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time

from sim.run import Result, Settings, Simulation


def run_seed(seed: int, max_steps: int | None = None) -> Result:
    return Simulation(Settings(seed, max_steps=max_steps)).run()


def report(result: Result, seconds: float) -> str:
    rate = result.steps / seconds if seconds else 0.0
    status = "ok" if result.ok else f"VIOLATION: {result.violation}"
    return (f"seed {result.seed}: {result.steps} steps, {result.sends} sends, {result.invocations} invocations,"
            f" {result.simulated} simulated, {rate:,.0f} steps/s, digest {result.digest[:16]}: {status}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim")
    parser.add_argument("--seed", type=int, help="replay this seed")
    parser.add_argument("--steps", type=int, help="stop after this many steps (a prefix)")
    parser.add_argument("--seconds", type=float, default=0.0, help="run random seeds for this long")
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)  # the engine's log lines: millions, and not what is checked
    seeds = [args.seed] if args.seed is not None else None
    deadline = time.monotonic() + args.seconds
    failed = 0
    while seeds is None and time.monotonic() < deadline or seeds:
        seed = seeds.pop() if seeds else random.SystemRandom().randrange(2**32)
        began = time.perf_counter()
        result = run_seed(seed, args.steps)
        print(report(result, time.perf_counter() - began), flush=True)
        if not result.ok:
            failed += 1
            print(f"replay: .venv/bin/python -m sim --seed {seed}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
