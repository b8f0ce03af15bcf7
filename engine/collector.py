"""Python's cyclic garbage collector, as Sundial's processes set it up.

Reference counting frees almost everything Sundial allocates; the cyclic collector only
looks for reference cycles, and a full pass walks every live object of the process. So:

- A serving process freezes what it holds once built (`settle_collector`): its modules,
  settings and engine live as long as it does, and no pass walks them again. The
  thresholds stay Python's: collections ten times rarer spent half the time in a steady
  load, but each young pass then walked ten times as many objects and paused the writer
  for 10-70 ms at an instant when a thousand requests were due (docs/PERFORMANCE.md).
- A config import pauses it (`collector_paused`): a first import of 100,000 jobs builds
  millions of small objects and keeps a file's worth alive at a time, and full passes
  came to 13% of its time; an import leaves about ten cyclic objects (the exceptions of
  invalid entries), found when the collector runs again.
- So does holding a burst (`BulkPause`): 10,000 staged requests are some 300,000 live
  objects, every one of them still wanted, and full passes over them took 85-390 ms each,
  one of them in the middle of the burst's writes. The pause ends when the burst is
  over, and lasts at most a minute: then one full pass runs and the pause goes on. And
  the instant many requests are due, from their release to their last write, when any
  pass would hold the writer up (engine/adapters/local/staged_sends.py).

Pauses are counted, process-wide: the collector comes back when the last ends, and
never when something else had disabled it before the first began.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

__all__ = ["BulkPause", "collector_paused", "settle_collector"]

_lock = threading.Lock()
_pausing = 0  # pauses in force
_resume = False  # whether the collector was enabled when the first of them began


def settle_collector() -> None:
    """Call once a serving process is built, before it starts serving."""
    gc.collect()
    gc.freeze()  # what exists now lives as long as the process: never walked again


def pause() -> None:
    global _pausing, _resume
    with _lock:
        if _pausing == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pausing += 1


def resume() -> None:
    global _pausing
    with _lock:
        _pausing -= 1
        if _pausing == 0 and _resume:
            gc.enable()


@contextmanager
def collector_paused() -> Iterator[None]:
    pause()
    try:
        yield
    finally:
        resume()


class BulkPause:
    """Pauses the collector while `busy` (the process holds a burst's worth of work),
    for `most` seconds at a time: then a full pass runs, and the pause goes on."""

    def __init__(self, most: float = 60.0, collect: Callable[[], object] = gc.collect):
        self.most, self._collect = most, collect
        self._lock = threading.Lock()
        self._since: float | None = None  # when the pause in force began

    def update(self, busy: bool, now: float) -> None:
        """Say how things stand now (`now`: a monotonic reading)."""
        with self._lock:
            if busy and self._since is None:
                self._since = now
                pause()
            elif self._since is not None and (not busy or now - self._since >= self.most):
                self._since = None
                resume()
                if busy:  # a minute of a burst: one pass now, then pause again
                    self._collect()
                    self._since = now
                    pause()

    @property
    def paused(self) -> bool:
        return self._since is not None
