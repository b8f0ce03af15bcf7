"""What an idle embedded server costs: 20,000 jobs that fire daily, none due during the run.

    .venv/bin/python bench/idle.py [--jobs 20000] [--window 60] [--windows 2] [--strace 10]
                                   [--profile OUT] [--env KEY=VALUE ...]

Writes the jobs into project files of 10,000 (the per-project limit) in a fresh
directory, each job once a day at its own UTC minute, spread over the day except the
hour from now on (so nothing comes due while the bench runs, on the real clock), and
starts the real server (`python main.py serve`, default settings, its own --db and
--configs). `serve` imports the configs before it answers /healthz, so the start-up
figure is the first import. Then, all on the server's process tree (serve and any
dispatcher processes, /proc/PID/stat utime+stime):

1. the first minute after it answers: the import's aftermath, the first watchdog run;
2. `--windows` idle windows of `--window` seconds each after that: CPU as a share of
   one core (the goal: under 2%), context switches per second over every thread (each
   one a thread waking up, from /proc/PID/task/*/status), RSS;
3. with `--strace N` (default 10; 0 skips it) `strace -f -c` on the tree for N seconds:
   the system calls it makes, and how many SQLite reads (pread64) and locks (fcntl) a
   second, a measure of the queries it runs while nothing is due.

`--profile OUT` records py-spy over the first idle window into OUT-gil.txt (where CPU
goes) and OUT-wall.txt (where threads wait); bench/profile_summary.py reads them.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.output import git_state, header, line, load_average, note  # noqa: E402
from bench.server_process import ServerProcess, server_env  # noqa: E402

GOAL_SHARE = 0.02  # of one core, idle, with 20,000 daily jobs
PER_FILE = 10_000  # config/limits.py: jobs per project
QUIET_MINUTES = 60  # no job fires in the hour from the bench's start


def daily_minutes(count: int, now: datetime) -> list[tuple[int, int]]:
    """(hour, minute) in UTC for `count` jobs, spread over the day's minutes except the
    QUIET_MINUTES from `now` on (and the one before, for a clock a little behind)."""
    start = now.hour * 60 + now.minute
    quiet = {(start + offset) % 1440 for offset in range(-1, QUIET_MINUTES + 1)}
    minutes = [m for m in range(1440) if m not in quiet]
    return [divmod(minutes[i % len(minutes)], 60) for i in range(count)]


def write_project_files(configs: Path, jobs: int, now: datetime) -> int:
    configs.mkdir(parents=True, exist_ok=True)
    times = daily_minutes(jobs, now)
    files = 0
    for first in range(0, jobs, PER_FILE):
        entries = []
        for i in range(first, min(jobs, first + PER_FILE)):
            hour, minute = times[i]
            entries.append(f"  - id: job-{i:05d}\n    schedule: \"{i % 60} {minute} {hour} * * ?\"\n"
                           f"    target: {{http: {{url: \"http://127.0.0.1:9/daily/{i}\"}}}}\n")
        (configs / f"daily{files:02d}.yaml").write_text("jobs:\n" + "".join(entries))
        files += 1
    return files


def context_switches(server: ServerProcess) -> int:
    """Voluntary + involuntary context switches of every thread of the tree, so far."""
    total = 0
    for pid in server._pids():
        for status in Path(f"/proc/{pid}/task").glob("*/status"):
            try:
                for row in status.read_text().splitlines():
                    if row.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(row.split()[1])
            except OSError:
                continue
    return total


def measure(server: ServerProcess, seconds: float) -> dict:
    cpu0, switches0, wall0 = server.cpu_seconds(), context_switches(server), time.monotonic()
    time.sleep(seconds)
    cpu, switches, wall = server.cpu_seconds() - cpu0, context_switches(server) - switches0, time.monotonic() - wall0
    status = server.status()
    return {"cpu": cpu, "wall": wall, "share": cpu / wall, "switches": switches / wall,
            "rss": status.get("VmRSS", 0) / 1024, "threads": status.get("Threads", 0)}


def report(prefix: str, fig: dict) -> None:
    goal = "" if not prefix.startswith("idle") else (
        f"  (goal < {GOAL_SHARE:.0%}: {'met' if fig['share'] < GOAL_SHARE else 'NOT MET'})")
    line(f"{prefix} CPU", f"{fig['cpu']:.2f} s over {fig['wall']:.1f} s = {fig['share']:.2%} of one core{goal}")
    line(f"{prefix} wakeups (context switches)", f"{fig['switches']:,.1f}/s over {fig['threads']} threads")
    line(f"{prefix} RSS", f"{fig['rss']:,.1f} MiB")


def strace_counts(server: ServerProcess, seconds: float) -> None:
    """`strace -f -c` on serve for `seconds`: its system calls a second, and the top ones."""
    if shutil.which("strace") is None:
        note("strace not found: no system call counts")
        return
    out = server.workdir / "strace.txt"
    run = subprocess.run(["timeout", "-s", "INT", str(seconds), "strace", "-f", "-c", "-o", str(out),
                          "-p", str(server.pid)], capture_output=True, text=True)
    if not out.exists() or not out.read_text().strip():
        note(f"strace gave nothing ({run.stderr.strip()[-200:]})")
        return
    calls = {}
    for row in out.read_text().splitlines():
        fields = row.split()
        if len(fields) >= 5 and re.fullmatch(r"[\d.]+", fields[0]) and fields[-1] != "total":
            calls[fields[-1]] = int(fields[3])
    total = sum(calls.values())
    top = ", ".join(f"{name} {count / seconds:,.1f}" for name, count in sorted(calls.items(),
                                                                             key=lambda kv: -kv[1])[:6])
    line("idle system calls", f"{total / seconds:,.1f}/s ({top})")
    line("idle SQLite reads + locks", f"pread64 {calls.get('pread64', 0) / seconds:,.1f}/s, "
                                      f"fcntl {calls.get('fcntl', 0) / seconds:,.1f}/s")


def run(args) -> list[float]:
    workdir = Path(tempfile.mkdtemp(prefix="sundial-idle-"))
    server = ServerProcess(workdir, server_env(args))
    try:
        files = write_project_files(server.configs, args.jobs, datetime.now(timezone.utc))
        note(f"{args.jobs:,} daily jobs in {files} files under {server.configs}")
        server.start()
        ready = server.wait_ready(timeout=600)
        line("start-up to /healthz (first import)", f"{ready - server.spawned_at:.1f} s wall, "
                                                    f"{server.cpu_seconds():.1f} s CPU")
        report("first minute:", measure(server, 60))
        shares = []
        for window in range(args.windows):
            if window == 0 and args.profile:
                server.start_profile(Path(args.profile), args.window)
            fig = measure(server, args.window)
            report(f"idle window {window + 1}:", fig)
            shares.append(fig["share"])
        if args.strace:
            strace_counts(server, args.strace)
        imported = server.log_path.read_text().count('"imported project"')
        line("log", f"{imported} 'imported project' lines (one per file expected: {files})")
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--window", type=float, default=60.0, help="seconds of each idle window")
    parser.add_argument("--windows", type=int, default=2)
    parser.add_argument("--strace", type=float, default=10.0, help="seconds of strace -f -c (0: none)")
    parser.add_argument("--profile", help="py-spy the first idle window into PROFILE-gil.txt / -wall.txt")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the server")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    header("bench/idle.py")
    line("code", git_state())
    shares = run(args)
    line("load average after (1, 5, 15 min)", load_average())
    sys.exit(0 if shares and max(shares) < GOAL_SHARE else 1)


if __name__ == "__main__":
    main()
