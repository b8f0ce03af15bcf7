"""The in-memory backend: a JobStore and a TaskQueue held in a process's memory.

A reference implementation of the ports (engine/ports.py), run through the same
contract suite as SQLite and Datastore (tests/contract/), and a fast, deterministic
backend for the engine's tests and for a simulator of the whole chain: it sleeps
never, starts no thread, reads no clock (time comes in through the ports' `now`
arguments) and makes no random choice (task ids are a counter).

`tables.py` holds the committed data under one lock and checks what one commit
may write; `transaction.py` is one unit of work's buffered writes; `store.py` the
JobStore; `queue.py` the TaskQueue. `build_memory_backend` wires the three.
"""

from __future__ import annotations

from engine.adapters.memory.queue import MemoryTaskQueue
from engine.adapters.memory.store import MemoryJobStore
from engine.adapters.memory.tables import MemoryTables

__all__ = ["MemoryJobStore", "MemoryTaskQueue", "MemoryTables", "build_memory_backend"]


def build_memory_backend() -> tuple[MemoryJobStore, MemoryTaskQueue]:
    """A store and the queue its transactions enqueue on, sharing one set of tables
    (the queue reads the throttles' limits from the committed project rows)."""
    tables = MemoryTables()
    queue = MemoryTaskQueue(tables.throttle_limit)
    return MemoryJobStore(tables, queue), queue
