"""A discrete-event driver for the pure machine: one job, a simulated queue and a
simulated target, so that whole runs (thousands of steps) replay with an explicit clock.

Every task the machine enqueues is delivered at its time (a tick, a start, an attempt's
answer after a duration chosen from its invocation id); `outages` hold every delivery
due inside them back to their end, as a process that was down would; a watchdog runs
every minute outside them. What the target saw and what was recorded SKIPPED or
finished is collected, so that runs can be compared with each other and with what
the machine promises. Nothing here knows how the record stores waiting occurrences.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable

from statemachine import actions as act
from statemachine import events as ev
from statemachine.machine import InvalidTransition, step
from statemachine.policy import JobPolicy, Tuning
from statemachine.record import JobRecord, new_record
from statemachine.record_form import record_from_dict, record_to_dict

PROJECT, JOB = "proj", "job"
WATCHDOG_EVERY = timedelta(minutes=1)
ROUND_TRIP_EVERY = 7


def iso(instant: datetime) -> str:
    return instant.isoformat()


def pick(invocation_id: str, choices: list[Any]) -> Any:
    """One of `choices`, fixed by the invocation id (the same in every run)."""
    digest = hashlib.blake2b(invocation_id.encode(), digest_size=4).digest()
    return choices[int.from_bytes(digest, "big") % len(choices)]


@dataclass
class Outcome:
    delivered: list[tuple[str, str, str]] = field(default_factory=list)  # (scheduled time, trigger, id)
    skipped: list[tuple[str, str, str, str]] = field(default_factory=list)  # (id, time, trigger, reason)
    finished: list[tuple[str, str, str]] = field(default_factory=list)  # (id, status, reason)
    refused: int = 0
    largest_record: int = 0  # bytes of the largest serialized record seen
    largest_step: int = 0  # the most actions one step gave

    def comparable(self) -> dict[str, Any]:
        """What must not change: the deliveries and the finishes in order, the skipped
        rows as a set (rows written in one commit have no order among them)."""
        return {
            "delivered": [list(d) for d in self.delivered],
            "skipped": sorted(list(s) for s in self.skipped),
            "finished": [list(f) for f in self.finished],
            "refused": self.refused,
        }


class Simulation:
    def __init__(self, policy: JobPolicy, start: datetime, tuning: Tuning | None = None,
                 duration: Callable[[str], timedelta] = lambda _: timedelta(seconds=1),
                 fails: Callable[[str], bool] = lambda _: False,
                 outages: tuple[tuple[datetime, datetime], ...] = (), measure: bool = True,
                 record: JobRecord | None = None, bound: int | None = None):
        """A new job enabled with `policy` at `start`; or, given `record`, that job as it
        stands (its pending tick is delivered; its attempts in flight are the caller's).
        `bound`: the run fails at the first step whose serialized record is larger."""
        self.tuning = tuning or Tuning()
        self.duration, self.fails, self.outages, self.measure = duration, fails, outages, measure
        self.bound = bound
        self.record: JobRecord = record or new_record(PROJECT, JOB)
        self.outcome = Outcome()
        self.now = start
        self._queue: list[tuple[datetime, int, str, Any]] = []
        self._serial = self._steps = 0
        if record is None:
            self.external(start, ev.JobEnabled(policy))
        elif record.tick_at is not None:
            self._push(record.tick_at, "tick", record.tick_nonce)
        self._push(start + WATCHDOG_EVERY, "watchdog", None)
        self.on_step: Callable[[Simulation], None] | None = None

    # --- set-up ---------------------------------------------------------------------

    def external(self, at: datetime, event: Any) -> None:
        """An event from outside (an operator, an import) at `at`, outages or not; a
        callable is given the simulation then and returns the event."""
        self._push(at, "external", event, held=False)

    # --- running --------------------------------------------------------------------

    def run(self, until: datetime) -> Outcome:
        while self._queue and self._queue[0][0] <= until:
            at, _, kind, payload = heapq.heappop(self._queue)
            self.now = max(self.now, at)
            self._handle(kind, payload)
        return self.outcome

    def _handle(self, kind: str, payload: Any) -> None:
        if kind == "watchdog":
            self._push(self.now + WATCHDOG_EVERY, "watchdog", None)
            if self.record.watchdog_at is not None and self.record.watchdog_at <= self.now:
                self._step(ev.WatchdogFired())
        elif kind == "tick":
            self._step(ev.TickArrived(payload), payload)
        elif kind == "start":
            self._step(ev.InvocationStarting(*payload))
        elif kind == "finish":
            invocation, index, attempt = payload
            failed = self.fails(invocation)
            self._step(ev.InvocationFinished(invocation, not failed, "http 500" if failed else "", index, attempt))
        else:
            self._step(payload(self) if callable(payload) else payload)

    def _step(self, event: Any, nonce: str | None = None) -> None:
        try:
            transition = step(self.record, event, self.now, self.tuning)
        except InvalidTransition:
            self.outcome.refused += 1
            return
        self.record = transition.record
        self._steps += 1
        if self.measure:
            data = record_to_dict(self.record)
            size = len(json.dumps(data))
            assert self.bound is None or size < self.bound, f"a {size}-byte record at {self.now}"
            self.outcome.largest_record = max(self.outcome.largest_record, size)
            if self._steps % ROUND_TRIP_EVERY == 0:  # now and then, the stored form must load as it was
                self.record = record_from_dict(data)
                assert self.record == transition.record
        self.outcome.largest_step = max(self.outcome.largest_step, len(transition.actions))
        for action in transition.actions:
            self._apply(action, nonce)
        if self.on_step is not None:
            self.on_step(self)

    def _apply(self, action: act.Action, nonce: str | None) -> None:
        out = self.outcome
        if isinstance(action, act.ScheduleTick):
            self._push(action.at, "tick", action.nonce)
        elif isinstance(action, act.RetryLater) and nonce is not None:
            self._push(self.now + action.delay, "tick", nonce)
        elif isinstance(action, act.EnqueueAttempt):
            self._push(action.at, "start", (action.invocation_id, action.event_index, action.attempt))
        elif isinstance(action, act.Deliver):
            if action.attempt == 1 and action.event_index == 0:
                out.delivered.append((iso(action.scheduled_time), action.trigger, action.invocation_id))
            self._push(self.now + self.duration(action.invocation_id), "finish",
                       (action.invocation_id, action.event_index, action.attempt))
        elif isinstance(action, act.RecordSkipped):
            out.skipped.append((action.invocation_id, iso(action.scheduled_time), action.trigger, action.reason))
        elif isinstance(action, act.FinishInvocation):
            out.finished.append((action.invocation_id, action.status, action.reason))

    def _push(self, at: datetime, kind: str, payload: Any, held: bool = True) -> None:
        if held:
            for begin, end in self.outages:
                if begin <= at < end:
                    at = end
        self._serial += 1
        heapq.heappush(self._queue, (at, self._serial, kind, payload))
