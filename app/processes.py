"""Extra dispatcher processes for `serve --processes N`.

In a burst one Python process is bound by one core (the GIL); docs/PERFORMANCE.md
gives its CPU per delivery. With N processes, N - 1 children each run only a dispatcher (no API,
no UI, no periodic loops) on the same database: the queue's lease keeps any two
processes from taking the same task, and the store's write lock (an flock) hands
SQLite's write lock between them at once.

A child (app/child.py) gets the parent's settings (pickled on its stdin), so it signs
and addresses exactly as the parent does. Every second it writes its metrics (one JSON line) on its
stdout, and the parent's /metrics adds the newest of each child to its own. It stops
on SIGTERM or SIGINT (Ctrl-C reaches the whole process group) and when its parent
dies: on Linux the kernel sends it SIGTERM (PR_SET_PDEATHSIG), elsewhere it notices
within a second. A child stops as its parent does, within the same grace
(SUNDIAL_STOP_GRACE, app/stopping.py), from the parent's SIGTERM, sent as the parent's
own stop begins; one still running when the parent's grace is up is killed.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from config.settings import Settings
from engine.logs import log_event
from engine.metrics import is_snapshot

log = logging.getLogger("sundial.serve")

ROOT = Path(__file__).resolve().parents[1]


class DispatcherProcesses:
    """The parent's handle on its dispatcher-only children."""

    def __init__(self, settings: Settings, count: int):
        self.settings, self.count = settings, count
        self.children: list[subprocess.Popen[bytes]] = []
        self._stopping = False  # a flag, not an Event: signal_stop runs in a signal handler
        self._snapshots: dict[int, dict[str, Any]] = {}  # child index -> its newest metrics snapshot

    def start(self) -> None:
        blob = pickle.dumps(self.settings)
        for index in range(1, self.count + 1):
            child = subprocess.Popen(
                [sys.executable, "-c", "from app.child import child_main; child_main()",
                 str(os.getpid())],
                cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            )
            assert child.stdin is not None  # stdin=PIPE
            child.stdin.write(blob)
            child.stdin.close()
            self.children.append(child)
            threading.Thread(target=self._watch, args=(index, child), daemon=True,
                             name=f"sundial-watch-{index}").start()

    def snapshots(self) -> list[dict[str, Any]]:
        """The children's newest metrics snapshots (engine/metrics.py)."""
        return list(self._snapshots.values())

    def signal_stop(self) -> None:
        """Tell every child to stop (each then stops within its grace). It takes no lock
        that the main thread could hold: a signal handler calls it (Runtime.begin_stop)."""
        self._stopping = True
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    def wait(self, until: float) -> None:
        """Wait for the children until time.monotonic() reads `until`; kill those left."""
        for child in self.children:
            try:
                child.wait(max(until - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                log_event(log, "dispatcher process killed: it overran the stop grace", level=logging.WARNING,
                          pid=child.pid)
                child.kill()
                child.wait()

    def _watch(self, index: int, child: subprocess.Popen[bytes]) -> None:
        assert child.stdout is not None  # stdout=PIPE
        for line in child.stdout:  # until the child exits
            try:
                snapshot = json.loads(line)
            except ValueError:
                snapshot = None
            if is_snapshot(snapshot):
                self._snapshots[index] = snapshot
            else:  # a stray line must not break every later scrape of /metrics
                log_event(log, "unreadable metrics from a dispatcher process", pid=child.pid)
        code = child.wait()
        if not self._stopping:
            log_event(log, "dispatcher process exited", level=logging.ERROR, pid=child.pid, code=code)
