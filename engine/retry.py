"""Waits between tries of the shell's own work: a task whose handler raised, a
result the dispatcher could not commit.

Exponential from `first`, doubling per failure, capped at `most` (the curve of
statemachine.policy.exponential_step, which delivery retries use too); no jitter, as
these retries concern one process's own tasks, not many clients hitting a target
at once (deliveries retry by `statemachine.policy.compute_backoff`, which jitters).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from statemachine.policy import exponential_step


@dataclass(frozen=True)
class Backoff:
    first: timedelta
    most: timedelta

    def after(self, failures: int) -> timedelta:
        """The wait after the `failures`-th failure in a row (1-based)."""
        return exponential_step(self.first, self.most, max(failures, 1))


# A task whose handler raised runs again after 0.5 s, 1 s, 2 s ... 60 s at most.
TASK_BACKOFF = Backoff(first=timedelta(milliseconds=500), most=timedelta(seconds=60))
# A task whose step failed on storage (a disk full, the write lock not had in time) runs
# again after 0.5 s, 1 s, then every 2 s: whatever the outage's length, storage that comes
# back has it run within 2 s; a failing commit is cheap, and the tasks go in batches.
STORAGE_BACKOFF = Backoff(first=timedelta(milliseconds=500), most=timedelta(seconds=2))
# A delivery result that could not be committed is tried again after 0.5 s, then every
# second: storage that comes back (a disk freed) records it within a second.
RECORD_BACKOFF = Backoff(first=timedelta(milliseconds=500), most=timedelta(seconds=1))
