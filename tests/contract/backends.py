"""The backends the contract suite runs on, behind one small test-side interface.

    store              the JobStore under test
    queued_names()     names of tasks an outside observer sees in the queue now
    run_due(now, h)    run the tasks due at `now` through `h`; returns how many
    next_wake()        when the next task becomes due (None: queue empty)
    interfere(p, j)    commit a write of job p/j from elsewhere, now; True if a
                       transaction that read it meanwhile will have to run again
    close()            after the test: wait for whatever the backend still runs
"""

from __future__ import annotations

import sqlite3
import threading
from datetime import datetime, timedelta, timezone

from engine.adapters.cloud.datastore_entities import job_key
from engine.adapters.cloud.datastore_store import DatastoreJobStore
from engine.adapters.local.dispatcher import InlineDispatcher
from engine.adapters.local.sqlite_queue import SqliteTaskQueue
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.adapters.memory import build_memory_backend
from tests.contract.queues import EtaQueue

# Fewer shards of the indexed times than production's 256 (datastore_entities.py): each
# watchdog page and retention batch queries every shard, which the emulators answer
# slowly; 4 still spreads a test's jobs over several. test_datastore.py runs production's.
TEST_INDEX_SHARDS = 4


class FixedClock:
    def __init__(self, now: datetime):
        self.current = now

    def now(self) -> datetime:
        return self.current


class SqliteBackend:
    name = "sqlite"
    # BEGIN IMMEDIATE serializes writers: a body never loses a race, never runs twice.
    reruns_on_conflict = False

    def __init__(self, tmp_path):
        self.path = tmp_path / "sundial.db"
        self.store = SqliteJobStore(self.path)
        self.queue = SqliteTaskQueue(self.store)

    def queued_names(self) -> list[str]:
        # A connection of its own: the store's, in this thread, would see uncommitted rows.
        conn = sqlite3.connect(self.path)
        try:
            return sorted(name for (name,) in conn.execute("SELECT name FROM tasks"))
        finally:
            conn.close()

    def run_due(self, now: datetime, handle) -> int:
        return InlineDispatcher(self.queue, handle, FixedClock(now)).run_due_now()

    def next_wake(self) -> datetime | None:
        # The epoch as "now": only unleased tasks count as free, as in the ETA queue.
        return self.queue.next_wake(datetime.fromtimestamp(0, timezone.utc))

    def interfere(self, project: str, job_id: str) -> bool:
        return False  # another writer would wait for the running transaction

    def close(self) -> None:
        pass


class MemoryBackend:
    name = "memory"
    # Its transactions are serialized under one lock: a body never runs twice.
    reruns_on_conflict = False

    def __init__(self):
        self.store, self.queue = build_memory_backend()

    def queued_names(self) -> list[str]:
        return self.queue.names()

    def run_due(self, now: datetime, handle) -> int:
        return InlineDispatcher(self.queue, handle, FixedClock(now)).run_due_now()

    def next_wake(self) -> datetime | None:
        # The epoch as "now": only unleased tasks count as free, as in the ETA queue.
        return self.queue.next_wake(datetime.fromtimestamp(0, timezone.utc))

    def interfere(self, project: str, job_id: str) -> bool:
        return False  # another writer would wait for the running transaction

    def close(self) -> None:
        pass


class DatastoreBackend:
    name = "datastore"
    reruns_on_conflict = True

    def __init__(self, emulator, retries: int = 3, index_shards: int = TEST_INDEX_SHARDS):
        self.emulator = emulator
        self.client = emulator.client()
        self.queue = EtaQueue()
        self.store = DatastoreJobStore(self.client, self.queue, retries=retries, index_shards=index_shards)

    def queued_names(self) -> list[str]:
        return self.queue.pending_names()

    def run_due(self, now: datetime, handle) -> int:
        return self.queue.run_due(now, handle)

    def next_wake(self) -> datetime | None:
        return self.queue.next_wake()

    def interfere(self, project: str, job_id: str) -> bool:
        """Rewrite the job entity, unchanged, from another thread and context.

        Datastore transactions are optimistic: one that read the entity before
        this write fails at commit and ndb runs its body again.
        """
        thread = self._rewrite_elsewhere(project, job_id)
        thread.join(timedelta(seconds=30).total_seconds())
        return True

    def _rewrite_elsewhere(self, project: str, job_id: str) -> threading.Thread:
        """A thread (started) that rewrites the job entity, unchanged, in a context of its own."""
        def rewrite():
            with self.client.context(cache_policy=False, global_cache_policy=False):
                entity = job_key(project, job_id).get()
                if entity is not None:
                    entity.put()

        thread = threading.Thread(target=rewrite)
        thread.start()
        return thread

    def close(self) -> None:
        pass


class FirestoreBackend(DatastoreBackend):
    """The Datastore store on the Firestore emulator in Datastore mode: production's
    size limits and lock-based transactions (tests/support/emulators.py)."""

    name = "firestore"
    # A transaction's reads hold locks: a writer from elsewhere waits for it, so the
    # body is not run again for that write (concurrent transactions may still abort
    # one another, and then ndb runs a body again).
    reruns_on_conflict = False

    def __init__(self, emulator, retries: int = 3, index_shards: int = TEST_INDEX_SHARDS):
        super().__init__(emulator, retries, index_shards)
        self._writers: list[threading.Thread] = []

    def interfere(self, project: str, job_id: str) -> bool:
        """Rewrite the job entity from another thread, which waits for the lock of
        any transaction that read it; the write lands after that one ends."""
        self._writers.append(self._rewrite_elsewhere(project, job_id))
        return False

    def close(self) -> None:
        """Wait for the writes `interfere` started, so that none lands in the next test."""
        for writer in self._writers:
            writer.join(timedelta(minutes=1).total_seconds())
