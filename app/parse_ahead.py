"""The next project files parsed in a second process while this one applies the last.

A first import of many jobs (100,000 in ten files) spends about half its time parsing
and validating and half applying them to the store; on two cores the halves overlap.
Only for large imports (a fresh interpreter costs about a fifth of a second to start)
and only while at least half a core is spare.

The worker is started with `spawn`, never forked: `serve` runs threads by then, and a
fork copies whatever lock another thread holds at that instant. It runs the very
function this process would (app/importer.py `snapshot_of`), so a file's errors name
the same file, line and field, and sends back the snapshot; every write stays in this
process, in file order. It runs at most PARSE_AHEAD_FILES files ahead, each snapshot holding a
file's jobs in memory. If the worker cannot start or dies, the files it had not
returned are parsed here, as they would have been without it.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import pickle
import time
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Callable, Sequence

from engine.logs import log_event

log = logging.getLogger("sundial.config")

MIN_BYTES = 2 * 2**20  # about 15,000 jobs: below that, starting a process costs more than it saves
PARSE_AHEAD_FILES = 2
# Half a core: a core shared with one other busy process still gives the worker half of it.
MIN_SPARE = 0.5
LOADAVG = "/proc/loadavg"  # its fourth field: tasks runnable now / all tasks


def spare_cores() -> float:
    """Cores usable by this process that nothing else keeps busy: by the 1-minute load
    average, or by the tasks runnable right now if fewer (the average still counts work
    that ended a minute ago: a 15 s bench run just before leaves about 0.2 of it, several
    in a row about 1). On a saturated machine a second process waits for a core like this
    one and only adds the cost of sending snapshots back (bench/scale.py: no faster at a
    load of 2.5 on two cores); at a load of 1 it cut the import by a fifth to a quarter."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0]
    except OSError:
        return 0.0
    now = _running_besides_this()
    return usable - (busy if now is None else min(busy, now))


def _running_besides_this(samples: int = 5, gap: float = 0.002) -> float | None:
    """Tasks runnable now other than the one reading, averaged over a few samples 2 ms
    apart (one sample catches a busy process between two time slices); None where the
    kernel does not say."""
    seen = 0
    for sample in range(samples):
        try:
            with open(LOADAVG) as file:
                running = int(file.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return None
        seen += max(running - 1, 0)
        if sample + 1 < samples:
            time.sleep(gap)
    return seen / samples


class ParseAhead:
    """`parse(*work[i])` for each i in order, the later ones computed by a worker meanwhile.

    work: argument tuples whose third item is the file's bytes (their sizes decide
    whether a worker is worth starting). allowed: False parses everything here.
    """

    def __init__(self, parse: Callable[..., Any], work: Sequence[tuple[Any, ...]], allowed: bool = True) -> None:
        self.parse, self.work = parse, work
        self.pool: ProcessPoolExecutor | None = None
        self.futures: dict[int, Future[bytes]] = {}
        self.next = 1  # the first file is parsed here, while the worker starts
        if allowed and len(work) >= 2 and sum(len(args[2]) for args in work) >= MIN_BYTES \
                and spare_cores() >= MIN_SPARE:
            try:
                # The worker only parses, so its collector never runs (engine/collector.py says why).
                self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                initializer=gc.disable)
            except (OSError, ValueError) as error:
                log_event(log, "config parse worker not started", level=logging.WARNING, error=str(error))
        self._fill()

    def __enter__(self) -> ParseAhead:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def result(self, index: int) -> Any:
        """What `parse(*work[index])` returns (or raises)."""
        future = self.futures.pop(index, None)
        self._fill()  # the worker goes on with the next file while this one is applied
        if future is not None:
            try:
                return pickle.loads(future.result())  # noqa: S301 - our own worker's bytes
            except Exception as error:  # noqa: BLE001 - a dead worker or a failed send: parse here
                log_event(log, "config parse worker failed", level=logging.WARNING,
                          error=f"{type(error).__name__}: {error}")
                self.close()
        return self.parse(*self.work[index])

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        self.futures.clear()

    def _fill(self) -> None:
        while self.pool is not None and self.next < len(self.work) and len(self.futures) < PARSE_AHEAD_FILES:
            try:
                self.futures[self.next] = self.pool.submit(_pickled, self.parse, *self.work[self.next])
            except RuntimeError:  # the pool broke meanwhile: the rest are parsed here
                self.close()
                return
            self.next += 1


def _pickled(parse: Callable[..., Any], *args: Any) -> bytes:
    """What the worker runs: `parse(*args)` sent back as bytes, so that this process
    decodes it when it takes the result, on the thread that applies it, not on the
    pool's thread while it applies the file before (the two would share one core)."""
    return pickle.dumps(parse(*args), protocol=pickle.HIGHEST_PROTOCOL)
