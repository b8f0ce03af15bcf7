"""The APScheduler side of bench/versus.py: the same burst, steady and overlap work as
bench/scenarios.py gives Sundial, done by APScheduler 3.x in a subprocess
(bench/apscheduler_side.py) against the same receiver, measured by the same code
(bench/analysis.py). Each function returns its figures as a dict and prints them."""

from __future__ import annotations

import json
import math
import queue
import subprocess
import sys
import threading
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
from bench.output import ROOT, iso_z, line, note
from bench.scenarios import PERIOD, overlap_jobs, sleep_with_progress, spread_offset_ms, steady_jobs, steady_window
from bench.server_process import proc_cpu_seconds, proc_status, report_process


class ApschedulerProcess:
    """`python -m bench.apscheduler_side ...` with its own SQLite job store in `workdir`."""

    def __init__(self, workdir: Path, url: str, kind: str, jobs: int, *, workers: int, misfire: str,
                 at: float | None = None, slow_ms: int = 2500):
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "apscheduler.log"
        self.command = [sys.executable, "-m", "bench.apscheduler_side", "--db", str(workdir / "jobs.sqlite"),
                        "--url", url, "--kind", kind, "--jobs", str(jobs), "--workers", str(workers),
                        "--misfire", misfire, "--slow-ms", str(slow_ms)] + (["--at", str(at)] if at else [])
        self.lines: queue.Queue = queue.Queue()
        self.spawned_at = 0.0

    def start(self) -> None:
        self.log = open(self.log_path, "ab")
        self.spawned_at = time.time()
        self.process = subprocess.Popen(self.command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.log, text=True)
        # stdout is read on a thread so that waiting for a line can time out.
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for text in self.process.stdout:
            self.lines.put(text.strip())
        self.lines.put(None)

    def _expect(self, word: str, timeout: float) -> str:
        text = self.lines.get(timeout=timeout)
        if text is None or not text.startswith(word + " "):
            raise RuntimeError(f"apscheduler side said {text!r}; log: {self.log_path.read_text()[-2000:]}")
        return text[len(word) + 1:]

    def wait_added(self, timeout: float) -> tuple[float, float]:
        """(seconds it took to add every job, when it finished)."""
        took, at = self._expect("added", timeout).split()
        return float(took), float(at)

    @property
    def pid(self) -> int:
        return self.process.pid

    def status(self) -> dict[str, int]:
        return proc_status(self.pid)

    def cpu_seconds(self) -> float:
        return proc_cpu_seconds(self.pid)

    def events(self) -> dict:
        """The scheduler's event counts so far."""
        self.process.stdin.write("events\n")
        self.process.stdin.flush()
        return json.loads(self._expect("events", 30))

    def stop(self) -> dict:
        """Stops the scheduler; returns its event counts."""
        counts = {}
        try:
            self.process.stdin.write("stop\n")
            self.process.stdin.close()
            counts = json.loads(self._expect("events", 60))
        except (OSError, RuntimeError, queue.Empty) as error:
            note(f"apscheduler side did not report its events: {error}")
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.log.close()
        return counts


def _events(prefix: str, side: ApschedulerProcess, fig: dict) -> dict:
    events = side.stop()
    fig.update(events=events, missed_events=events.get("missed", 0),
               max_instances_events=events.get("max_instances", 0), job_errors=events.get("error", 0))
    line(f"{prefix} APScheduler events", ", ".join(f"{k} {v:,}" for k, v in sorted(events.items())) or "none")
    return fig


