"""Liveness while another process is frozen holding the write lock: a process that only
waited for the lock is not taken for gone (its heartbeat file says it is here), and a
process that itself stalled past its lease gives up what it held and has it settled
at once, though nobody could write to take it for gone (liveness.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engine.adapters.local.liveness import ProcessIdentity, ProcessRegistry, SqliteAttemptHolds, this_process
from engine.adapters.local.sqlite_store import SqliteJobStore
from engine.adapters.local.write_lock import WriteLock
from engine.errors import WriteLockBusy
from engine.holds import AttemptKey
from tests.engine.harness import FakeClock

TIMEOUT = timedelta(seconds=20)


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _pair(tmp_path):
    store, clock, ticks = SqliteJobStore(tmp_path / "s.db"), FakeClock(), Ticks()
    me = this_process()
    other = ProcessIdentity(me.machine, me.pid, me.started, "waiter")  # running, as far as the kernel knows
    judge = ProcessRegistry(store, me, clock, TIMEOUT, monotonic=ticks)
    waiter = ProcessRegistry(SqliteJobStore(tmp_path / "s.db"), other, clock, TIMEOUT, monotonic=ticks)
    return store, clock, ticks, judge, waiter


def test_a_process_whose_heartbeats_wait_on_a_frozen_lock_holder_is_not_taken_for_gone(tmp_path):
    store, clock, ticks, judge, waiter = _pair(tmp_path)
    judge.heartbeat()
    waiter.heartbeat()
    frozen = WriteLock(str(tmp_path / "s.db"), wait=0.1)  # another process's lock, held throughout
    waiter.store.write_lock.wait = 0.2  # (the bound, short for the test)
    with frozen:
        for _ in range(6):  # 30 s of heartbeats, none of whose rows can be written
            clock.advance(seconds=5)
            ticks.now += 5
            with pytest.raises(WriteLockBusy):
                waiter.heartbeat()
    assert judge.gone_among({waiter.me.id}) == set()
    # Its own lease held on: what it holds may still be sent.
    assert waiter.held_until(ticks.now - 1) is not None and waiter.held_until(ticks.now - 1) > ticks.now
    judge.heartbeat()  # and the judge's heartbeat does not remove it
    ids = {row[0] for row in store.connection().execute("SELECT id FROM processes")}
    assert waiter.me.id in ids
    waiter.heartbeat()  # nor was it taken for gone: nothing of its is revoked
    assert waiter.held_until(ticks.now - 1) > ticks.now


def test_a_process_that_wrote_no_heartbeat_at_all_is_still_gone_after_the_timeout(tmp_path):
    _, clock, ticks, judge, waiter = _pair(tmp_path)
    judge.heartbeat()
    waiter.heartbeat()
    clock.advance(seconds=21)
    assert judge.gone_among({waiter.me.id}) == {waiter.me.id}
    judge.heartbeat()
    assert not (tmp_path / "s.db-heartbeats" / waiter.me.id).exists()  # forgotten with its row


def test_a_process_that_stalled_past_its_lease_gives_up_what_it_held_and_settles_it(tmp_path):
    store, clock, ticks, judge, stalled = _pair(tmp_path)
    judge.heartbeat()
    stalled.heartbeat()
    holds = SqliteAttemptHolds(stalled.store, stalled)
    taken = ticks.now
    with stalled.store.transaction() as tx:
        holds.hold(tx, AttemptKey("p", "j", "inv-1", 0, 1))
    assert holds.orphaned(10) == []
    clock.advance(seconds=60)  # frozen (holding the lock: nobody could write meanwhile)
    ticks.now += 60
    stalled.heartbeat()  # its row is still there: nobody took it for gone
    assert stalled.held_until(taken) == float("-inf")  # what it held before is given up ...
    (orphan,) = holds.orphaned(10)  # ... and settled again at once, not left to the watchdog
    assert orphan.key.invocation_id == "inv-1" and orphan.holder == stalled.me.id
    with stalled.store.transaction() as tx:  # what it holds from now on is its own again
        holds.hold(tx, AttemptKey("p", "j", "inv-2", 0, 1))
    assert [held.key.invocation_id for held in holds.orphaned(10)] == ["inv-1"]
    assert stalled.held_until(ticks.now) > ticks.now
