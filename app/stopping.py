"""How `serve` stops within its grace (SUNDIAL_STOP_GRACE, docs/REFERENCE.md section 4.2).

Docker and Cloud Run kill a container 10 s after SIGTERM, Kubernetes after its
terminationGracePeriodSeconds (30 s by default). So a stop has a deadline, counted from
the signal: nothing new is sent from the first instant, the requests on the wire get
until `answers_by` to answer, and the rest of the grace (STOP_MARGIN) is for the last
commits (their results, the attempts never sent), the children and the exit. What is
still out then is left: its attempt stays held, and the next process to start on the
store sends it again under its invocation id (engine/interruptions.py).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from engine.logs import log_event

log = logging.getLogger("sundial.serve")

# Of the grace, kept back for what follows the wait for answers (at most half of it).
STOP_MARGIN = 1.0


@dataclass(frozen=True)
class StopTimes:
    """The instants of one stop, on time.monotonic()."""

    answers_by: float  # the requests on the wire are waited for until then
    exit_by: float  # the process is gone by then

    @classmethod
    def starting_now(cls, grace: timedelta) -> StopTimes:
        seconds = max(grace.total_seconds(), 0.0)
        now = time.monotonic()
        return cls(now + seconds - min(STOP_MARGIN, seconds / 2), now + seconds)


def exit_now_if_held(code: int = 0) -> None:
    """End the process at once if a thread that is not a daemon still runs (a task still
    waiting for its target past the grace: the interpreter would wait for it at exit,
    past any container's patience). Logs and output are flushed first; what the thread
    was doing is left to the next start, like a request still on the wire."""
    held = [thread.name for thread in threading.enumerate()
            if thread is not threading.main_thread() and not thread.daemon and thread.is_alive()]
    if not held:
        return
    log_event(log, "stopping: work still under way is left to the next start", level=logging.WARNING,
              threads=len(held))
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
