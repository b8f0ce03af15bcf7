"""Attempts held by processes that are gone are settled (docs/REFERENCE.md section 4; engine/interruptions.py),
on the real SQLite store, queue and process registry, with a fake clock.

A "process" here is an engine with its own identity in the registry, sharing the
harness's database. One that dies with an attempt in flight is one that committed
the attempt as starting (`step_many`) and never sent it or recorded its result,
which is where a kill -9 leaves it.
"""

from __future__ import annotations

import subprocess
from datetime import timedelta

import pytest

from engine.adapters.local.dispatcher import InlineDispatcher
from engine.adapters.local.liveness import ProcessIdentity, ProcessRegistry, SqliteAttemptHolds, this_process
from engine.holds import AttemptKey, HeldAttempt
from engine.interruptions import interrupted_change
from engine.ports import DeliveryResult
from engine.service import build_engine
from statemachine.durations import parse_instant
from statemachine.policy import MAX_INTERRUPTIONS, FanoutPolicy, RetryPolicy, Tuning
from tests.engine.harness import START, Harness

TIMEOUT = timedelta(seconds=20)  # the heartbeat timeout
LEASE = timedelta(seconds=30)
RETRY = RetryPolicy(3, timedelta(seconds=10), timedelta(minutes=1))
ONCE = RetryPolicy(1, timedelta(seconds=10), timedelta(minutes=1))


class Process:
    """One process on the harness's database: its registry entry and its engine."""

    def __init__(self, h: Harness, identity: ProcessIdentity):
        self.h = h
        self.registry = ProcessRegistry(h.store.inner, identity, h.clock, TIMEOUT)
        holds = SqliteAttemptHolds(h.store.inner, self.registry)
        self.engine = build_engine(h.store, {"http": h.target, "noop": h.target}, h.clock, Tuning(),
                                   secret=b"s", holds=holds)
        self.id = identity.id

    def beat(self) -> int:
        """A heartbeat, and the settling that follows it; returns how many were settled."""
        self.registry.heartbeat()
        return self.engine.interruptions.settle()

    def serve(self) -> None:
        """This process runs the harness's tasks from now on."""
        self.h.dispatcher = InlineDispatcher(self.h.queue, self.engine.tasks.handle, self.h.clock)

    def die_after_committing_due_attempts(self) -> list:
        """Commit every due task's attempt as starting, then die before sending any."""
        leased = self.h.queue.lease_due(self.h.clock.now(), 100, LEASE)
        stepped = self.engine.tasks.step_many([item.task for item in leased])
        return [action for outcome in stepped for _, action in outcome.deliveries]


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def dead() -> ProcessIdentity:
    """A process of this machine that has exited."""
    return ProcessIdentity(this_process().machine, _dead_pid(), "1", "dead")


def silent() -> ProcessIdentity:
    """A process that is running (this one, as far as the kernel can tell) but may stop beating."""
    me = this_process()
    return ProcessIdentity(me.machine, me.pid, me.started, "silent")


def holds(h: Harness) -> list[tuple]:
    return h.store.inner.connection().execute(
        "SELECT invocation_id, event, attempt, holder FROM held_attempts ORDER BY invocation_id, event").fetchall()


@pytest.fixture
def h(tmp_path):
    return Harness(tmp_path, sqlite=True)  # the process registry and attempt holds are SQLite's


def _in_flight_at_a_kill(h: Harness, retry: RetryPolicy, identity: ProcessIdentity):
    h.define(retry=retry)
    first = Process(h, identity)
    first.beat()
    first.serve()
    h.run_until(START + timedelta(seconds=59))
    h.clock.current = START + timedelta(minutes=1)
    first.registry.heartbeat()  # its last
    [action] = first.die_after_committing_due_attempts()
    assert holds(h) == [(action.invocation_id, 0, 1, first.id)]  # held from the tick's own commit
    return first, action


def test_a_process_that_starts_settles_what_a_dead_one_held_and_retries_it_under_its_id(h):
    first, action = _in_flight_at_a_kill(h, RETRY, dead())
    h.clock.advance(seconds=6)  # restarted 6 s later
    second = Process(h, this_process())
    assert second.beat() == 1  # at its start, before it takes any task
    assert holds(h) == []
    settled_at = h.clock.now()
    second.serve()
    h.run_until(START + timedelta(minutes=1, seconds=40))
    [row] = [r for r in h.invocations() if r.scheduled_time == START + timedelta(minutes=1)]
    assert (row.id, row.status, row.attempt) == (action.invocation_id, "SUCCEEDED", 2)
    messages = [entry["message"] for entry in row.log]
    assert "attempt 1: interrupted" in messages
    assert any(m.startswith("attempt 1 interrupted; sent again as attempt 2 at ") and
               m.endswith("not counted against max_attempts (interruption 1 of 3)") for m in messages)
    [retry] = [r for r in h.target.requests if r.invocation_id == action.invocation_id]
    assert retry.attempt == 2
    # The attempt after it waits the retry policy's backoff, as after any failed attempt.
    started = next(parse_instant(e["time"]) for e in row.log if e["message"] == "attempt 2 starting")
    assert started >= settled_at + RETRY.min_backoff
    second.beat()  # the dead process held nothing more: it is forgotten
    assert [r[0] for r in h.store.inner.connection().execute("SELECT id FROM processes")] == [second.id]