def aps_burst(args, workdir: Path, receiver, misfire: str = "default") -> dict:
    n, prefix = args.jobs or 10_000, f"aps burst ({misfire_label(misfire)}):"
    receiver.clear()
    fire_at = math.ceil(time.time() + args.lead)
    side = ApschedulerProcess(workdir, receiver.url, "burst", n, workers=args.aps_workers, misfire=misfire, at=fire_at)
    side.start()
    try:
        took, added = side.wait_added(timeout=fire_at - time.time() + 600)
        line(f"{prefix} jobs", f"{n:,} DateTrigger jobs, all at T = {iso_z(fire_at)}")
        line(f"{prefix} adding the jobs", f"{took:,.1f} s = {n / took:,.0f} jobs/s (one INSERT and commit each)")
        if added > fire_at:
            note(f"adding finished {added - fire_at:.1f} s AFTER T: use a larger --lead; lateness includes it")
        time.sleep(max(0.0, fire_at - time.time()))
        cpu0, wall0 = side.cpu_seconds(), time.time()
        wait_for_burst(receiver, n, fire_at, args.burst_timeout, args.settle)
        cpu, wall = side.cpu_seconds() - cpu0, time.time() - wall0
        fig = burst_figures(receiver.arrivals(), n, fire_at)
        print_burst(prefix, fig)
        fig.update(report_process(prefix, side, cpu, wall, what="APScheduler"), setup_s=took)
    except BaseException:
        side.stop()
        raise
    return _events(prefix, side, fig)


def aps_steady(args, workdir: Path, receiver, variant: str = "aligned", misfire: str = "default") -> dict:
    n, prefix = args.jobs or 1_000, f"aps steady {variant} ({misfire_label(misfire)}):"
    receiver.clear()
    offset = spread_offset_ms(n) if variant == "spread" else (lambda i: 0)
    side = ApschedulerProcess(workdir, receiver.url, variant, n, workers=args.aps_workers, misfire=misfire)
    side.start()
    try:
        took, added = side.wait_added(timeout=600)
        start, end = steady_window(args, added)
        what = ("CronTrigger(second='*/2')" if variant == "aligned"
                else "IntervalTrigger(seconds=2, start_date=base + 2i ms)")
        line(f"{prefix} jobs", f"{n:,} jobs on {what}; window {end - start} s")
        line(f"{prefix} adding the jobs", f"{took:,.1f} s")
        time.sleep(max(0.0, start - time.time()))
        cpu0, wall0 = side.cpu_seconds(), time.time()
        sleep_with_progress(receiver, start, end)
        cpu, wall = side.cpu_seconds() - cpu0, time.time() - wall0
        expected = expected_occurrences(steady_jobs(n), start, end, PERIOD, offset)
        wait_for_occurrences(receiver, expected, args.grace, args.settle)
        fig = steady_figures(receiver.arrivals(), expected, start, end)
        print_steady(prefix, fig)
        fig.update(report_process(prefix, side, cpu, wall, what="APScheduler"), setup_s=took)
    except BaseException:
        side.stop()
        raise
    return _events(prefix, side, fig)


def aps_overlap(args, workdir: Path, receiver, misfire: str = "default") -> dict:
    n, prefix = args.overlap_jobs, f"aps overlap ({misfire_label(misfire)}):"
    receiver.clear()
    side = ApschedulerProcess(workdir, receiver.url, "overlap", n, workers=args.aps_workers, misfire=misfire,
                              slow_ms=args.slow_ms)
    side.start()
    try:
        took, added = side.wait_added(timeout=600)
        start = math.ceil(added + args.warmup)
        end = start + int(args.overlap_seconds)
        line(f"{prefix} jobs", f"{n} jobs on CronTrigger(second='*'), max_instances=1, target answers after "
                               f"{args.slow_ms} ms; window {end - start} s")
        # A skip is counted when its run time is due, so the counts at the window's
        # edges (+0.5 s for the scheduler to get there) give the window's skips.
        time.sleep(max(0.0, start + 0.5 - time.time()))
        before = side.events().get("max_instances", 0)
        sleep_with_progress(receiver, start, end + 0.5)
        after = side.events().get("max_instances", 0)
        time.sleep(args.slow_ms / 1000 + args.settle)
        fig = overlap_figures(receiver.arrivals(), receiver.max_concurrency(), overlap_jobs(n), start, end)
    except BaseException:
        side.stop()
        raise
    fig = _events(prefix, side, fig)
    fig["skips"] = after - before
    print_overlap(prefix, fig)
    line(f"{prefix} recorded skips (EVENT_JOB_MAX_INSTANCES)", f"{fig['skips']:,} (in the whole run: "
                                                               f"{fig['max_instances_events']:,})")
    return fig


def misfire_label(misfire: str) -> str:
    return "misfire_grace_time=1 s, default" if misfire == "default" else "misfire_grace_time=None"
