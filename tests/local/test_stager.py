"""The stager (engine/adapters/local/stager.py): held requests let go at their time,
each only once the stored release mark covers it, and a mark stored only for a time
the last one does not cover (a spread load has a time every few milliseconds)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

from engine.adapters.local.stager import Stager
from engine.adapters.local.tuning import DEFAULT_LOCAL_TUNING
from engine.clock import SystemClock
from statemachine.durations import UTC

COVER = DEFAULT_LOCAL_TUNING.release_mark_span  # how far past its time a mark covers
GATHER, GATHER_MOST = DEFAULT_LOCAL_TUNING.gather, DEFAULT_LOCAL_TUNING.gather_most


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
    # The sender checks the mark again before it writes (StagedChecks.wanted, engine/staged.py).
    start = datetime.now(UTC) + timedelta(seconds=0.2)
    times = [start + timedelta(milliseconds=20 * i) for i in range(3)]
    marks = Marks(fail=True)
    began = time.monotonic()
    released = _hold_and_release(times, marks)
    assert [at for at, _, _ in released] == times and time.monotonic() - began < 5
    assert marks.calls == 3


def test_times_a_few_milliseconds_apart_leave_together_at_the_latest_of_them():
    start = datetime.now(UTC) + timedelta(seconds=0.3)
    close = [start + timedelta(milliseconds=ms) for ms in (0, 1, 2, 3)]  # within GATHER of the first
    alone = start + timedelta(milliseconds=300)
    released = _hold_and_release([*close, alone], Marks())
    groups = _groups(released)
    assert groups == [close, [alone]]
    assert all(at <= left for at, _, left in released)  # none before its time


def test_times_further_apart_than_the_gathering_leave_one_at_a_time():
    start = datetime.now(UTC) + timedelta(seconds=0.3)
    times = [start + GATHER * 3 * i for i in range(4)]
    released = _hold_and_release(times, Marks())
    assert _groups(released) == [[at] for at in times]
    assert all(at <= left for at, _, left in released)


def test_no_time_is_gathered_past_the_stored_mark():
    start = datetime.now(UTC) + timedelta(seconds=0.3)
    edge = start + COVER  # what the mark stored for `start` covers
    before, after = edge - timedelta(milliseconds=1), edge + timedelta(milliseconds=1)
    marks = Marks()
    released = _hold_and_release([start, before, after], marks)
    assert _groups(released) == [[start], [before], [after]]
    assert all(mark is not None and at <= mark for at, mark, _ in released)
    assert marks.calls == 2


def _groups(released: list[tuple[datetime, datetime | None, datetime]]) -> list[list[datetime]]:
    """The times released, grouped by the release they left in."""
    groups: dict[datetime, list[datetime]] = {}
    for at, _, left in released:
        groups.setdefault(left, []).append(at)
    return list(groups.values())


def test_an_instant_of_many_leaves_at_once_without_waiting_for_the_next_times():
    start = datetime.now(UTC) + timedelta(seconds=0.3)
    soon = start + timedelta(milliseconds=2)
    released = _hold_and_release([start] * (GATHER_MOST + 1) + [soon], Marks())
    assert _groups(released) == [[start] * (GATHER_MOST + 1), [soon]]


def test_a_shut_down_stager_releases_nothing_more_and_hands_back_what_it_held():
    released: list[datetime] = []
    stager = Stager(SystemClock(), released.extend, release_up_to=Marks().release_up_to)
    stager.start()
    soon = datetime.now(UTC) + timedelta(milliseconds=300)
    times = [soon + timedelta(milliseconds=10 * i) for i in (2, 0, 1)]
    assert stager.submit([(at, at) for at in times]) == []
    assert stager.shutdown() == sorted(times)  # in time order
    assert stager.submit([(soon, soon)]) == [soon]  # refused once shut down
    time.sleep(0.5)  # past their times
    assert released == []
