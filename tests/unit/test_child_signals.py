"""The dispatcher child's stop signals (app/child.py): whatever instant of the main
thread's wait a signal interrupts, its handler returns and the wait ends.

A signal handler runs between two bytecodes of the main thread, so the test calls the
handler at each line the wait executes in turn (sys.settrace), in a thread of its own
that is stuck for good if the handler blocks."""

from __future__ import annotations

import sys
import threading

from app.child import StopSignals

WAIT = 0.02  # seconds each wait may take; a stuck one is given far longer
STUCK_AFTER = 2.0


def _interrupted_at(line: int, wait, handler) -> bool | None:
    """Run `wait(WAIT)` with `handler()` called at its `line`-th line event: what the
    wait returned, or None if it never returned (the handler blocked it)."""
    seen = 0
    result: list[bool] = []

    def trace(frame, event, arg):
        nonlocal seen
        if event == "line":
            seen += 1
            if seen == line:
                handler()
        return trace

    def run() -> None:
        sys.settrace(trace)
        try:
            result.append(wait(WAIT))
        finally:
            sys.settrace(None)

    worker = threading.Thread(target=run, daemon=True)  # left behind if stuck
    worker.start()
    worker.join(STUCK_AFTER)
    return result[0] if result else None


def _lines_of_one_wait(wait) -> int:
    lines = 0

    def trace(frame, event, arg):
        nonlocal lines
        lines += event == "line"
        return trace

    sys.settrace(trace)
    try:
        wait(WAIT)
    finally:
        sys.settrace(None)
    return lines


def _first_stuck_line(make) -> int | None:
    """The first line of the wait at which a signal leaves it stuck, or None."""
    wait, _ = make()
    for line in range(1, _lines_of_one_wait(wait) + 2):
        wait, handler = make()
        if _interrupted_at(line, wait, handler) is None:
            return line
    return None


def _stop_signals():
    stop = StopSignals()
    return stop.wait, stop.note


def _an_event():  # what the child did before: the handler set the Event being waited on
    stop = threading.Event()
    return stop.wait, stop.set


def test_a_signal_at_any_line_of_the_wait_stops_it():
    assert _first_stuck_line(_stop_signals) is None
    for line in range(1, _lines_of_one_wait(_stop_signals()[0]) + 1):
        wait, handler = _stop_signals()
        assert _interrupted_at(line, wait, handler) is True, f"the signal at line {line} was lost"


def test_the_probe_finds_the_instant_an_event_set_by_its_handler_hangs():
    # The same probe over the old design, so that this test can fail: Event.set takes
    # the lock Event.wait holds around its own bookkeeping.
    assert _first_stuck_line(_an_event) is not None


def test_a_stop_signal_ends_the_wait_at_once_and_is_kept():
    stop = StopSignals()
    assert stop.wait(0.01) is False
    stop.note()
    assert stop.wait(60) is True  # no wait once received
    assert stop.wait(60) is True
