"""Closing the attempts this process has on the wire whose invocation another process
aborted (embedded backend, `serve --processes N`: an API `:abort` is committed by the
server process, a `replace` by whichever process stepped the tick, and the attempt may
be sent by another). The process that commits an abort closes its own attempts at once
(engine/changes.py); this check, run every CHECK_PERIOD by each process, closes the rest:
requests on the wire here for longer than LONG whose invocation's row says ABORTED.

Only long requests are asked about: almost every answer comes well within LONG, so the
check reads nothing at all for them, and a request aborted elsewhere is closed within
about LONG + CHECK_PERIOD of its start, or CHECK_PERIOD of its abort for a longer one.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Callable

from engine.holds import AttemptCanceller
from engine.logs import log_event
from engine.ports import JobStore
from statemachine.vocabulary import InvocationStatus

log = logging.getLogger("sundial.engine")

CHECK_PERIOD = timedelta(milliseconds=500)
LONG = 1.0  # seconds on the wire before a request's invocation is asked about
MOST = 200  # invocations asked about per check (the longest first)


class AbortedAttempts:
    def __init__(self, store: JobStore, canceller: AttemptCanceller,
                 monotonic: Callable[[], float] = time.monotonic):
        self._store, self._canceller, self._monotonic = store, canceller, monotonic

    def check(self) -> int:
        """Close what was aborted elsewhere; return how many invocations' attempts were closed.

        :raises StoreError: storage is failing (the next check asks again).
        """
        closed = 0
        for project, job_id, invocation_id in self._canceller.on_the_wire_since(self._monotonic() - LONG, MOST):
            row = self._store.get_invocation(project, job_id, invocation_id)
            if row is None or row.status != InvocationStatus.ABORTED:
                continue  # running (or its row not yet written: not aborted either)
            if self._canceller.close_attempts(project, job_id, invocation_id):
                closed += 1
                log_event(log, "aborted attempt closed", job=f"{project}/{job_id}", invocation=invocation_id,
                          reason=row.reason, aborted_by="another process")
        return closed
