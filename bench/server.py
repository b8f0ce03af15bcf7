"""End-to-end figures of the embedded server: a real `main.py serve` process, a real
HTTP receiver on 127.0.0.1, and an in-process count of storage writes.

    .venv/bin/python bench/server.py [--scenario burst|steady|writes|receiver|all] [--jobs N] [--seconds S]

Scenarios (docs/PERFORMANCE.md has the figures and what bounds them):

- burst (bench/scenarios.py): one project file with N jobs (default 10,000),
  each `at: [T]` for one instant T about --lead seconds ahead, each an HTTP
  POST to the receiver. Prints the import time, the time from T until all N
  arrived, deliveries/s, lateness (arrival - X-Sundial-Scheduled-Time)
  p50/p99/max, missing and duplicates. Goal: 1,000 deliveries/s or more on
  2 cores.
- steady (bench/scenarios.py): N jobs (default 1,000) on `*/2 * * * * ?` for
  --seconds (default 60); `--variant spread` gives job i `every 2s offset {2i}ms`
  instead. Prints lateness p50/p99 (goal: p99 under 100 ms),
  delivered/expected, missing, duplicates.
- overlap (bench/scenarios.py): 10 jobs on `* * * * * ?` with `overlap: skip`
  against a receiver path that answers after 2.5 s. Prints the most calls of
  one job in flight at once (must be 1), deliveries, and SKIPPED/overlap.
- writes (bench/writes.py): in-process, with the engine wired as in
  tests/engine/harness.py (real SQLite store and queue, a noop target): SQLite
  transactions, rows written and commits by kind per delivered invocation,
  (a) with a fake clock and tasks run inline, (b) with the real threaded
  dispatcher and the system clock (which also gives the engine's own ceiling
  without HTTP). `--jobs 50` shows the lateness of a small batch due at one
  instant.
- receiver (bench/scenarios.py; also run first by burst, steady and all; skip
  with --no-ceiling): the receiver's own ceiling, hit directly by http.client
  clients in separate processes, and what one process sending with `requests`
  can do.

Each server scenario also prints the server's peak RSS (VmHWM) and CPU use
(bench/server_process.py runs and watches the server), and the largest job record
its database held (sampled every 2 s, tests/support/records.py): over
MAX_JOB_RECORD_BYTES (16 KiB) the bench exits 1, after printing everything. Extra server settings
go through `--env SUNDIAL_WORKERS=8` (repeatable); `--servers 2` runs two
server processes on one database; `--profile DIR` records py-spy profiles of
the server (DIR/<scenario>-gil.txt: the thread holding the GIL;
DIR/<scenario>-wall.txt: every thread, idle included), which
`python bench/profile_summary.py FILE` summarises.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.output import header, line, load_average  # noqa: E402
from bench.scenarios import add_scenario_arguments, burst, overlap, receiver_ceiling, steady  # noqa: E402
from bench.writes import writes  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=("burst", "steady", "overlap", "writes", "receiver", "all"),
                        default="all")
    parser.add_argument("--variant", choices=("aligned", "spread"), default="aligned",
                        help="steady: all jobs due at one instant (default), or spread over the period")
    parser.add_argument("--no-ceiling", action="store_true", help="skip measuring the receiver's ceiling")
    add_scenario_arguments(parser)
    args = parser.parse_args(argv)
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)

    header()
    if args.env:
        line("server environment", " ".join(args.env))
    if args.servers > 1:
        line("server processes", f"{args.servers} on one database")
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="sundial-bench-"))
    began = time.time()
    figures: list[dict] = []
    try:
        scenarios = ["receiver", "burst", "steady", "writes"] if args.scenario == "all" else [args.scenario]
        if args.no_ceiling and "receiver" in scenarios and args.scenario != "receiver":
            scenarios.remove("receiver")
        if args.scenario in ("burst", "steady", "overlap") and not args.no_ceiling:
            scenarios.insert(0, "receiver")
        for name in scenarios:
            if name == "receiver":
                receiver_ceiling(args)
            elif name == "steady":
                figures.append(steady(args, workdir / name, variant=args.variant))
            else:
                figures.append({"burst": burst, "overlap": overlap, "writes": writes}[name](args, workdir / name))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    line("total bench time", f"{time.time() - began:,.0f} s (load average now {load_average()})")
    # The bound on stored state: a job record over MAX_JOB_RECORD_BYTES fails the bench (after every figure is out).
    return 1 if any(fig and not fig.get("record_within_bound", True) for fig in figures) else 0


if __name__ == "__main__":
    sys.exit(main())
