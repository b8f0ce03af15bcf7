"""The scenarios against a real server: the receiver's own ceiling, a burst of
one-off jobs due at one instant, recurring jobs at a steady rate (aligned on one
instant, or spread over the period), and jobs that outlast their period under
`overlap: skip`. Each returns its figures as a dict (bench/versus.py puts them
beside APScheduler's) and prints them."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.analysis import (
    burst_figures,
    expected_occurrences,
    overlap_figures,
    print_burst,
    print_overlap,
    print_steady,
    steady_figures,
    wait_for_burst,
    wait_for_occurrences,
)
from bench.output import PROJECT, ROOT, iso_z, line, note
from bench.receiver import make_receiver
from bench.server_process import (
    Fleet,
    invocation_counts,
    invocation_outcomes,
    report_process,
    report_records,
    server_env,
    watch_records,
    write_config,
)


def receiver_ceiling(args) -> None:
    receiver = make_receiver(args.receiver)
    try:
        def clients(processes: int, threads: int, kind: str, seconds: float = 3.0) -> float:
            procs = [subprocess.Popen(
                [sys.executable, str(ROOT / "bench" / "receiver.py"), "--client", receiver.url,
                 "--threads", str(threads), "--seconds", str(seconds), "--kind", kind],
                stdout=subprocess.PIPE, text=True) for _ in range(processes)]
            total = 0.0
            for proc in procs:
                done, took = proc.communicate(timeout=60)[0].split()
                total += int(done) / float(took)
            return total

        raw1 = clients(1, 16, "raw")
        raw2 = clients(2, 16, "raw")
        req = clients(1, 32, "requests")
        line(f"receiver ({args.receiver}) ceiling", f"{max(raw1, raw2):,.0f} req/s "
             f"(http.client keep-alive: 1 proc x16 thr {raw1:,.0f}/s, 2 procs x16 thr {raw2:,.0f}/s; "
             f"client-bound on {os.cpu_count()} cores)")
        line("sender ceiling: requests, 1 proc x32 thr", f"{req:,.0f} req/s  (what one Python process "
             "sending with `requests`, like HttpTarget, can do against this receiver)")
        receiver.clear()
    finally:
        receiver.close()


# --- burst ------------------------------------------------------------------------------------

def burst(args, workdir: Path, receiver=None) -> dict:
    """N one-off jobs all due at T; returns the figures (bench/analysis.py) and prints them."""
    n = args.jobs or 10_000
    own, receiver = receiver is None, receiver or make_receiver(args.receiver)
    receiver.clear()
    server, records = Fleet(workdir, server_env(args), args.servers), None
    try:
        fire_at = math.ceil(time.time() + args.lead)
        stamp = iso_z(fire_at)
        write_config(server.configs, [
            f"  - id: {job}\n    at: [\"{stamp}\"]\n    target: {{http: {{url: \"{receiver.url}/burst\"}}}}\n"
            for job in burst_jobs(n, bare=True)
        ])
        server.start()
        ready = server.wait_ready()
        imported = server.wait_imported(timeout=fire_at - time.time() + 600)
        import_s = imported - server.spawned_at
        records = watch_records(server)
        line("burst: jobs", f"{n:,} one-off jobs, all at T = {stamp} (T - spawn = {fire_at - server.spawned_at:.1f} s)")
        line("burst: config import", f"{import_s:,.1f} s from process start = {n / import_s:,.0f} jobs/s "
                                     f"(server answered /healthz after {ready - server.spawned_at:.1f} s)")
        if imported > fire_at:
            note(f"import finished {imported - fire_at:.1f} s AFTER T: use a larger --lead; lateness includes it")
        if args.profile:
            time.sleep(max(0.0, fire_at - time.time() - 0.5))
            server.start_profile(Path(args.profile) / "burst", args.profile_seconds)
        time.sleep(max(0.0, fire_at - time.time()))
        cpu0, wall0 = server.cpu_seconds(), time.time()
        wait_for_burst(receiver, n, fire_at, args.burst_timeout, args.settle)
        cpu, wall = server.cpu_seconds() - cpu0, time.time() - wall0
        fig = burst_figures(receiver.arrivals(), n, fire_at)
        print_burst("burst:", fig)
        fig.update(report_process("burst:", server, cpu, wall), setup_s=import_s)
        fig.update(report_records("burst:", records))
    finally:
        if records is not None:
            records.close()
        server.stop()
        if own:
            receiver.close()
    fig["recorded"] = invocation_outcomes(server.db, fire_at, fire_at + 1)
    line("burst: invocations recorded by the server", fig["recorded"])
    return fig


def burst_jobs(n: int, bare: bool = False) -> list[str]:
    """The burst's job ids; as the receiver sees them (`PROJECT/JOB`) unless `bare`."""
    return [f"b{i:05d}" if bare else f"{PROJECT}/b{i:05d}" for i in range(n)]


