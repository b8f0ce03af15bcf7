"""How large the stored job records are: the figure that must stay bounded.

A job's record is its state as stored, read and rewritten by every step of the job:
the `record` column of SQLite's `jobs` table, the `record` property of a Datastore
`Job` entity (engine/adapters/cloud/datastore_entities.py), JSON text in both. Its
size is counted in UTF-8 bytes, as both stores hold it. The definition beside it is
not counted: its size is the config's (config/limits.py), not the job's work.

    largest_job_record(store)   the largest record in a store, now
    RecordWatch(store)          the largest seen over a run, sampled; `check()` asserts
                                it stayed within MAX_JOB_RECORD_BYTES

Fault trials and benches print the figure and assert the bound, so that a record that
grows with fan-out, buffered occurrences, catch-up backlog or history shows.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# A job's stored record has a bound that does not depend on its work.
MAX_JOB_RECORD_BYTES = 16 * 1024


@dataclass(frozen=True)
class LargestRecord:
    bytes: int = 0
    job: str = ""  # "PROJECT/JOB"; empty when the store had no job

    def __str__(self) -> str:
        return f"{self.bytes:,} bytes ({self.job or 'no job'})"


def largest_in_sqlite(path: str | Path) -> LargestRecord:
    """The largest `jobs.record` of the SQLite database at `path` (a read-only connection
    of its own: safe while a server writes to it; a missing file is an error, not made)."""
    conn = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True, timeout=30)
    try:
        row = conn.execute("SELECT length(CAST(record AS BLOB)), project || '/' || job_id FROM jobs"
                           " ORDER BY 1 DESC LIMIT 1").fetchone()
    finally:
        conn.close()
    return LargestRecord(*row) if row else LargestRecord()


def largest_in_datastore(client) -> LargestRecord:
    """The largest `record` of the Job entities that the ndb `client` sees."""
    from engine.adapters.cloud.datastore_calls import ndb_context
    from engine.adapters.cloud.datastore_entities import JobEntity

    largest = LargestRecord()
    with ndb_context(client):
        for entity in JobEntity.query().iter():
            size = len((entity.record or "").encode("utf-8"))
            if size > largest.bytes:
                largest = LargestRecord(size, entity.key.id())
    return largest


def largest_in_memory(store) -> LargestRecord:
    """The largest record of a MemoryJobStore, as the other stores would hold its text."""
    from statemachine.record_form import record_to_dict

    largest = LargestRecord()
    for job in store.tables.jobs.values():
        size = len(json.dumps(record_to_dict(job.record), separators=(",", ":")).encode("utf-8"))
        if size > largest.bytes:
            largest = LargestRecord(size, f"{job.record.project}/{job.record.job_id}")
    return largest


def largest_job_record(store) -> LargestRecord:
    """The largest record in `store`: a SqliteJobStore, a DatastoreJobStore, a
    MemoryJobStore, or a wrapper of one that has it as `inner` (tests/engine/harness.py's
    FlakyStore)."""
    from engine.adapters.cloud.datastore_store import DatastoreJobStore
    from engine.adapters.local.sqlite_store import SqliteJobStore
    from engine.adapters.memory import MemoryJobStore

    store = getattr(store, "inner", store)
    if isinstance(store, SqliteJobStore):
        return largest_in_sqlite(store.path)
    if isinstance(store, DatastoreJobStore):
        return largest_in_datastore(store.client)
    if isinstance(store, MemoryJobStore):
        return largest_in_memory(store)
    raise TypeError(f"no way to measure the job records of a {type(store).__name__}")


class RecordWatch:
    """The largest job record over a run: call `sample()` at the instants to look at
    (or `every(seconds)` from a thread of its own, for a real server)."""

    def __init__(self, measure: Callable[[], LargestRecord]):
        self.measure = measure
        self.peak = LargestRecord()
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False

    @classmethod
    def of(cls, store) -> "RecordWatch":
        return cls(lambda: largest_job_record(store))

    @classmethod
    def of_sqlite(cls, path: str | Path) -> "RecordWatch":
        return cls(lambda: largest_in_sqlite(path))

    def sample(self) -> LargestRecord:
        now = self.measure()
        self.samples += 1
        if now.bytes > self.peak.bytes:
            self.peak = now
        return now

    def every(self, seconds: float) -> "RecordWatch":
        def run():
            while not self._stop.wait(seconds):
                try:
                    self.sample()
                except sqlite3.Error:  # no jobs table yet, or a moment's lock: the next sample
                    pass

        self._thread = threading.Thread(target=run, daemon=True, name="record-watch")
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the sampling thread, if there is one."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def stop(self) -> LargestRecord:
        """Stop sampling and give the peak; the first call takes one last sample."""
        if not self._stopped:
            self._stopped = True
            self.close()
            self.sample()
        return self.peak

    def figures(self) -> dict:
        return {"largest_job_record_bytes": self.peak.bytes, "largest_job_record_job": self.peak.job,
                "record_samples": self.samples}

    def check(self, bound: int = MAX_JOB_RECORD_BYTES) -> None:
        assert self.peak.bytes <= bound, (
            f"the largest stored job record was {self.peak}, over the bound of {bound:,} bytes"
            f", over {self.samples} samples")
