"""100,000 jobs in config files: what importing them costs, in-process, through the
import path `serve` runs every 10 s (app/importer.py `import_directory` ->
engine/config_import.py), on a real SQLite store in a fresh directory.

    .venv/bin/python bench/scale.py [--jobs 100000] [--per-project 10000] [--cprofile] [--no-worker | --worker]

The jobs are split into project files of `--per-project` jobs (10,000 at most: the
limit on jobs per project, config/limits.py). Each job has its own schedule and an
HTTP target; no dispatcher runs. `--mix cron` (the figures before issue 20): daily
crons with varied minute and hour and a flow-style target with a templated body.
`--mix varied` (the default): a third of those, a third `every` schedules (hours,
with an offset) with a block-style POST target, templated headers and a retry policy,
a third crons in a time zone with a templated URL and a catch-up window.

Phases, each timed, with the rows it wrote (the sum of every
connection's SQLite `total_changes`, as bench/writes.py counts them) and the
process's peak RSS (VmHWM, reset before each phase through /proc/self/clear_refs),
and the CPU seconds spent parsing the YAML (config/yamlsource.py), validating it
(config/validate.py) and applying the jobs to the store (engine/config_import.py).
The CPU figure counts the parse worker that a large import starts (app/parse_ahead.py,
which parses the later files while the first are applied); the three parts are this
process's own:

1. first import into an empty database;
2. unchanged re-import, same process (goal: under 10 s, 0 rows written);
3. unchanged re-import by a fresh engine and store on the same database (what a
   restarted server does first);
4. one file's bytes changed but not its jobs (a comment added): that file is
   parsed and every one of its jobs re-applied;
5. one job's schedule changed in one file.

`--cprofile` prints the 20 functions with the most cumulative time of the first
import (use it with fewer jobs: profiling slows it down about 2x).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sqlite3
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.output import git_state, header, line, load_average, note  # noqa: E402
from bench.server_process import proc_status  # noqa: E402
from bench.writes import _counting_classes  # noqa: E402

GOAL_REIMPORT_S = 10.0  # goal: re-import of 100,000 unchanged jobs under 10 s


MIX = "cron"  # set by --mix


def job_entry(project: int, i: int, schedule: str | None = None) -> str:
    kind = 0 if MIX == "cron" or schedule else i % 3
    schedule = schedule or f"0 {i % 60} {(i // 60) % 24} * * ?"
    if kind == 1:
        return (f"  - id: job-{i:05d}\n    schedule: every {1 + i % 12}h offset {i % 60}m\n"
                f"    retry: {{max_attempts: 3, min_backoff: 10s}}\n"
                f"    target:\n      http:\n        method: POST\n"
                f"        url: http://127.0.0.1:9/p{project:02d}/every/{i}\n"
                f"        headers:\n          X-Job: \"${{jobId}}\"\n          X-When: \"${{scheduledTime}}\"\n"
                f"        body: '{{\"job\":\"${{jobId}}\",\"n\":{i}}}'\n")
    if kind == 2:
        return (f"  - id: job-{i:05d}\n    schedule: \"{i % 60} {(i // 60) % 24} * * MON-FRI\"\n"
                f"    timezone: Europe/Berlin\n    catchup: {{policy: latest, window: 1h}}\n"
                f"    target: {{http: {{url: \"http://127.0.0.1:9/p{project:02d}/day/${{startOfDay}}/{i}\"}}}}\n")
    return (f"  - id: job-{i:05d}\n    schedule: \"{schedule}\"\n"
            f"    target: {{http: {{url: \"http://127.0.0.1:9/p{project:02d}/{i}\", "
            f"body: '{{\"at\":\"${{scheduledTime}}\"}}'}}}}\n")


def write_configs(directory: Path, jobs: int, per_project: int) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for project in range((jobs + per_project - 1) // per_project):
        count = min(per_project, jobs - project * per_project)
        path = directory / f"p{project:02d}.yaml"
        path.write_text("jobs:\n" + "".join(job_entry(project, i) for i in range(count)))
        paths.append(path)
    return paths


def open_engine(db: Path):
    """A real SQLite store (counting its writes) and engine, wired as app/bootstrap.py
    wires them, without the dispatcher: nothing is delivered."""
    from engine.clock import SystemClock
    from engine.service import build_engine
    from engine.targets import build_targets
    from statemachine.policy import Tuning

    store_class, _ = _counting_classes()
    store = store_class(db)
    return store, build_engine(store, build_targets("local"), SystemClock(), Tuning(), secret=b"bench")


def reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        return True
    except OSError:
        return False


class PartTimes:
    """CPU seconds spent in each part of an import, by wrapping the functions that do them."""

    PARTS = (("parse", "config.loader", "load_yaml"), ("validate", "config.loader", "validate_project"),
             ("apply", "engine.config_import", "ConfigImport.import_project"))

    def __init__(self):
        import importlib

        self.cpu = dict.fromkeys([name for name, _, _ in self.PARTS], 0.0)
        for name, module, attribute in self.PARTS:
            owner = importlib.import_module(module)
            *outer, last = attribute.split(".")
            for part in outer:
                owner = getattr(owner, part)
            setattr(owner, last, self._timed(name, getattr(owner, last)))

    def _timed(self, name, function):
        def timed(*args, **kwargs):
            began = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.cpu[name] += time.process_time() - began
        return timed

    def take(self) -> dict:
        taken, self.cpu = self.cpu, dict.fromkeys(self.cpu, 0.0)
        return taken


PARTS: PartTimes | None = None


def phase(name: str, engine, store, configs: Path, jobs: int, profile: bool = False) -> dict:
    from app.importer import import_directory

    assert PARTS is not None
    PARTS.take()
    resettable = reset_peak_rss()
    rows0, commits0 = store.rows_written(), sum(store.commits.values())
    profiler = cProfile.Profile() if profile else None
    began, cpu0, children0 = time.perf_counter(), time.process_time(), children_cpu()
    if profiler:
        profiler.enable()
    parsed = import_directory(engine.configs, configs)
    if profiler:
        profiler.disable()
    took, cpu = time.perf_counter() - began, time.process_time() - cpu0
    worker = children_cpu() - children0  # the parse worker (app/parse_ahead.py), once it has ended
    cpu += worker
    rows, commits = store.rows_written() - rows0, sum(store.commits.values()) - commits0
    status = proc_status(os.getpid())
    rate = f" = {jobs / took:,.0f} jobs/s" if took > 0.05 else ""
    line(f"{name}: time", f"{took:,.3f} s ({cpu:,.3f} s CPU){rate}; {parsed} files parsed")
    parts = PARTS.take()
    line(f"{name}: CPU parse / validate / apply", " / ".join(f"{parts[part]:,.3f}" for part in parts)
         + " s" + (f" in this process; parse worker {worker:,.3f} s" if worker else "")
         + ("" if not parsed else f"; per 1,000 jobs {1000 * cpu / jobs:,.3f} s CPU"))
    line(f"{name}: rows written / transactions", f"{rows:,} / {commits:,}")
    line(f"{name}: peak RSS (VmHWM)", f"{status['VmHWM'] / 1024:,.1f} MiB"
         + ("" if resettable else " (since process start: VmHWM could not be reset)")
         + f"; RSS after {status['VmRSS'] / 1024:,.1f} MiB; load average {load_average()}")
    if profiler:
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(20)
    return {**parts, "seconds": took, "cpu": cpu, "rows": rows, "commits": commits,
            "rss_peak_mib": status["VmHWM"] / 1024}


def children_cpu() -> float:
    """CPU seconds of the child processes that ended and were waited for."""
    times = os.times()
    return times.children_user + times.children_system


def count_jobs(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
    finally:
        conn.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--per-project", type=int, default=10_000, help="jobs per project file (limit 10,000)")
    parser.add_argument("--cprofile", action="store_true", help="profile the first import")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it")
    parser.add_argument("--mix", choices=("varied", "cron"), default="varied", help="the jobs' kinds (see above)")
    parser.add_argument("--no-worker", action="store_true", help="parse every file in this process")
    parser.add_argument("--worker", action="store_true",
                        help="start the parse worker whatever the load average (app/parse_ahead.py)")
    args = parser.parse_args(argv)
    import app.parse_ahead
    if args.no_worker:
        app.parse_ahead.MIN_BYTES = sys.maxsize
    elif args.worker:
        app.parse_ahead.spare_cores = lambda: float(os.cpu_count() or 1)
    global MIX, PARTS
    MIX, PARTS = args.mix, PartTimes()
    header("bench/scale.py")
    line("git", git_state())
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="sundial-scale-"))
    configs, db = workdir / "configs", workdir / "sundial.db"
    began = time.perf_counter()
    paths = write_configs(configs, args.jobs, args.per_project)
    size = sum(p.stat().st_size for p in paths)
    line("scale: configs", f"{args.mix} mix: {args.jobs:,} jobs in {len(paths)} project files of up to "
                           f"{args.per_project:,} "
                           f"({size / 2**20:,.1f} MiB of YAML; written in {time.perf_counter() - began:.1f} s)")
    store, engine = open_engine(db)
    first = phase("scale: first import", engine, store, configs, args.jobs, args.cprofile)
    line("scale: jobs in the database", f"{count_jobs(db):,}")
    again = phase("scale: unchanged re-import, same process", engine, store, configs, args.jobs)
    verdict = "MET" if again["seconds"] < GOAL_REIMPORT_S and again["rows"] == 0 else "MISSED"
    line("scale: re-import goal (< 10 s, 0 rows)", f"{verdict}: ratio {again['seconds'] / GOAL_REIMPORT_S:.4f} "
                                                    f"of the time; first import / re-import "
                                                    f"{first['seconds'] / max(again['seconds'], 1e-9):,.0f}x")
    store2, engine2 = open_engine(db)
    phase("scale: unchanged re-import, fresh engine (restart)", engine2, store2, configs, args.jobs)
    with paths[0].open("a") as f:
        f.write(f"# touched {datetime.now():%H:%M:%S}\n")
    in_file = min(args.jobs, args.per_project)  # what a changed file makes the importer re-apply
    phase(f"scale: {paths[0].name} bytes changed, jobs not", engine2, store2, configs, in_file)
    text = paths[0].read_text()
    paths[0].write_text(text.replace(job_entry(0, 7), job_entry(0, 7, "0 30 4 * * ?"), 1))
    phase(f"scale: one job changed in {paths[0].name}", engine2, store2, configs, in_file)
    line("scale: total", f"{time.perf_counter() - began:,.0f} s; work directory {workdir}"
                         + ("" if args.keep else " (removed)"))
    if not args.keep:
        import shutil
        shutil.rmtree(workdir, ignore_errors=True)
    note("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
