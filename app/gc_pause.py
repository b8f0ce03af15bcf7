"""The cyclic garbage collector paused while a config import runs.

A first import of 100,000 jobs builds millions of small objects (values, definitions,
policies, records) and keeps a file's worth alive at a time, so the collector's full
passes, which walk every live object, came to 13% of its time (31 full passes,
docs/PERFORMANCE.md). None of those objects form reference cycles (an import leaves
about ten cyclic objects, from the exceptions of invalid entries), so reference
counting frees them as before; only cycles wait for the collector, which runs again
when the last import running ends.

The pause is process-wide, so it is counted: overlapping imports (the periodic one and
a test's, or two threads) re-enable the collector only when the last one ends, and
never when it was disabled before the first began.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

__all__ = ["collector_paused"]

_lock = threading.Lock()
_pausing = 0  # imports running with the collector paused
_resume = False  # whether the collector was enabled when the first of them began


@contextmanager
def collector_paused() -> Iterator[None]:
    global _pausing, _resume
    with _lock:
        if _pausing == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pausing += 1
    try:
        yield
    finally:
        with _lock:
            _pausing -= 1
            if _pausing == 0 and _resume:
                gc.enable()