def test_with_one_attempt_the_interrupted_one_is_sent_again_under_its_id_and_the_job_fires_on_time(h):
    first, action = _in_flight_at_a_kill(h, ONCE, dead())
    h.clock.advance(seconds=6)
    second = Process(h, this_process())
    assert second.beat() == 1
    second.serve()
    h.run_until(START + timedelta(minutes=2, seconds=1))
    rows = h.invocations()
    assert [(r.id, r.status, r.attempt) for r in rows[:1]] == [(action.invocation_id, "SUCCEEDED", 2)]
    assert (rows[1].scheduled_time, rows[1].status, rows[1].trigger) == (
        START + timedelta(minutes=2), "SUCCEEDED", "schedule")
    assert [(r.invocation_id, r.attempt) for r in h.target.requests] == [(action.invocation_id, 2), (rows[1].id, 1)]


def test_past_the_bound_of_interruptions_it_ends_failed_interrupted(h):
    process, action = _in_flight_at_a_kill(h, ONCE, dead())  # each run of it dies with the attempt out
    for attempt in range(2, MAX_INTERRUPTIONS + 3):
        h.clock.advance(seconds=1)
        survivor = Process(h, this_process())
        assert survivor.beat() == 1
        if attempt > MAX_INTERRUPTIONS + 1:
            break
        row = h.store.get_invocation("proj", "job", action.invocation_id)
        assert row.status == "RUNNING"  # sent again: one attempt, and none of them counted
        h.clock.advance(seconds=16)  # past the backoff (10 s and up to half again): the next start is due
        [action] = process.die_after_committing_due_attempts()
        assert action.attempt == attempt
    row = h.store.get_invocation("proj", "job", action.invocation_id)
    assert (row.status, row.reason, row.attempt) == ("FAILED", "interrupted", MAX_INTERRUPTIONS + 1)
    assert h.target.requests == []  # (each run died before its send)


def test_a_silent_process_is_gone_once_its_heartbeat_is_older_than_the_timeout(h):
    first, action = _in_flight_at_a_kill(h, RETRY, silent())  # its pid runs: only the heartbeat tells
    other = Process(h, this_process())
    h.clock.advance(seconds=19)
    assert other.beat() == 0 and len(holds(h)) == 1
    h.clock.advance(seconds=2)  # 21 s without a heartbeat
    assert other.beat() == 1 and holds(h) == []
    row = h.store.get_invocation("proj", "job", action.invocation_id)
    assert row.status == "RUNNING" and "attempt 1: interrupted" in [e["message"] for e in row.log]


def test_a_process_that_keeps_beating_keeps_its_attempts(h):
    first, _ = _in_flight_at_a_kill(h, RETRY, silent())
    other = Process(h, this_process())
    for _ in range(10):
        h.clock.advance(seconds=15)
        first.registry.heartbeat()
        assert other.beat() == 0
    assert len(holds(h)) == 1


def test_the_watchdog_settles_them_too(h):
    _, action = _in_flight_at_a_kill(h, ONCE, dead())
    h.clock.advance(seconds=1)
    survivor = Process(h, this_process())
    survivor.registry.heartbeat()
    survivor.engine.maintenance.run_watchdog()
    row = h.store.get_invocation("proj", "job", action.invocation_id)
    assert row.status == "RUNNING" and "attempt 1: interrupted" in [e["message"] for e in row.log]
    assert holds(h) == []


def test_an_attempt_another_process_holds_now_is_not_settled_for_the_one_that_held_it(h):
    first, action = _in_flight_at_a_kill(h, RETRY, dead())
    key = AttemptKey("proj", "job", action.invocation_id, 0, 1)
    second = Process(h, this_process())
    second.registry.heartbeat()
    h.store.run_in_transaction(lambda tx: second.engine.changes.holds.hold(tx, key))  # e.g. a re-issue
    [refused] = second.engine.changes.apply_many([interrupted_change(HeldAttempt(key, first.id))])
    assert "no longer held" in str(refused)
    assert holds(h) == [(action.invocation_id, 0, 1, second.id)]
    assert h.store.get_invocation("proj", "job", action.invocation_id) is None  # nothing recorded


def test_every_attempt_is_held_while_it_is_out_and_released_with_its_result(h):
    # A fan-out job's attempts start from start tasks; one of them is answered 202.
    h.define(fanout=FanoutPolicy(2, timedelta(0)))
    process = Process(h, this_process())
    process.beat()
    process.serve()
    seen = []
    h.target.check = lambda request: seen.append(
        (request.event_index, [(e, a, holder) for _, e, a, holder in holds(h)]))
    h.target.respond = lambda request: DeliveryResult("accepted" if request.event_index else "succeeded")
    h.run_until(START + timedelta(minutes=1, seconds=1))
    assert sorted(index for index, _ in seen) == [0, 1]
    assert all((index, 1, process.id) in held for index, held in seen)  # stored before the call
    assert holds(h) == []  # the answer (also the 202) ended each hold
