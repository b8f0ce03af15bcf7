"""A dispatcher-only process of `serve --processes N` (see app/processes.py): runs one
dispatcher on the parent's database until told to stop, and reports its metrics on
its stdout every second."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import pickle
import signal
import sys
import threading

from app.bootstrap import Role, build_local
from engine.collector import settle_collector
from engine.logs import log_event
from engine.metrics import Metrics

log = logging.getLogger("sundial.serve")

_PR_SET_PDEATHSIG = 1


def child_main() -> None:
    """The entry point of a child: run a dispatcher until told to stop."""
    from engine.logs import configure_logging

    parent = int(sys.argv[1])  # the serve process; if it is gone already, so are we
    _die_with_parent()
    settings = pickle.loads(sys.stdin.buffer.read())
    configure_logging()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    runtime = build_local(settings, role=Role.DISPATCHER)  # settings.processes > 1: group commits
    settle_collector()
    runtime.start()  # only the dispatcher: the parent runs the API and the loops
    log_event(log, "dispatcher process started", pid=os.getpid())
    while not stop.wait(1.0):
        _report_metrics(runtime.engine.metrics)
        if os.getppid() != parent:  # the parent died without the kernel telling us
            break
    runtime.stop()
    _report_metrics(runtime.engine.metrics)  # with what it finished while stopping
    log_event(log, "dispatcher process stopped", pid=os.getpid())


def _report_metrics(metrics: Metrics) -> None:
    try:
        sys.stdout.write(json.dumps(metrics.snapshot()) + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        pass  # the parent is gone (or going): nobody to tell


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # the getppid() check in child_main still notices, within a second
