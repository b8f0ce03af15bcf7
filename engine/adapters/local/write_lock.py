"""One SQLite writer at a time, across the threads of a process and across processes,
and never a wait for it without a deadline.

SQLite serializes writers itself, but a writer that finds the lock taken sleeps in
its busy handler (1, 2, 5, 10 ... 100 ms) and may sleep on long after the lock came
free. Between threads a Python lock hands the write lock over at once; between
processes an `flock` on a file next to the database does the same: the kernel wakes
the next waiter the moment the holder lets go.

`flock` belongs to an open file, which every thread of a process shares, so it
cannot tell this process's threads apart: the thread lock is taken first, and only
its holder waits for (or holds) the file lock. A process that dies holding the file
lock loses it with its file descriptors, so a crash never leaves it taken.

A process that is frozen (SIGSTOP, a debugger, a VM paused) keeps the lock, and
nothing can take it from it. So no one waits for it without a bound: a writer that
has not had it within `LOCK_WAIT` gives up with `WriteLockBusy` (a `StoreError`,
retried as every storage failure is; the API answers 503 with Retry-After). A
blocking `flock` cannot be given a deadline, so a contended wait runs on a helper
thread (`_FileLock`) and the writer waits for its hand-over with a timeout; a lock
the helper gets after its writer gave up is let go at once.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time

from engine.errors import WriteLockBusy

# Seconds a writer waits for the write lock. Far above a healthy wait (a commit holds
# it for milliseconds, a 500-row step for tens of them) and below the few seconds an
# API caller waits before it should hear "try again" instead of silence.
LOCK_WAIT = 3.0


def lock_path(db_path: str) -> str:
    return f"{db_path}-writelock"


class _FileLock:
    """`flock(LOCK_EX)` on `fd` with a deadline, for one caller at a time (the thread lock
    of `WriteLock` sees to that). Uncontended, the caller takes it itself; otherwise a
    helper thread blocks in `flock` and hands the lock over if its caller still wants it."""

    def __init__(self, fd: int):
        self._fd = fd
        self._state = threading.Condition()
        self._waiting = False  # the helper is (about to be) blocked in flock
        self._wanted = False  # a caller waits for the helper's hand-over now
        self._granted = False  # the helper got the lock for the waiting caller
        self._closed = False
        self._helper: threading.Thread | None = None

    def acquire(self, timeout: float) -> bool:
        with self._state:
            if not self._waiting:
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    self._start_wait()
            self._wanted = True
            try:
                granted = self._state.wait_for(lambda: self._granted, timeout)
            finally:
                self._wanted = False
            self._granted = False
            return granted

    def release(self) -> None:
        with self._state:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        with self._state:
            self._closed = True
            self._state.notify_all()

    def _start_wait(self) -> None:
        self._waiting = True
        if self._helper is None:
            self._helper = threading.Thread(target=self._wait_loop, name="write-lock-wait", daemon=True)
            self._helper.start()
        self._state.notify_all()

    def _wait_loop(self) -> None:
        while True:
            with self._state:
                self._state.wait_for(lambda: self._waiting or self._closed)
                if self._closed:
                    return
            fcntl.flock(self._fd, fcntl.LOCK_EX)  # releases the GIL while it waits
            with self._state:
                self._waiting = False
                if self._wanted:
                    self._granted = True
                    self._state.notify_all()
                elif not self._closed:
                    # Its caller gave up meanwhile: let the next writer (of any process) have it.
                    fcntl.flock(self._fd, fcntl.LOCK_UN)


class WriteLock:
    """`with lock:` makes the caller the only writer of `db_path` on this machine
    (among processes that use this lock; others still meet SQLite's own), or raises
    `WriteLockBusy` after `wait` seconds."""

    def __init__(self, db_path: str, wait: float = LOCK_WAIT):
        self.wait = wait
        self._threads = threading.Lock()
        self._fd: int | None = None
        self._file: _FileLock | None = None
        if db_path != ":memory:" and not db_path.startswith("file:"):
            self._fd = os.open(lock_path(db_path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._file = _FileLock(self._fd)

    def __enter__(self) -> "WriteLock":
        deadline = time.monotonic() + self.wait  # one bound for both waits together
        if not self._threads.acquire(timeout=self.wait):
            raise WriteLockBusy(f"another thread of this process has held the write lock over {self.wait:g}s")
        if self._file is not None:
            try:
                if not self._file.acquire(max(0.0, deadline - time.monotonic())):
                    raise WriteLockBusy(f"another process has held the database's write lock over {self.wait:g}s"
                                        " (a stalled process?)")
            except BaseException:
                self._threads.release()
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._file is not None:
                self._file.release()
        finally:
            self._threads.release()

    def close(self) -> None:
        if self._fd is not None:
            assert self._file is not None
            self._file.close()
            os.close(self._fd)
            self._fd, self._file = None, None
