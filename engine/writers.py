"""How many of this process's requests may write one job's record at once.

Every API action but a trigger (pause, resume, abort, PUT, DELETE, backfill) steps
the job's record in a transaction of its own. On Firestore in Datastore mode each of
those waits for the record's lock, and past a few dozen waiters they time out
together after about 90 s instead of being served in turn. So a request past
`limit` writers of the same job is answered at once with 429 and `Retry-After`
(`Busy`), and a client that retries comes back when the pile is gone rather than
adding to it. A trigger never waits here: it is appended to the job's inbox
(engine/inbox.py), and folded at once only when no other writer of the job is at
work in the process (folds of one job wait for each other's lock: 4 at once took
3 s each on the Firestore emulator, one alone under 1 s).

The count is per process: on App Engine every instance admits `limit` writers of a
job, so the bound is `limit` times the instances serving the burst.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

from engine.errors import Busy

# Writers of one job's record a process admits at once. 4 keeps Firestore's lock queue
# for one entity short (30 at once were still served on its emulator; 50 were not)
# across a handful of instances, and is more than one person's clicks ever need.
DEFAULT_JOB_WRITERS = 4
# Seconds a refused client is told to wait: a step of one job takes tens of ms.
RETRY_AFTER_SECONDS = 1


class JobWriters:
    def __init__(self, limit: int = DEFAULT_JOB_WRITERS, retry_after: int = RETRY_AFTER_SECONDS):
        if limit < 1:
            raise ValueError(f"at least one writer of a job must be admitted, not {limit}")
        self.limit, self.retry_after = limit, retry_after
        self._lock = threading.Lock()
        self._writing: dict[tuple[str, str], int] = {}

    def _enter(self, key: tuple[str, str], most: int) -> bool:
        with self._lock:
            if self._writing.get(key, 0) >= most:
                return False
            self._writing[key] = self._writing.get(key, 0) + 1
            return True

    def _leave(self, key: tuple[str, str]) -> None:
        with self._lock:
            left = self._writing[key] - 1
            if left:
                self._writing[key] = left
            else:
                del self._writing[key]

    @contextmanager
    def admit(self, project: str, job_id: str) -> Iterator[None]:
        """A writer's place for the body of the `with`.

        :raises Busy: `limit` writers of the job are at work in this process.
        """
        with self.may_write(project, job_id) as admitted:
            if not admitted:
                raise Busy(f"job {project}/{job_id} has {self.limit} changes under way; "
                           f"try again in {self.retry_after} s", self.retry_after)
            yield

    @contextmanager
    def may_write(self, project: str, job_id: str, alone: bool = False) -> Iterator[bool]:
        """Whether a writer's place was free (and is held for the body of the `with`);
        `alone`: only if no other writer of the job is at work in this process."""
        key = (project, job_id)
        admitted = self._enter(key, 1 if alone else self.limit)
        try:
            yield admitted
        finally:
            if admitted:
                self._leave(key)
