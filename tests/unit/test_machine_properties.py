"""Random event sequences against the machine's promises.

Whatever order ticks, duplicates, retries, pauses, aborts and watchdog runs come
in, no occurrence is started or recorded twice, the overlap limit holds, and
the record's state is always the one its contents imply.
"""

from collections import Counter
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statemachine import actions as act
from statemachine import events as ev
from statemachine.fanout_step import DictRows, step_job
from statemachine.machine import InvalidTransition, derive_state, step
from statemachine.policy import Catchup, FanoutPolicy, Overlap, RetryPolicy, Tuning
from statemachine.record import new_record
from statemachine.waiting import peek
from tests.unit.machine_helpers import clock, policy

TUNING = Tuning(scan_limit=20)

policies = st.builds(
    lambda schedule, overlap, catchup, attempts, count: policy(
        schedule_text=schedule,
        overlap=overlap,
        max_concurrent=2,
        catchup=catchup,
        retry=RetryPolicy(max_attempts=attempts, min_backoff=timedelta(seconds=1)),
        fanout=FanoutPolicy(count=count, spread=timedelta(seconds=count - 1)),
        timeout=timedelta(minutes=3),
        revision=f"{schedule}/{overlap}/{catchup}/{attempts}/{count}",
    ),
    st.sampled_from(["every 1m", "*/2 * * * *", "with 1m interval", "0 * * * * ?"]),
    st.sampled_from(list(Overlap)),
    st.sampled_from(list(Catchup)),
    st.integers(1, 3),
    st.integers(1, 3),
)

moves = st.lists(
    st.tuples(
        st.sampled_from(
            ["tick", "stale-tick", "start", "start", "finish", "fail", "async", "complete",
             "manual", "pause", "resume", "abort", "watchdog", "change", "disable", "enable"]
        ),
        st.integers(0, 240),  # seconds the clock moves first
        st.integers(0, 5),  # which invocation / event / attempt to pick
    ),
    min_size=1,
    max_size=60,
)


def _event_for(move: str, pick: int, record, other_policy, serial: int, rows: dict):
    """Turn a move into an event that is plausible for the record (and the rows of
    its fan-out events)."""
    active = record.active
    entry = active[pick % len(active)] if active else None
    index = pick % entry.event_count if entry else 0
    if entry is None:
        attempt = 1
    elif entry.events_in_rows:
        attempt = DictRows(rows, entry.invocation_id).event(index).attempt
    else:
        attempt = entry.attempts[index]
    invocation = entry.invocation_id if entry else "nothing"
    if pick == 5:
        attempt += 1  # now and then an attempt the machine never issued
    return {
        "tick": ev.TickArrived(record.tick_nonce or "0.0"),
        "stale-tick": ev.TickArrived(f"{record.generation}.{record.nonce_counter - 1}"),
        "start": ev.InvocationStarting(invocation, index, attempt),
        "finish": ev.InvocationFinished(invocation, True, "", index, attempt),
        "fail": ev.InvocationFinished(invocation, False, "http 500", index, attempt),
        "async": ev.InvocationStarted(invocation, index, attempt),
        "complete": ev.InvocationFinished(invocation, pick % 2 == 0, "done", attempt=None),
        "manual": ev.ManualTrigger(f"request-{serial}"),
        "pause": ev.Paused("testing"),
        "resume": ev.Resumed(),
        "abort": ev.Aborted(),
        "watchdog": ev.WatchdogFired(),
        "change": ev.ScheduleChanged(other_policy),
        "disable": ev.JobDisabled(),
        "enable": ev.JobEnabled(record.policy or other_policy),
    }[move]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=policies, second=policies, sequence=moves)
def test_no_occurrence_is_ever_started_or_recorded_twice(first, second, sequence):
    now = clock("10:00:30")
    record = step(new_record("proj", "job"), ev.JobEnabled(first), now, TUNING).record
    created: Counter = Counter()
    skipped: Counter = Counter()
    finished: Counter = Counter()
    rows: dict = {}
    for serial, (move, seconds, pick) in enumerate(sequence):
        now += timedelta(seconds=seconds)
        other = second if record.policy == first else first
        event = _event_for(move, pick, record, other, serial, rows)
        try:
            transition = step_job(record, event, now, TUNING, lambda invocation: DictRows(rows, invocation))
        except InvalidTransition:
            continue
        active_before = {e.invocation_id for e in record.active}
        # A timing change settles the old timing's backlog under the old policy first.
        limits = [p.concurrency_limit() for p in (record.policy, transition.record.policy) if p]
        record = transition.record
        for action in transition.actions:
            if isinstance(action, act.StartInvocation):
                created[action.invocation_id] += 1
            elif isinstance(action, act.RecordSkipped):
                skipped[action.invocation_id] += 1
            elif isinstance(action, act.FinishInvocation):
                finished[action.invocation_id] += 1
            elif isinstance(action, act.Deliver):
                # Only what is active, or was created in this very step (a tick's inline start).
                created_now = {a.invocation_id for a in transition.actions if isinstance(a, act.StartInvocation)}
                assert action.invocation_id in active_before | created_now
                assert record.find_active(action.invocation_id) is not None
        admitted = any(isinstance(a, act.StartInvocation) for a in transition.actions)
        _check_invariants(record, admitted, max(limits))
    assert max(created.values(), default=0) <= 1, "an invocation was created twice"
    assert max(finished.values(), default=0) <= 1, "an invocation was finished twice"
    assert not set(created) & set(skipped), "an occurrence was both started and skipped"
    assert max(skipped.values(), default=0) <= 1, "an occurrence was recorded skipped twice"
    assert set(finished) <= set(created)


def _check_invariants(record, admitted: bool, limit: int) -> None:
    assert record.state is derive_state(record)
    if admitted:  # a policy change may leave more running than the new limit; it aborts nothing
        assert len(record.active) <= limit
    ids = [e.invocation_id for e in record.active] + [o.invocation_id for o in peek(record, 10_000)]
    assert len(ids) == len(set(ids))
    if record.tick_at is not None or record.active:
        assert record.watchdog_at is not None
    if record.dropping:  # their rows are recorded a batch per tick
        assert record.tick_at is not None
    if record.disabled or record.paused:
        assert not record.has_waiting
        assert record.tick_nonce is None or record.dropping
