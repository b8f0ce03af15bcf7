"""One SQLite writer at a time, across the threads of a process and across processes.

SQLite serializes writers itself, but a writer that finds the lock taken sleeps in
its busy handler (1, 2, 5, 10 ... 100 ms) and may sleep on long after the lock came
free. Between threads a Python lock hands the write lock over at once; between
processes an `flock` on a file next to the database does the same: the kernel wakes
the next waiter the moment the holder lets go.

`flock` belongs to an open file, which every thread of a process shares, so it
cannot tell this process's threads apart: the thread lock is taken first, and only
its holder waits for (or holds) the file lock. A process that dies holding the file
lock loses it with its file descriptors, so a crash never leaves it taken.
"""

from __future__ import annotations

import fcntl
import os
import threading


def lock_path(db_path: str) -> str:
    return f"{db_path}-writelock"


class WriteLock:
    """`with lock:` makes the caller the only writer of `db_path` on this machine
    (among processes that use this lock; others still meet SQLite's own)."""

    def __init__(self, db_path: str):
        self._threads = threading.Lock()
        self._fd: int | None = None
        if db_path != ":memory:" and not db_path.startswith("file:"):
            self._fd = os.open(lock_path(db_path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def __enter__(self) -> "WriteLock":
        self._threads.acquire()
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX)  # releases the GIL while it waits
            except BaseException:
                self._threads.release()
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
