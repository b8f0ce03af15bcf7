"""A run's settings as `python -m sim` flags, and back: the one-line command printed
for a failing seed (shrunk or not) is built here from the very `Settings` that failed,
and `python -m sim` reads it back into the same `Settings`, so the command replays
the run byte for byte."""

from __future__ import annotations

import argparse
from datetime import timedelta

from sim.ports import FaultMix
from sim.simulation import Settings
from sim.world import JOBS

COMMAND = ".venv/bin/python -m sim"
_DEFAULT = Settings(0)


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that say which run: all but the seed default to the standard run."""
    parser.add_argument("--steps", type=int, help="stop after this many steps (a prefix)")
    parser.add_argument("--duplicate-forgets-retry", action="store_true",
                        help="a duplicate delivery carries no retry count, though the first was a retry")
    parser.add_argument("--jobs", help=f"only these jobs, comma-separated (of {','.join(j.id for j in JOBS)})")
    parser.add_argument("--without", action="append", default=[], metavar="FAULT",
                        help=f"never inject this fault (repeatable): {', '.join(FaultMix().kinds())}")
    parser.add_argument("--faulty-seconds", type=float, help="simulated seconds with faults (default 3600)")
    parser.add_argument("--quiet-seconds", type=float, help="simulated seconds of the quiet period (default 2700)")
    parser.add_argument("--processes", type=int, default=_DEFAULT.processes, help="processes running the engine")
    parser.add_argument("--no-operator", action="store_true", help="no operator actions")


def settings_from(args: argparse.Namespace, seed: int) -> Settings:
    """The `Settings` the flags of `add_run_flags` say, for `seed`."""
    mix = FaultMix(duplicate_keeps_retry=not args.duplicate_forgets_retry)
    for kind in args.without:
        if kind not in mix.kinds():
            raise SystemExit(f"--without {kind}: not one of {', '.join(FaultMix().kinds())}")
        mix = mix.without(kind)
    jobs = tuple(args.jobs.split(",")) if args.jobs else _DEFAULT.jobs
    unknown = set(jobs) - set(_DEFAULT.jobs)
    if unknown:
        raise SystemExit(f"--jobs: no such job {', '.join(sorted(unknown))}")
    return Settings(
        seed, mix=mix, max_steps=args.steps, jobs=jobs, processes=args.processes,
        faulty=_DEFAULT.faulty if args.faulty_seconds is None else timedelta(seconds=args.faulty_seconds),
        quiet=_DEFAULT.quiet if args.quiet_seconds is None else timedelta(seconds=args.quiet_seconds),
        operator_every=None if args.no_operator else _DEFAULT.operator_every)


def replay_command(settings: Settings, variant: str | None = None) -> str:
    """The one line that replays `settings` (the flags only where they differ from the
    standard run)."""
    flags = [f"--seed {settings.seed}"]
    flags += [f"--variant {variant}"] if variant else []
    flags += [] if settings.mix.duplicate_keeps_retry else ["--duplicate-forgets-retry"]
    if settings.jobs != _DEFAULT.jobs:
        flags.append(f"--jobs {','.join(settings.jobs)}")
    flags += [f"--without {kind}" for kind in FaultMix().kinds() if kind not in settings.mix.kinds()]
    if settings.faulty != _DEFAULT.faulty:
        flags.append(f"--faulty-seconds {_seconds(settings.faulty)}")
    if settings.quiet != _DEFAULT.quiet:
        flags.append(f"--quiet-seconds {_seconds(settings.quiet)}")
    if settings.processes != _DEFAULT.processes:
        flags.append(f"--processes {settings.processes}")
    flags += ["--no-operator"] if settings.operator_every is None else []
    flags += [f"--steps {settings.max_steps}"] if settings.max_steps is not None else []
    return " ".join([COMMAND, *flags])


def _seconds(span: timedelta) -> str:
    total = span.total_seconds()
    return str(int(total)) if total.is_integer() else repr(total)
