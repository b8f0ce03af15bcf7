"""Closing the attempts this process has on the wire whose invocation another process
aborted (embedded backend, `serve --processes N`: an API `:abort` is committed by the
server process, a `replace` by whichever process stepped the tick, and the attempt may
be sent by another). The process that commits an abort closes its own attempts at once
(engine/changes.py); this check, run every CHECK_PERIOD by each process, closes the rest:
requests on the wire here for longer than LONG whose invocation's row says ABORTED.

Only long requests are asked about: almost every answer comes well within LONG, so the
check reads nothing at all for them, and a request aborted elsewhere is closed within
about LONG + CHECK_PERIOD of its start, or CHECK_PERIOD of its abort for a longer one.
Their rows are read in one batch per project, at most MOST a check; with more long
requests than that, each check takes the next MOST, so every one is asked about in turn.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from datetime import timedelta
from typing import Callable

from engine.holds import AttemptCanceller
from engine.logs import log_event
from engine.ports import JobStore
from statemachine.vocabulary import InvocationStatus

log = logging.getLogger("sundial.engine")

CHECK_PERIOD = timedelta(milliseconds=500)
LONG = 1.0  # seconds on the wire before a request's invocation is asked about
MOST = 500  # invocations asked about per check
ON_THE_WIRE_MOST = 100_000  # far more requests than a process has on the wire (SUNDIAL_WORKERS, the writer's)


class AbortedAttempts:
    def __init__(self, store: JobStore, canceller: AttemptCanceller,
                 monotonic: Callable[[], float] = time.monotonic):
        self._store, self._canceller, self._monotonic = store, canceller, monotonic
        self._turn = 0  # where in the long requests this check begins (see the module's doc)

    def check(self) -> int:
        """Close what was aborted elsewhere; return how many invocations' attempts were closed.

        :raises StoreError: storage is failing (the next check asks again).
        """
        long = self._canceller.on_the_wire_since(self._monotonic() - LONG, ON_THE_WIRE_MOST)
        if not long:
            return 0
        start = self._turn if self._turn < len(long) else 0
        asked = (long[start:] + long[:start])[:MOST]
        self._turn = start + len(asked)
        by_project: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for project, job_id, invocation_id in asked:
            by_project[project].append((job_id, invocation_id))
        closed = 0
        for project, keys in by_project.items():
            for (job_id, invocation_id), row in self._store.get_invocations(project, keys).items():
                if row.status != InvocationStatus.ABORTED:
                    continue  # running (a row not yet written is no abort either)
                if self._canceller.close_attempts(project, job_id, invocation_id):
                    closed += 1
                    log_event(log, "aborted attempt closed", job=f"{project}/{job_id}", invocation=invocation_id,
                              reason=row.reason, aborted_by="another process")
        return closed