# --- steady -------------------------------------------------------------------------------------

PERIOD = 2  # seconds between occurrences of each steady job


def steady_jobs(n: int, bare: bool = False) -> list[str]:
    return [f"s{i:05d}" if bare else f"{PROJECT}/s{i:05d}" for i in range(n)]


def spread_offset_ms(n: int):
    """Spread: job i is due i x 2 ms into each 2 s period (for 1,000 jobs; fewer or more
    jobs share the period evenly)."""
    return lambda i: (i * PERIOD * 1000) // n


def steady_window(args, ready_at: float) -> tuple[int, int]:
    """Whole periods, starting `--warmup` seconds after the jobs are in."""
    start = math.ceil((ready_at + args.warmup) / PERIOD) * PERIOD
    return start, start + PERIOD * max(1, round(args.seconds / PERIOD))


def steady(args, workdir: Path, receiver=None, variant: str = "aligned") -> dict:
    """N jobs every 2 s: "aligned" (all due at each even second, `*/2 * * * * ?`) or
    "spread" (job i due at offset i x 2 ms, `every 2s offset {2i}ms`)."""
    n = args.jobs or 1_000
    own, receiver = receiver is None, receiver or make_receiver(args.receiver)
    receiver.clear()
    offset = spread_offset_ms(n) if variant == "spread" else (lambda i: 0)
    schedule = (lambda i: f"every {PERIOD}s offset {offset(i)}ms") if variant == "spread" \
        else (lambda i: f"*/{PERIOD} * * * * ?")
    prefix = f"steady {variant}:"
    server, records = Fleet(workdir, server_env(args), args.servers), None
    try:
        write_config(server.configs, [
            f"  - id: {job}\n    schedule: \"{schedule(i)}\"\n"
            f"    target: {{http: {{url: \"{receiver.url}/steady\"}}}}\n"
            for i, job in enumerate(steady_jobs(n, bare=True))
        ])
        server.start()
        server.wait_ready()
        imported = server.wait_imported(timeout=600)
        records = watch_records(server)
        start, end = steady_window(args, imported)
        line(f"{prefix} jobs", f"{n:,} jobs on '{schedule(0)}'{'...' if variant == 'spread' else ''} "
                               f"= {n / PERIOD:,.0f} occurrences/s; window {end - start} s")
        line(f"{prefix} config import", f"{imported - server.spawned_at:,.1f} s from process start")
        time.sleep(max(0.0, start - time.time()))
        cpu0, wall0 = server.cpu_seconds(), time.time()
        if args.profile:
            server.start_profile(Path(args.profile) / f"steady-{variant}", min(args.profile_seconds, end - start))
        sleep_with_progress(receiver, start, end)
        cpu, wall = server.cpu_seconds() - cpu0, time.time() - wall0
        expected = expected_occurrences(steady_jobs(n), start, end, PERIOD, offset)
        wait_for_occurrences(receiver, expected, args.grace, args.settle)
        fig = steady_figures(receiver.arrivals(), expected, start, end)
        print_steady(prefix, fig)
        fig.update(report_process(prefix, server, cpu, wall), setup_s=imported - server.spawned_at)
        fig.update(report_records(prefix, records))
    finally:
        if records is not None:
            records.close()
        server.stop()
        if own:
            receiver.close()
    fig["recorded"] = invocation_outcomes(server.db, start, end)
    line(f"{prefix} invocations recorded by the server", fig["recorded"])
    return fig


