"""The linter and the type checker are part of the suite: ruff with the rules of
ruff.toml over the whole tree (product, tests, benchmarks), and mypy, strict, over the
pure core and the ports (mypy.ini), find nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_finds_nothing():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_mypy_strict_finds_nothing_in_the_core_and_the_ports():
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--config-file", "mypy.ini"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Success" in done.stdout
