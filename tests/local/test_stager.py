"""The stager (engine/adapters/local/stager.py): held requests let go at their time,
each only once the stored release mark covers it, and a mark stored only for a time
the last one does not cover (a spread load has a time every few milliseconds)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

from engine.adapters.local.stager import Stager
from statemachine.durations import UTC

COVER = timedelta(milliseconds=250)  # as release_marks.AHEAD: how far past its time a mark covers


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class Marks:
    """A release mark kept in memory: each call stores `at + COVER` unless covered."""

    def __init__(self, fail: bool = False) -> None:
        self.stored: list[datetime] = []  # every mark stored, in order
        self.fail = fail
        self.calls = 0

    def release_up_to(self, at: datetime) -> datetime:
        self.calls += 1
        if self.fail:
            raise OSError("disk full")
        if not self.stored or at > self.stored[-1]:
            self.stored.append(at + COVER)
        return self.stored[-1]


def _hold_and_release(times: list[datetime], marks: Marks) -> list[tuple[datetime, datetime | None, datetime]]:
    """Hold one item per time; returns (its time, the mark when it left, when it left)."""
    released: list[tuple[datetime, datetime | None, datetime]] = []
    done = threading.Event()

    def release(items: list[datetime]) -> None:
        left = datetime.now(UTC)
        for at in items:
            released.append((at, marks.stored[-1] if marks.stored else None, left))
        if len(released) == len(times):
            done.set()

    stager = Stager(SystemClock(), release, release_up_to=marks.release_up_to)
    stager.start()
    stager.submit([(at, at) for at in times])
    assert done.wait(10)
    stager.shutdown()
    return released


def test_times_one_mark_covers_are_let_go_with_one_mark_stored_for_them_all():
    start = datetime.now(UTC) + timedelta(seconds=0.3)
    times = [start + timedelta(milliseconds=5 * i) for i in range(20)]  # 95 ms: within one mark
    marks = Marks()
    released = _hold_and_release(times, marks)
    assert [at for at, _, _ in released] == times
    assert all(mark is not None and at <= mark and at <= left for at, mark, left in released)
    assert marks.calls == 1 and len(marks.stored) == 1


def test_a_time_past_the_mark_gets_a_mark_of_its_own_before_it_leaves():
    start = datetime.now(UTC) + timedelta(seconds=0.3)
    times = [start + timedelta(milliseconds=100 * i) for i in range(7)]  # 600 ms: three marks
    marks = Marks()
    released = _hold_and_release(times, marks)
    assert all(mark is not None and at <= mark and at <= left for at, mark, left in released)
    assert len(marks.stored) == marks.calls == 3


def test_a_mark_that_cannot_be_stored_holds_nothing_back_and_is_tried_again_for_each_time():
    # The sender checks the mark again before it writes (TaskRunner.ready_staged_many).
    start = datetime.now(UTC) + timedelta(seconds=0.2)
    times = [start + timedelta(milliseconds=20 * i) for i in range(3)]
    marks = Marks(fail=True)
    began = time.monotonic()
    released = _hold_and_release(times, marks)
    assert [at for at, _, _ in released] == times and time.monotonic() - began < 5
    assert marks.calls == 3
