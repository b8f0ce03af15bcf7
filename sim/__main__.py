"""`python -m sim --seed N` replays one seed; `python -m sim --seconds S` runs random
seeds for S seconds. A failing seed is printed with the command that replays it, then
shrunk (sim/shrink.py): the smallest failing run found, and the command that replays it."""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time

from sim.replay import add_run_flags, replay_command, settings_from
from sim.selfcheck import catch, run_with
from sim.shrink import broken_invariant, shrink
from sim.simulation import Result, Settings
from sim.variants import VARIANTS


def report(result: Result, seconds: float) -> str:
    rate = result.steps / seconds if seconds else 0.0
    status = "ok" if result.ok else f"VIOLATION: {result.violation}"
    return (f"seed {result.seed}: {result.steps} steps, {result.sends} sends, {result.invocations} invocations,"
            f" {result.simulated} simulated, {rate:,.0f} steps/s, digest {result.digest[:16]}: {status}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim")
    parser.add_argument("--seed", type=int, help="replay this seed")
    parser.add_argument("--seconds", type=float, default=0.0, help="run random seeds for this long")
    parser.add_argument("--variant", choices=sorted(VARIANTS), help="run a deliberately broken engine")
    parser.add_argument("--no-shrink", action="store_true", help="print a failing seed without shrinking it")
    parser.add_argument("--self-check", action="store_true", help="catch every broken variant, 30 s each")
    add_run_flags(parser)
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)  # the engine's log lines: millions, and not what is checked
    if args.self_check:
        return self_check()
    seeds = [args.seed] if args.seed is not None else None
    deadline = time.monotonic() + args.seconds
    failed = runs = steps = 0
    running = 0.0  # seconds in runs, shrinking left out
    while seeds is None and time.monotonic() < deadline or seeds:
        seed = seeds.pop() if seeds else random.SystemRandom().randrange(2**32)
        settings = settings_from(args, seed)
        began = time.perf_counter()
        result = run_with(args.variant, settings)
        running += time.perf_counter() - began
        print(report(result, time.perf_counter() - began), flush=True)
        runs, steps = runs + 1, steps + result.steps
        if not result.ok:
            failed += 1
            print(f"replay: {replay_command(settings, args.variant)}", flush=True)
            if not args.no_shrink:
                print_shrunk(settings, args.variant)
    rate = steps / running if running else 0.0
    print(f"{runs} seeds, {steps:,} steps in {running:.1f} s ({rate:,.0f} steps/s): {failed} failed")
    return 1 if failed else 0


def print_shrunk(settings: Settings, variant: str | None) -> None:
    """The shortest failing run shrinking finds, and the command that replays it."""
    shrunk = shrink(settings, variant)
    print(shrunk.describe(settings), flush=True)
    print(f"shortest failing prefix: {replay_command(shrunk.settings, variant)}", flush=True)
    print(f"  ({broken_invariant(shrunk.result.violation)}, digest {shrunk.result.digest[:16]})", flush=True)


def self_check() -> int:
    """Each broken variant must be caught within 30 s; a table row for each."""
    missed = 0
    print("| variant | caught by seed | seeds run | seconds | invariant broken |")
    print("|---|---|---|---|---|")
    for variant in VARIANTS:
        caught = catch(variant)
        missed += caught.seed is None
        broken = caught.violation.split(":")[0] or "NOT CAUGHT"
        print(f"| {variant} | {caught.seed} | {caught.seeds_run} | {caught.seconds:.1f} | {broken} |", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
