"""A fan-out invocation's event rows (statemachine/fanout.py), kept as the parts of
its progress in one transaction: `event/<index>` for each event that has left its
first waiting state.

Each step of one event reads the job record and writes only its own part, so the
events of one occurrence do not contend for one row or entity.
"""

from __future__ import annotations

from engine.ports import Transaction
from statemachine.fanout import EventState, state_from_dict, state_to_dict

EVENT_PREFIX = "event/"


class TransactionRows:
    """`statemachine.fanout_step.EventRows` of one invocation, read and written in `tx`."""

    def __init__(self, tx: Transaction, project: str, job_id: str, invocation_id: str):
        self.tx, self.key = tx, (project, job_id, invocation_id)

    def event(self, index: int) -> EventState:
        stored = self.tx.get_progress(*self.key, f"{EVENT_PREFIX}{index}")
        return EventState(index) if stored is None else state_from_dict(stored)

    def put_event(self, state: EventState) -> None:
        self.tx.put_progress(*self.key, f"{EVENT_PREFIX}{state.index}", state_to_dict(state))

    def events(self) -> dict[int, EventState]:
        parts = self.tx.list_progress(*self.key)
        states = (state_from_dict(value) for part, value in parts.items() if part.startswith(EVENT_PREFIX))
        return {state.index: state for state in states}
