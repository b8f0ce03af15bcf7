"""Sundial and APScheduler 3.x side by side, in one run, on one machine, doing the same
work against the same HTTP receiver on 127.0.0.1.

    .venv/bin/pip install -r requirements-bench.txt     # APScheduler 3.11, SQLAlchemy 2
    .venv/bin/python bench/versus.py [--scenario burst|steady|overlap|all] [--aps-no-grace]

Sundial is the real `main.py serve` (bench/scenarios.py); APScheduler is a
`BackgroundScheduler` with a `SQLAlchemyJobStore` on SQLite and a thread pool in a
process of its own (bench/apscheduler_side.py, bench/aps_runs.py). The receiver
records the same headers from both, and bench/analysis.py computes both sides'
figures. Scenarios:

- burst: 10,000 one-off occurrences due at one instant T (Sundial `at: [T]`,
  APScheduler DateTrigger).
- steady: 1,000 jobs every 2 s for 60 s, in two variants: "aligned", all due at
  each even second (Sundial `*/2 * * * * ?`, APScheduler CronTrigger(second='*/2')),
  and "spread", job i due i x 2 ms into the period (Sundial `every 2s offset {2i}ms`,
  APScheduler IntervalTrigger(seconds=2) from an even second + 2i ms).
- overlap: 10 jobs every second against a target that answers after 2.5 s
  (Sundial `overlap: skip`, APScheduler max_instances=1).

After each scenario a table prints figure | Sundial | APScheduler | ratio
(Sundial / APScheduler) | which is better. `--aps-no-grace` adds a run of
APScheduler with misfire_grace_time=None (its default of 1 s drops late runs).
The machine is shared: each scenario prints the load average and git state.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.aps_runs import aps_burst, aps_overlap, aps_steady  # noqa: E402
from bench.output import git_state, header, line, load_average  # noqa: E402
from bench.receiver import make_receiver  # noqa: E402
from bench.scenarios import add_scenario_arguments, burst, overlap, steady  # noqa: E402
from bench.versus_table import print_table  # noqa: E402


def run_scenario(name: str, args, workdir: Path, receiver) -> None:
    line(f"== {name}", f"load average {load_average()}; git {git_state()}")
    aps_runs = [("default", "APScheduler")] + ([("none", "APS grace=None")] if args.aps_no_grace else [])
    if name == "burst":
        sides = [("Sundial", burst(args, workdir / "sundial-burst", receiver))]
        sides += [(label, aps_burst(args, workdir / f"aps-burst-{m}", receiver, m)) for m, label in aps_runs]
    elif name.startswith("steady"):
        variant = name.split()[1]
        sides = [("Sundial", steady(args, workdir / f"sundial-{variant}", receiver, variant))]
        sides += [(label, aps_steady(args, workdir / f"aps-{variant}-{m}", receiver, variant, m))
                  for m, label in aps_runs]
    else:
        sides = [("Sundial", overlap(args, workdir / "sundial-overlap", receiver))]
        sides += [(label, aps_overlap(args, workdir / f"aps-overlap-{m}", receiver, m)) for m, label in aps_runs[:1]]
    print_table(name, sides)
    line(f"== {name} done", f"load average {load_average()}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=("burst", "steady", "steady-aligned", "steady-spread", "overlap",
                                               "all"), default="all")
    parser.add_argument("--aps-workers", type=int, default=32,
                        help="APScheduler's thread pool (default 32, SUNDIAL_WORKERS' default; "
                             "APScheduler's own default is 10)")
    parser.add_argument("--aps-no-grace", action="store_true",
                        help="also run APScheduler with misfire_grace_time=None")
    add_scenario_arguments(parser)
    args = parser.parse_args(argv)

    header("bench/versus.py")
    line("APScheduler", f"{_version('apscheduler')}, SQLAlchemy {_version('sqlalchemy')}; "
                        f"BackgroundScheduler, SQLAlchemyJobStore(sqlite), ThreadPoolExecutor({args.aps_workers})")
    names = {"all": ["burst", "steady aligned", "steady spread", "overlap"],
             "steady": ["steady aligned", "steady spread"]}.get(args.scenario, [args.scenario.replace("-", " ")])
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="sundial-versus-"))
    receiver = make_receiver(args.receiver)
    began = time.time()
    try:
        for name in names:
            run_scenario(name, args, workdir, receiver)
    finally:
        receiver.close()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    line("total bench time", f"{time.time() - began:,.0f} s (load average now {load_average()})")
    return 0


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except ImportError:
        sys.exit(f"{module} is not installed: .venv/bin/pip install -r requirements-bench.txt")


if __name__ == "__main__":
    sys.exit(main())
