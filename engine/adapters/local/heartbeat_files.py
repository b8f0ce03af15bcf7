"""Each process's heartbeat time in a small file of its own beside the database, so that
saying "still here" never waits for the database's write lock.

A process judged by its heartbeat row alone is taken for gone whenever it cannot write,
and the usual reason it cannot write is another process frozen while holding the write
lock: the frozen holder would, on waking, declare the healthy waiters gone and settle
their work. Liveness is judged on the holder instead: every process writes its heartbeat
time here first (no lock, a rename of a few bytes), then to its row as before, and a
process's heartbeat is the later of the two (liveness.py). A frozen process writes
neither, so it is still found gone after the timeout.

The directory `<db>-heartbeats/` is private to the owner, as the database is; a file is
named by the process id and holds its heartbeat as seconds since the epoch, read on the
one injected clock. A release that knows nothing of the files judges by the rows alone,
as it did, and is not disturbed by them.
"""

from __future__ import annotations

import os
from pathlib import Path


class HeartbeatFiles:
    """The heartbeat files of the processes on one database."""

    def __init__(self, folder: Path):
        self.folder = folder

    @classmethod
    def beside(cls, db_path: str) -> "HeartbeatFiles | None":
        """The files of the database at `db_path`; None for a database in memory (one process)."""
        if db_path == ":memory:" or db_path.startswith("file:"):
            return None
        return cls(Path(f"{db_path}-heartbeats"))

    def write(self, process_id: str, seconds: float) -> None:
        """:raises OSError: the file could not be written (the caller's row still can be)."""
        if not self.folder.exists():
            self.folder.mkdir(mode=0o700, exist_ok=True)
            self.folder.chmod(0o700)  # mkdir's mode is masked by the umask
        temporary = self.folder / f".{process_id}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, repr(seconds).encode())
        finally:
            os.close(fd)
        os.replace(temporary, self.folder / process_id)  # a reader sees the old time or the new, whole

    def read(self, process_id: str) -> float | None:
        """The process's latest heartbeat here; None if it wrote none (or it cannot be read)."""
        try:
            return float((self.folder / process_id).read_text())
        except (OSError, ValueError):
            return None

    def remove(self, process_id: str) -> None:
        try:
            (self.folder / process_id).unlink()
        except FileNotFoundError:
            pass
