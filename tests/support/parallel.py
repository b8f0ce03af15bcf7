"""What `make test` needs to run the suite on two pytest-xdist workers (`-n 2 --dist loadfile`).

Most of the suite's time is spent waiting: on servers started in subprocesses, on
emulators, on schedules that fire every second. Two workers overlap those waits. Each
worker has its own emulators (session fixtures), temporary directory and free ports,
so the tests need nothing shared. Two things are added here:

- Order. `--dist loadfile` hands each worker whole files, in collection order; a slow
  file handed out last leaves the other worker idle while it runs. The files below,
  the slowest of a run, are collected first. Order only: a file missing from the list
  (or one that is no longer slow) runs all the same.
- `@pytest.mark.serial`. A test whose assertion is about latency (deliveries within
  100 ms of their time) is run with the other worker paused between its tests: it
  holds an exclusive lock, and every other test a shared one, on a file both workers
  open. Without workers (plain `pytest`) the lock is never taken.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import IO, Iterator

# Slowest first, from `--durations` of a full run (seconds on an idle 2-core machine, rounded).
SLOW_FILES = (
    "tests/faults/test_sigkill.py",                 # 38
    "tests/faults/test_duplicate_and_late_tasks.py",  # 30
    "tests/faults/test_cloud_servers.py",           # 24
    "tests/e2e/test_restart.py",                    # 26
    "tests/e2e/test_deadlines.py",                  # 55
    "tests/e2e/test_target_faults.py",              # 50
    "tests/e2e/test_readiness.py",                  # 30
    "tests/e2e/test_cloud.py",                      # 30
    "tests/faults/test_queue_purged.py",            # 20
    "tests/e2e/test_delivery.py",                   # 23
    "tests/contract/test_bounded_state.py",         # 17
    "tests/faults/test_stalled_process.py",         # 15
    "tests/e2e/test_api_schemathesis.py",           # 14
    "tests/e2e/test_delivery_at_scale.py",          # 16
    "tests/e2e/test_interrupted.py",                # 18
    "tests/e2e/test_stop.py",                       # 20
    "tests/faults/test_storage_failures.py",        # 20
    "tests/faults/test_many_servers.py",            # 10
    "tests/e2e/test_cloud_throttle.py",             # 22
    "tests/e2e/test_log_lines.py",                  # 20
    "tests/alerts/test_expected_period.py",         # 16
    "tests/e2e/test_many_connections.py",           # 10
    "tests/unit/test_lint.py",                      # mypy and ruff: CPU, best overlapped early
)


def slow_files_first(items: list, root: Path) -> None:
    """Reorder `items` in place: the files of SLOW_FILES first, in that order; the rest
    keep their order. Every worker must collect the same order, and does: it is fixed."""
    rank = {name: n for n, name in enumerate(SLOW_FILES)}

    def key(item) -> int:
        relative = Path(str(item.path)).relative_to(root).as_posix()
        return rank.get(relative, len(SLOW_FILES))

    items.sort(key=key)  # stable: within a file, and among the rest, collection order


class RunLock:
    """A readers-writer lock between the workers of one run (flock on two files).

    A serial test waits at the gate for the main lock exclusively, holding the gate so
    that the other worker's next test cannot slip in before it; the other tests pass
    the gate and share the main lock."""

    def __init__(self, directory: Path):
        self._gate: IO[str] = open(directory / "serial.gate", "a+")
        self._main: IO[str] = open(directory / "serial.lock", "a+")

    @contextlib.contextmanager
    def held(self, exclusive: bool) -> Iterator[None]:
        fcntl.flock(self._gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._main, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(self._gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self._main, fcntl.LOCK_UN)


def run_lock(config) -> RunLock | None:
    """The lock of this xdist run, or None outside a worker. Its files are in the run's
    temporary directory, the parent of each worker's (pytest removes old runs' own)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return RunLock(config._tmp_path_factory.getbasetemp().parent)
