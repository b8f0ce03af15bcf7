"""The scenarios against a real server: the receiver's own ceiling, a burst of
one-off jobs due at one instant, and recurring jobs at a steady rate."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from bench.output import PROJECT, ROOT, iso_z, line, ms, note, percentile
from bench.receiver import make_receiver
from bench.server_process import Fleet, invocation_outcomes, report_process, server_env, write_config


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

def burst(args, workdir: Path) -> None:
    n = args.jobs or 10_000
    receiver = make_receiver(args.receiver)
    server = Fleet(workdir, server_env(args), args.servers)
    try:
        fire_at = math.ceil(time.time() + args.lead)
        stamp = iso_z(fire_at)
        digest = write_config(server.configs, [
            f"  - id: b{i:05d}\n    at: [\"{stamp}\"]\n"
            f"    target: {{http: {{url: \"{receiver.url}/burst\"}}}}\n"
            for i in range(n)
        ])
        server.start()
        ready = server.wait_ready()
        imported = server.wait_imported(digest, timeout=fire_at - time.time() + 600)
        import_s = imported - server.spawned_at
        line("burst: jobs", f"{n:,} one-off jobs, all at T = {stamp} (T - spawn = {fire_at - server.spawned_at:.1f} s)")
        line("burst: config import", f"{import_s:,.1f} s from process start = {n / import_s:,.0f} jobs/s "
                                     f"(server answered /healthz after {ready - server.spawned_at:.1f} s)")
        if imported > fire_at:
            note(f"import finished {imported - fire_at:.1f} s AFTER T: use a larger --lead; lateness includes it")
        if args.profile:
            wait = fire_at - time.time() - 0.5
            if wait > 0:
                time.sleep(wait)
            server.start_profile(Path(args.profile) / "burst", args.profile_seconds)
        wait = fire_at - time.time()
        if wait > 0:
            time.sleep(wait)
        cpu0, wall0 = server.cpu_seconds(), time.time()
        deadline = fire_at + args.burst_timeout
        progress, last_count, last_change = time.time() + 5, 0, time.time()
        while time.time() < deadline:
            count = receiver.count()
            if count >= n:
                break
            if count != last_count:
                last_count, last_change = count, time.time()
            elif time.time() - last_change > 30 and count:
                note("no delivery for 30 s: giving up")
                break
            if time.time() >= progress:
                note(f"T+{time.time() - fire_at:5.1f} s: {count:,} delivered")
                progress += 5
            time.sleep(0.1)
        time.sleep(args.settle)  # late duplicates, if any
        cpu, wall = server.cpu_seconds() - cpu0, time.time() - wall0
        arrivals = receiver.arrivals()

        first_by_job: dict[str, float] = {}
        by_job, by_invocation = Counter(), Counter()
        lateness = []
        for a in sorted(arrivals, key=lambda a: a.at):
            by_job[a.job] += 1
            by_invocation[a.invocation] += 1
            if a.job not in first_by_job:
                first_by_job[a.job] = a.at
                lateness.append(a.at - a.scheduled)
        delivered = len(first_by_job)
        missing = n - delivered
        if delivered:
            last = max(first_by_job.values())
            first = min(first_by_job.values())
            drain = last - fire_at
            line("burst: time from T until all delivered",
                 f"{drain:,.2f} s for {delivered:,} jobs"
                 + ("" if not missing else f" (NOT all: {missing:,} missing)"))
            line("burst: deliveries per second", f"{delivered / drain:,.0f}/s from T "
                 f"({delivered / max(last - first, 1e-9):,.0f}/s first-to-last arrival; goal >= 1,000/s: "
                 f"{'MET' if delivered / drain >= 1000 else 'MISSED'}, ratio {delivered / drain / 1000:.2f})")
            ordered = sorted(first_by_job.values())
            lo, hi = ordered[len(ordered) // 10], ordered[(len(ordered) * 9) // 10]
            line("burst: sustained rate (10th-90th percentile)", f"{0.8 * len(ordered) / max(hi - lo, 1e-9):,.0f}/s")
            line("burst: lateness p50 / p99 / max",
                 f"{ms(percentile(lateness, 0.5))} / {ms(percentile(lateness, 0.99))} / {ms(max(lateness))}")
            line("burst: first delivery after T", ms(first - fire_at))
        line("burst: missing", f"{missing:,} of {n:,}")
        line("burst: duplicates by invocation / by job",
             f"{sum(c - 1 for c in by_invocation.values() if c > 1):,} / "
             f"{sum(c - 1 for c in by_job.values() if c > 1):,}  "
             f"(attempts > 1: {sum(1 for a in arrivals if a.attempt not in ('1', ''))})")
        report_process("burst:", server, cpu, wall)
    finally:
        server.stop()
        receiver.close()
    line("burst: invocations recorded by the server", invocation_outcomes(server.db, fire_at, fire_at + 1))


# --- steady -------------------------------------------------------------------------------------

def steady(args, workdir: Path) -> None:
    n = args.jobs or 1_000
    period = 2
    receiver = make_receiver(args.receiver)
    server = Fleet(workdir, server_env(args), args.servers)
    try:
        digest = write_config(server.configs, [
            f"  - id: s{i:05d}\n    schedule: \"*/{period} * * * * ?\"\n"
            f"    target: {{http: {{url: \"{receiver.url}/steady\"}}}}\n"
            for i in range(n)
        ])
        server.start()
        server.wait_ready()
        imported = server.wait_imported(digest, timeout=600)
        import_s = imported - server.spawned_at
        # Measure whole periods starting a few seconds after the import.
        start = math.ceil((imported + args.warmup) / period) * period
        end = start + period * max(1, round(args.seconds / period))
        line("steady: jobs", f"{n:,} jobs on '*/{period} * * * * ?' = {n / period:,.0f} occurrences/s; "
                             f"window {end - start} s")
        line("steady: config import", f"{import_s:,.1f} s from process start = {n / import_s:,.0f} jobs/s")
        time.sleep(max(0.0, start - time.time()))
        cpu0, wall0 = server.cpu_seconds(), time.time()
        if args.profile:
            server.start_profile(Path(args.profile) / "steady", min(args.profile_seconds, end - start))
        progress = time.time() + 10
        while time.time() < end:
            time.sleep(0.2)
            if time.time() >= progress:
                note(f"{time.time() - start:5.1f} s into the window: {receiver.count():,} requests so far")
                progress += 10
        cpu, wall = server.cpu_seconds() - cpu0, time.time() - wall0
        # Stragglers of the window's last occurrences.
        grace_end = time.time() + args.grace
        expected_keys = {(f"{PROJECT}/s{i:05d}", t) for i in range(n) for t in range(start, end, period)}
        while time.time() < grace_end:
            seen = {(a.job, round(a.scheduled)) for a in receiver.arrivals() if start <= a.scheduled < end}
            if len(seen) >= len(expected_keys):
                break
            time.sleep(0.5)
        time.sleep(args.settle)
        arrivals = [a for a in receiver.arrivals() if start <= a.scheduled < end]
        first: dict[tuple, float] = {}
        by_invocation, by_occurrence = Counter(), Counter()
        for a in sorted(arrivals, key=lambda a: a.at):
            key = (a.job, round(a.scheduled))
            by_invocation[a.invocation] += 1
            by_occurrence[key] += 1
            if key not in first:
                first[key] = a.at - a.scheduled
        lateness = list(first.values())
        delivered = len(set(first) & expected_keys)
        expected = len(expected_keys)
        if lateness:
            p99 = percentile(lateness, 0.99)
            line("steady: lateness p50 / p99 / max",
                 f"{ms(percentile(lateness, 0.5))} / {ms(p99)} / {ms(max(lateness))} "
                 f"(goal p99 < 250 ms: {'MET' if p99 < 0.25 else 'MISSED'}, ratio {p99 / 0.25:.2f})")
            # Does it keep up, or fall behind? Lateness of the first and last 10 s of the window.
            head = [v for (job, t), v in first.items() if t < start + 10]
            tail = [v for (job, t), v in first.items() if t >= end - 10]
            if head and tail:
                line("steady: lateness p50 first 10 s / last 10 s",
                     f"{ms(percentile(head, 0.5))} / {ms(percentile(tail, 0.5))}")
        line("steady: delivered / expected", f"{delivered:,} / {expected:,} = {delivered / expected:.1%} "
                                             f"({delivered / (end - start):,.0f}/s)")
        line("steady: missing", f"{expected - delivered:,}")
        line("steady: duplicates by invocation / by occurrence",
             f"{sum(c - 1 for c in by_invocation.values() if c > 1):,} / "
             f"{sum(c - 1 for c in by_occurrence.values() if c > 1):,}")
        report_process("steady:", server, cpu, wall)
    finally:
        server.stop()
        receiver.close()
    line("steady: invocations recorded by the server", invocation_outcomes(server.db, start, end))
