"""A dispatcher-only process of `serve --processes N` (see app/processes.py): runs one
dispatcher on the parent's database until told to stop, and reports its metrics on
its stdout every second."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import pickle
import select
import signal
import sys
from typing import TYPE_CHECKING

from engine.logs import log_event, log_everything_as_json

if TYPE_CHECKING:
    from engine.metrics import Metrics

log = logging.getLogger("sundial.serve")

_PR_SET_PDEATHSIG = 1


def child_main() -> None:
    """The entry point of a child: run a dispatcher until told to stop.

    Its stderr is the parent's, so it writes JSON lines from its first instant: the
    modules that build the dispatcher are imported only once that is set up (a child
    takes a second or more to start, and what it said meanwhile came as plain text)."""
    log_everything_as_json()
    parent = int(sys.argv[1])  # the serve process; if it is gone already, so are we
    _die_with_parent()
    settings = pickle.loads(sys.stdin.buffer.read())
    log_everything_as_json(settings.log_level)  # now at the operator's level
    from app.bootstrap import Role, build_local
    from app.stopping import exit_now_if_held
    from engine.collector import settle_collector

    stop = StopSignals()
    stop.install()
    runtime = build_local(settings, role=Role.DISPATCHER)  # settings.processes > 1: group commits
    settle_collector()
    runtime.start()  # only the dispatcher: the parent runs the API and the loops
    log_event(log, "dispatcher process started", pid=os.getpid())
    while not stop.wait(1.0):
        _report_metrics(runtime.engine.metrics)
        if os.getppid() != parent:  # the parent died without the kernel telling us
            break
    runtime.stop()  # within SUNDIAL_STOP_GRACE, as its parent (app/stopping.py)
    _report_metrics(runtime.engine.metrics)  # with what it finished while stopping
    log_event(log, "dispatcher process stopped", pid=os.getpid())
    exit_now_if_held()


class StopSignals:
    """SIGTERM and SIGINT, waited for without a lock.

    A Python signal handler runs in the main thread, between two of its bytecodes, so
    one that takes a lock can meet that lock held by the very code it interrupted. The
    handler here only sets a flag; the interpreter also writes a byte to the wakeup pipe
    at each signal, which ends `wait` at once. (Before, the handler set a
    threading.Event the main thread was waiting on: a signal that came while the wait
    held the Event's lock left the child hung in its handler, dispatching on after its
    parent had gone.)"""

    def __init__(self) -> None:
        self.received = False
        self._wakeup, write = os.pipe()
        os.set_blocking(self._wakeup, False)
        os.set_blocking(write, False)  # the interpreter requires it, and drops a byte when full
        self._write = write

    def install(self) -> None:
        """Take SIGTERM and SIGINT (from the main thread, as Python requires)."""
        signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self.note)

    def note(self, *_: object) -> None:
        """The handler: nothing here may block."""
        self.received = True

    def wait(self, seconds: float) -> bool:
        """Whether a stop signal came, waiting up to `seconds` for one."""
        if not self.received:
            select.select([self._wakeup], [], [], seconds)
            try:
                os.read(self._wakeup, 512)
            except BlockingIOError:
                pass  # the time was up
        return self.received


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
