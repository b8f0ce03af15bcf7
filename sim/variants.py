"""Deliberately broken engines: each one a defect the simulator must catch (its
self-check, tests/sim/test_self_check.py). A variant is a context manager that swaps
one piece of the product for a broken one while a simulation runs, and puts it back.

| variant | the defect |
|---|---|
| send-before-commit | a step's request leaves before its attempt is committed |
| skip-lease-check | a process sends though its task's or attempt's lease ran out |
| ignore-fencing-epoch | a result of an earlier issue of an attempt is recorded |
| drop-duplicate-start-check | a second delivery of a start task issues its attempt again |
| settle-live-attempt | a start task for an attempt within its lease settles it as interrupted at once |
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import engine.changes
import engine.recording
import engine.tasks
import statemachine.invocations as inv
import statemachine.machine as machine
from engine.ports import DeliveryRequest
from sim.simulation import Simulation
from statemachine import actions as act
from statemachine import events as ev
from statemachine.policy import Tuning
from statemachine.record import JobRecord, evolve
from statemachine.ticks import after_invocations

Variant = Callable[[Simulation], contextlib.AbstractContextManager[None]]


@contextlib.contextmanager
def _swapped(owner: object, name: str, value: object) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextlib.contextmanager
def _swapped_transition(event: type, handler: Any) -> Iterator[None]:
    """The machine's handler of `event`, in every state that has one, swapped."""
    originals = {state: table[event] for state, table in machine.TRANSITIONS.items() if event in table}
    for state, entry in originals.items():
        if callable(entry):
            machine.TRANSITIONS[state][event] = handler
    try:
        yield
    finally:
        for state, entry in originals.items():
            machine.TRANSITIONS[state][event] = entry


def send_before_commit(sim: Simulation) -> contextlib.AbstractContextManager[None]:
    record_actions = engine.recording.record_actions  # (the function engine.changes calls)

    def sending_first(tx: Any, project: str, job_id: str, actions: tuple[act.Action, ...], now: datetime,
                      queue: str = "") -> None:
        for action in actions:
            if isinstance(action, act.Deliver):
                sim.target.deliver(DeliveryRequest(project, job_id, action.invocation_id, action.scheduled_time,
                                                   action.attempt, action.event_index, action.event_count, {}))
        record_actions(tx, project, job_id, actions, now, queue)

    return _swapped(engine.changes, "record_actions", sending_first)


def skip_lease_check(sim: Simulation) -> contextlib.AbstractContextManager[None]:
    return _swapped(engine.tasks, "first_lost", lambda now, leases: "")


def ignore_fencing_epoch(sim: Simulation) -> contextlib.AbstractContextManager[None]:
    current_attempt = inv._current_attempt

    def unfenced(record: JobRecord, invocation_id: str, event_index: int, attempt: int | None,
                 epoch: int | None = None) -> Any:
        return current_attempt(record, invocation_id, event_index, attempt)

    return _swapped(inv, "_current_attempt", unfenced)


def drop_duplicate_start_check(sim: Simulation) -> contextlib.AbstractContextManager[None]:
    def starting_again(record: JobRecord, event: ev.InvocationStarting, now: datetime, tuning: Tuning) -> Any:
        entry = record.find_active(event.invocation_id)
        if entry is not None and not event.redelivered:  # forget it was started: start it again
            record = record.with_active(evolve(entry, started_mask=entry.started_mask & ~(1 << event.event_index)))
        return _after(inv.on_starting(record, event, now, tuning), now)

    return _swapped_transition(ev.InvocationStarting, starting_again)


def _after(result: tuple[JobRecord, list[act.Action]], now: datetime) -> Any:
    record, actions = result
    return after_invocations(record, now, actions)


def settle_live_attempt(sim: Simulation) -> contextlib.AbstractContextManager[None]:
    def settling(record: JobRecord, event: ev.InvocationStarting, now: datetime, tuning: Tuning) -> Any:
        entry = record.find_active(event.invocation_id)
        if entry is not None and not entry.events_in_rows and entry.started_at is not None \
                and entry.started_mask >> event.event_index & 1 and not entry.event_done(event.event_index) \
                and now - entry.started_at < record.live_policy.attempt_timeout + tuning.start_grace:
            # Taken for one whose first run died, within the lease: settled at once.
            lost = ev.AttemptInterrupted(event.invocation_id, event.event_index, event.attempt)
            return _after(inv.on_interrupted(record, lost, now, tuning), now)
        return _after(inv.on_starting(record, event, now, tuning), now)

    return _swapped_transition(ev.InvocationStarting, settling)


VARIANTS: dict[str, Variant] = {
    "send-before-commit": send_before_commit,
    "skip-lease-check": skip_lease_check,
    "ignore-fencing-epoch": ignore_fencing_epoch,
    "drop-duplicate-start-check": drop_duplicate_start_check,
    "settle-live-attempt": settle_live_attempt,
}
