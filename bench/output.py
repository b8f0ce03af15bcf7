"""Printing for bench/server.py and its scenarios: one aligned line per figure on
stdout, progress notes on stderr, and the small helpers the figures share."""

from __future__ import annotations

import hashlib
import os
import platform
import sqlite3
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "bench"  # the project every scenario's jobs belong to


def line(name: str, value: str) -> None:
    print(f"{name:<44} {value}", flush=True)


def note(text: str) -> None:
    print(f"  .. {text}", file=sys.stderr, flush=True)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def iso_z(instant: float) -> str:
    return datetime.fromtimestamp(instant, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def header(command: str = "bench/server.py") -> None:
    cpu = "?"
    try:
        for row in Path("/proc/cpuinfo").read_text().splitlines():
            if row.startswith("model name"):
                cpu = row.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    print(f"# sundial {command}  {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", flush=True)
    line("machine", f"nproc={os.cpu_count()} ({cpu}), {platform.system()} {platform.release()}")
    line("python", f"{platform.python_version()} ({platform.python_implementation()}), "
                   f"sqlite {sqlite3.sqlite_version}")
    line("load average (1, 5, 15 min)", load_average())


def load_average() -> str:
    """Other work on the machine skews every figure: say how busy it was."""
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "?"


def git_state() -> str:
    def git(*argv: str) -> str:
        result = subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True)
        return result.stdout.strip()

    changed = git("diff", "--stat").splitlines()
    if not changed:
        return f"{git('rev-parse', '--short', 'HEAD')}, working tree clean"
    # Other work lands in the checkout while benchmarks run: a digest of the diff tells runs apart.
    digest = hashlib.sha256(subprocess.run(["git", "diff"], cwd=ROOT, capture_output=True).stdout).hexdigest()[:10]
    return f"{git('rev-parse', '--short', 'HEAD')}, working tree: {changed[-1].strip()} (diff {digest})"