def sleep_with_progress(receiver, start: float, end: float) -> None:
    progress = time.time() + 10
    while time.time() < end:
        time.sleep(0.2)
        if time.time() >= progress:
            note(f"{time.time() - start:5.1f} s into the window: {receiver.count():,} requests so far")
            progress += 10


# --- overlap ----------------------------------------------------------------------------------

def overlap_jobs(n: int, bare: bool = False) -> list[str]:
    return [f"o{i:02d}" if bare else f"{PROJECT}/o{i:02d}" for i in range(n)]


def overlap(args, workdir: Path, receiver=None) -> dict:
    """10 jobs every second against a target that answers after 2.5 s, `overlap: skip`:
    no job may have two calls in flight, and the skipped occurrences are recorded."""
    n, slow_ms = args.overlap_jobs, args.slow_ms
    own, receiver = receiver is None, receiver or make_receiver(args.receiver)
    receiver.clear()
    server, records = Fleet(workdir, server_env(args), args.servers), None
    try:
        write_config(server.configs, [
            f"  - id: {job}\n    schedule: \"* * * * * ?\"\n    overlap: skip\n"
            f"    target: {{http: {{url: \"{receiver.url}/slow?ms={slow_ms}\"}}}}\n"
            for job in overlap_jobs(n, bare=True)
        ])
        server.start()
        server.wait_ready()
        imported = server.wait_imported(timeout=600)
        records = watch_records(server)
        start = math.ceil(imported + args.warmup)
        end = start + int(args.overlap_seconds)
        line("overlap: jobs", f"{n} jobs on '* * * * * ?', overlap: skip, target answers after {slow_ms} ms; "
                              f"window {end - start} s")
        sleep_with_progress(receiver, start, end)
        time.sleep(slow_ms / 1000 + args.settle)  # the calls still in flight
        fig = overlap_figures(receiver.arrivals(), receiver.max_concurrency(), overlap_jobs(n), start, end)
        fig.update(report_records("overlap:", records))
    finally:
        if records is not None:
            records.close()
        server.stop()
        if own:
            receiver.close()
    counts = invocation_counts(server.db, start, end)
    fig.update(skips=counts[("SKIPPED", "overlap")], recorded=invocation_outcomes(server.db, start, end))
    print_overlap("overlap:", fig)
    line("overlap: recorded skips (SKIPPED/overlap)", f"{fig['skips']:,}")
    line("overlap: invocations recorded by the server", fig["recorded"])
    return fig


def add_scenario_arguments(parser) -> None:
    """The knobs of the scenarios above, shared by bench/server.py and bench/versus.py."""
    parser.add_argument("--jobs", type=int, default=0,
                        help="jobs of the scenario (default: burst 10,000, steady 1,000, writes 200/3,000)")
    parser.add_argument("--seconds", type=float, default=60, help="steady: measured window (default 60)")
    parser.add_argument("--lead", type=float, default=35,
                        help="burst: T is this many seconds after the server is spawned (default 35)")
    parser.add_argument("--burst-timeout", type=float, default=150, help="burst: give up this long after T")
    parser.add_argument("--warmup", type=float, default=4,
                        help="steady/overlap: seconds after import before the window")
    parser.add_argument("--grace", type=float, default=20, help="steady: wait for stragglers after the window")
    parser.add_argument("--settle", type=float, default=2, help="seconds to wait for late duplicates")
    parser.add_argument("--overlap-jobs", type=int, default=10, help="overlap: jobs (default 10)")
    parser.add_argument("--overlap-seconds", type=float, default=30, help="overlap: measured window (default 30)")
    parser.add_argument("--slow-ms", type=int, default=2500, help="overlap: the target answers after this long")
    parser.add_argument("--receiver", choices=("asyncio", "threading"), default="asyncio")
    parser.add_argument("--env", action="append", default=[], metavar="SUNDIAL_X=V",
                        help="extra environment for the server (repeatable), e.g. SUNDIAL_WORKERS=64")
    parser.add_argument("--servers", type=int, default=1,
                        help="burst/steady: run this many server processes on one database (default 1)")
    parser.add_argument("--profile", metavar="DIR", help="record py-spy (raw collapsed stacks) of the server")
    parser.add_argument("--profile-seconds", type=float, default=20)
    parser.add_argument("--keep", metavar="DIR", help="keep databases and server logs in DIR")
