"""Which project files are unchanged since they were last read, told by their stat.

The embedded server looks at its configs directory every few seconds; reading and
hashing every file each time costs a 20,000-job project's megabytes per look for
nothing. A file whose signature (inode, size, mtime and ctime, in nanoseconds) is the
one it had when it was last read has the digest it had then, and is not read again.

A signature is remembered only when it can be trusted: a file changed within the
file system's timestamp granularity of the moment it was read could be changed again
with the same size and the same timestamps (two writes in one clock tick), and its
signature would not show it. So a file whose mtime or ctime is within DOUBT of the
read is read and hashed again at each look until its timestamps are older than that.
The ctime is in the signature because no one can set it: a copy that keeps the mtime
(`cp -p`, `rsync -t`, `touch -d`) still changes it.
"""

from __future__ import annotations

import os
import time
from typing import Callable

DOUBT_SECONDS = 2.0  # far above any file system's timestamp granularity (ext4: ns; FAT: 2 s)

Signature = tuple[int, int, int, int, int]


def signature(stat: os.stat_result) -> Signature:
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


class FileSignatures:
    """Project -> (signature, digest) of its file as last read, when trusted."""

    def __init__(self, clock: Callable[[], float] = time.time, doubt: float = DOUBT_SECONDS):
        self._clock, self._doubt_ns = clock, int(doubt * 1e9)
        self._known: dict[str, tuple[Signature, str]] = {}

    def now(self) -> float:
        """The instant to pass to `remember`, taken before the file's stat and read."""
        return self._clock()

    def digest(self, project: str, stat: os.stat_result) -> str | None:
        """The digest of the file when it was read, if its stat says it has not changed."""
        known = self._known.get(project)
        return known[1] if known is not None and known[0] == signature(stat) else None

    def remember(self, project: str, stat: os.stat_result, digest: str, read_at: float) -> None:
        """`stat` (taken before the read at `read_at`) had `digest`; trusted only when the
        file's timestamps are older than the read by more than DOUBT."""
        newest = max(stat.st_mtime_ns, stat.st_ctime_ns)
        if newest < int(read_at * 1e9) - self._doubt_ns:
            self._known[project] = (signature(stat), digest)
        else:
            self._known.pop(project, None)

    def forget(self, project: str) -> None:
        self._known.pop(project, None)
