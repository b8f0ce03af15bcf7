"""`python -m sim --seed N` replays one seed; `python -m sim --seconds S` runs random
seeds for S seconds. A failing seed is printed with the command that replays it."""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time

from sim.ports import FaultMix
from sim.selfcheck import catch, run_with
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
    parser.add_argument("--steps", type=int, help="stop after this many steps (a prefix)")
    parser.add_argument("--seconds", type=float, default=0.0, help="run random seeds for this long")
    parser.add_argument("--variant", choices=sorted(VARIANTS), help="run a deliberately broken engine")
    parser.add_argument("--duplicate-keeps-retry", action="store_true",
                        help="a duplicate delivery carries the retry count of the first")
    parser.add_argument("--self-check", action="store_true", help="catch every broken variant, 30 s each")
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)  # the engine's log lines: millions, and not what is checked
    if args.self_check:
        return self_check()
    mix = FaultMix(duplicate_keeps_retry=args.duplicate_keeps_retry)
    seeds = [args.seed] if args.seed is not None else None
    deadline = time.monotonic() + args.seconds
    failed = runs = steps = 0
    started = time.perf_counter()
    while seeds is None and time.monotonic() < deadline or seeds:
        seed = seeds.pop() if seeds else random.SystemRandom().randrange(2**32)
        began = time.perf_counter()
        result = run_with(args.variant, Settings(seed, mix=mix, max_steps=args.steps))
        print(report(result, time.perf_counter() - began), flush=True)
        runs, steps = runs + 1, steps + result.steps
        if not result.ok:
            failed += 1
            print(f"replay: {replay_command(seed, args)}", flush=True)
            print(f"shortest failing prefix: {replay_command(seed, args)} --steps {result.steps}", flush=True)
    elapsed = time.perf_counter() - started
    print(f"{runs} seeds, {steps:,} steps in {elapsed:.1f} s ({steps / elapsed:,.0f} steps/s): {failed} failed")
    return 1 if failed else 0


def replay_command(seed: int, args: argparse.Namespace) -> str:
    flags = [f"--variant {args.variant}"] if args.variant else []
    flags += ["--duplicate-keeps-retry"] if args.duplicate_keeps_retry else []
    return " ".join([".venv/bin/python -m sim --seed", str(seed), *flags])


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
