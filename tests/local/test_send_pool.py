"""The pipeline's senders (engine/adapters/local/send_pool.py) when the process stops:
work queued behind a request still out runs at once (it ends without sending), and
the waits end at their deadline, whatever is still out."""

from __future__ import annotations

import threading
import time

from engine.adapters.local.send_pool import SendPool


def _blocked_pool(longest_wait: float = 5.0) -> tuple[SendPool, threading.Event]:
    """A pool of one sender, busy until the event is set (a target that does not answer)."""
    pool = SendPool(1, longest_wait)
    pool.start()
    release, started = threading.Event(), threading.Event()
    pool.submit(lambda: (started.set(), release.wait(30)))
    assert started.wait(5)
    return pool, release


def test_hurried_work_queued_behind_a_request_still_out_runs_at_once():
    pool, release = _blocked_pool()
    ran = threading.Event()
    pool.submit(ran.set)
    assert not ran.wait(0.3)  # behind the busy sender, for up to `longest_wait` (5 s)
    began = time.monotonic()
    pool.hurry()
    assert ran.wait(2) and time.monotonic() - began < 0.5
    assert not pool.idle()  # the first is still out
    release.set()
    assert pool.wait_idle(time.monotonic() + 5)
    pool.shutdown(time.monotonic() + 5)


def test_the_waits_end_at_their_deadline_with_a_request_still_out():
    pool, release = _blocked_pool()
    try:
        began = time.monotonic()
        assert pool.wait_idle(began + 0.3) is False
        pool.shutdown(began + 0.6)
        assert 0.5 < time.monotonic() - began < 1.5
    finally:
        release.set()
