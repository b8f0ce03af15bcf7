"""Requests of staged attempts (statemachine/staging.py) held until their time.

The step thread commits a staged attempt ahead of its time; its request waits here, on
one thread and a heap rather than on a sender each, and when the clock reaches its time
everything due then is handed to `release` in one call: the requests of one instant
are checked together and leave together, with no storage write in front of them. So
do the requests of the next few milliseconds (tuning.py, `gather`), at the latest one's time.
Stopping lets nothing more go: what is held then is handed back to the caller, never
released (after a stop signal nothing new is sent; those attempts go back to their
start tasks under their invocation ids, staged_sends.py).

With `release_up_to` (the process's release mark, release_marks.py), the stager stores
the mark for the earliest held time a little before it (`mark_lead`): the sender must find its
request's time covered before it sends, and finds it so without a write at T. A mark
covers a while past the time it was stored for, and the times it covers need no
wakeup of their own before theirs (a spread load has a time every few milliseconds).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from datetime import datetime
from typing import Any, Callable

from engine.adapters.local.tuning import DEFAULT_LOCAL_TUNING, LocalTuning
from engine.logs import log_event
from engine.ports import Clock
from engine.staged import seconds_until

log = logging.getLogger("sundial.dispatcher")


Entry = tuple[datetime, int, Any]


class Stager:
    def __init__(self, clock: Clock, release: Callable[[list[Any]], None], name: str = "sundial-stage",
                 release_up_to: Callable[[datetime], datetime] | None = None,
                 tuning: LocalTuning = DEFAULT_LOCAL_TUNING):
        """`release(items)`: run on the stager's thread with every item whose time has come.

        Times up to `tuning.gather` after the earliest one due are let go together, at
        the latest of them (never before its own): a spread load has a time every few
        milliseconds, and each release's wakeups and GIL hand-offs, not the requests,
        were most of its CPU (docs/PERFORMANCE.md). Beyond `tuning.gather_most` of them,
        those due leave at once: a burst's instant shares its wakeups widely enough."""
        self.clock, self.release, self.release_up_to = clock, release, release_up_to
        self._mark_lead = tuning.mark_lead.total_seconds()
        self._gather, self._gather_most = tuning.gather, tuning.gather_most
        # How far the stored mark covers, as it last said (or the time it failed to be
        # stored for): a held time up to there needs no wakeup of its own to mark it.
        self._marked: datetime | None = None
        self._heap: list[Entry] = []
        self._order = itertools.count()  # ties keep their order; items never compare
        self._ready = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, held: list[tuple[datetime, Any]]) -> list[Any]:
        """Hold each (time, item) until the clock reads its time; returns the items refused
        (all of them, once shut down)."""
        if not held:
            return []
        with self._ready:
            if self._closing:
                return [item for _, item in held]
            first = self._heap[0][0] if self._heap else None
            for at, item in held:
                heapq.heappush(self._heap, (at, next(self._order), item))
            if first is None or self._heap[0][0] < first:
                self._ready.notify()
        return []

    def held(self) -> int:
        with self._ready:
            return len(self._heap)

    def due(self) -> bool:
        """Whether something held is due already (the stager is about to release it)."""
        with self._ready:
            return bool(self._heap) and self._heap[0][0] <= self.clock.now()

    def shutdown(self, until: float | None = None) -> list[Any]:
        """Stop, and return what is held, never to be released. A release under way (the
        requests of an instant being handed over) is waited for, until time.monotonic()
        reads `until` at most (None: however long it takes)."""
        with self._ready:
            self._closing = True
            held, self._heap = [entry[2] for entry in sorted(self._heap)], []
            self._ready.notify()
        if self._thread.is_alive():
            self._thread.join(None if until is None else max(until - time.monotonic(), 0.0))
        return held

    def _run(self) -> None:
        while (due := self._next_due()) is not None:
            if isinstance(due, datetime):
                self._mark(due)
                continue
            if not due:
                continue  # shut down while it waited for them
            try:
                self.release(due)
            except Exception as error:  # a bug of the caller's: the stager must go on
                log_event(log, "releasing staged requests failed", level=logging.ERROR, error=repr(error))

    def _mark(self, at: datetime) -> None:
        assert self.release_up_to is not None
        try:
            covered = self.release_up_to(at)
        except Exception as error:  # the sender tries again, at the socket's side of T
            log_event(log, "storing the release mark failed", level=logging.WARNING, error=repr(error))
            covered = at  # tried: not again for this time
        with self._ready:
            self._marked = covered

    def _next_due(self) -> list[Any] | datetime | None:
        """Wait for the earliest time to come; the items due then (None: stopped and
        empty; a time: its release mark is to be stored first)."""
        with self._ready:
            while True:
                if not self._heap:
                    if self._closing:
                        return None
                    self._ready.wait()
                    continue
                head = self._heap[0][0]
                left = seconds_until(self.clock, head)
                if self.release_up_to is not None and (self._marked is None or head > self._marked):
                    if left <= self._mark_lead:
                        return head
                    self._ready.wait(left - self._mark_lead)
                    continue
                if left <= 0:
                    return self._take_due(head)
                self._ready.wait(left)

    def _take_due(self, head: datetime) -> list[Any]:
        """The items due now, with those due up to `gather` after `head`, waited for
        together (none past the stored mark: it would be stored at their time). Holding
        `_ready`."""
        until = head + self._gather
        if self.release_up_to is not None and self._marked is not None:
            until = min(until, self._marked)  # (at or after `head`: _next_due marked it first)
        while self._heap and (left := seconds_until(self.clock, self._latest_held(until))) > 0:
            self._ready.wait(left)  # one wait for them all, not one each
        now = self.clock.now()
        due = []
        while self._heap and self._heap[0][0] <= now:
            due.append(heapq.heappop(self._heap)[2])
        return due

    def _latest_held(self, until: datetime) -> datetime:
        """The latest held time up to `until`; the first one's if more than `gather_most`
        are (the heap is not empty, and its first time is up to then). Only the part of
        the heap up to `until` is walked: a node later than that has only later ones below."""
        heap, latest, nodes, seen = self._heap, self._heap[0][0], [0], 0
        while nodes:
            node = nodes.pop()
            if node < len(heap) and heap[node][0] <= until:
                seen += 1
                if seen > self._gather_most:
                    return heap[0][0]
                latest = max(latest, heap[node][0])
                nodes += (2 * node + 1, 2 * node + 2)
        return latest
