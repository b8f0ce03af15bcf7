"""Whether Cloud Tasks answers, seen from `serve` on the cloud backend (its `requeue` loop).

Every second: while the queue answers, the tasks whose creation failed are created again
(CloudTasksQueue.resend_unsent); with none kept, a GetQueue asks whether it answers. When
it answers again after it did not, `came_back` runs: a watchdog pass that arms every
pending tick again (Maintenance.run_watchdog with `queue_lost`), since a queue that was
down may have lost what it held (the emulator comes back empty), and the watchdog alone
would repair those chains only once their tick is late by its grace, at its next run.
"""

from __future__ import annotations

import logging
from typing import Callable

from google.api_core import exceptions as gexc

from engine.adapters.cloud.cloud_tasks_queue import CloudTasksQueue
from engine.logs import log_event

log = logging.getLogger("sundial.cloud_tasks")

PROBE_TIMEOUT = 2.0  # seconds for one GetQueue: within the loop's period, give or take


class QueueWatch:
    def __init__(self, queue: CloudTasksQueue, came_back: Callable[[], object]) -> None:
        self.queue, self.came_back = queue, came_back
        self.down = False

    def check(self) -> None:
        """One look: resend what failed, or probe; run `came_back` once the queue is back."""
        # Tasks kept are the probe: a queue that takes one answers. (Only a queue seen down
        # runs `came_back`: a lone failed enqueue costs no pass over every job.)
        answers = self.queue.resend_unsent() > 0 if self.queue.unsent else self._probe()
        if not answers:
            if not self.down:
                log_event(log, "task queue does not answer", level=logging.ERROR)
            self.down = True
            return
        if self.down:
            self.down = False
            log_event(log, "task queue answers again: pending ticks armed again", level=logging.WARNING)
            self.came_back()

    def _probe(self) -> bool:
        try:
            # No retry: the client's default one rides out an outage of 20 s and more in one
            # call, so the watch never saw the queue go (nor come back).
            self.queue.client.get_queue(name=self.queue.queue_path, retry=None, timeout=PROBE_TIMEOUT)
        except (gexc.GoogleAPICallError, gexc.RetryError):
            return False
        return True
