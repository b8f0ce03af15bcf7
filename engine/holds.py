"""The port of attempt holds: which process holds each attempt in flight (the embedded
backend's way to notice attempts whose process died; engine/interruptions.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from engine.ports import Transaction


@dataclass(frozen=True)
class AttemptKey:
    """One attempt of one event of an invocation."""

    project: str
    job_id: str
    invocation_id: str
    event_index: int
    attempt: int


@dataclass(frozen=True)
class HeldAttempt:
    """An attempt in flight and the process that holds it ("": this process)."""

    key: AttemptKey
    holder: str = ""
    # Of an orphan only: the latest time of a staged request its gone holder may have let
    # out (engine/adapters/local/release_marks.py); None when the store cannot tell.
    released_until: datetime | None = None


class AttemptHolds(Protocol):
    """Which process holds each attempt in flight, on a store whose processes can die
    under their attempts with nothing else to notice (the embedded backend). The hold
    is written in the transaction that records the attempt as starting and removed in
    the one that records its result; a process that is gone leaves its holds behind,
    and `orphaned` finds them (engine/interruptions.py settles them). On Cloud Tasks
    an attempt belongs to its task instead, whose retry settles it (RELIABILITY.md).
    """

    def hold(self, tx: Transaction, key: AttemptKey) -> None:
        """This process holds the attempt from `tx`'s commit on (replacing any earlier
        hold of the same event)."""

    def release(self, tx: Transaction, held: HeldAttempt) -> bool:
        """End the hold in `tx`, if that process still holds that attempt; True if it did."""

    def held_until(self, since: float) -> float | None:
        """The monotonic instant (engine/leases.py) up to which an attempt this process
        began to hold at monotonic `since` stays its: while the other processes take it
        for alive, and only if they have not taken it for gone since (then what it held
        was settled, and may be issued again elsewhere). None: no bound known yet."""

    def release_up_to(self, at: datetime) -> datetime:
        """Store that this process may let out staged requests due up to `at`; return once
        stored. A staged request is sent only after this. Returns the time the stored
        mark covers (`at` or later): requests due up to then need no further call.

        :raises StoreError: it could not be stored.
        """

    def orphaned(self, limit: int) -> list[HeldAttempt]:
        """Up to `limit` attempts held by processes that are gone.

        :raises StoreError: storage is failing.
        """


class AttemptCanceller(Protocol):
    """Closes the connections of an aborted invocation's attempts that this process has
    on the wire (engine/targets/in_flight.py). Only the process that sends an attempt can
    close it: the one that committed the abort does at once (engine/changes.py), and on
    the embedded backend each process also looks now and then whether the invocations of
    its long requests were aborted elsewhere (engine/aborted_attempts.py). On Google
    Cloud an attempt's request belongs to another task request, perhaps on another
    instance: it runs on until its answer or its timeout (its result is refused all the same)."""

    def close_attempts(self, project: str, job_id: str, invocation_id: str) -> int:
        """Close them; return how many were closed."""

    def on_the_wire_since(self, before: float, most: int) -> list[tuple[str, str, str]]:
        """Up to `most` (project, job, invocation) with an attempt on the wire here since
        before monotonic instant `before`, the longest first (engine/aborted_attempts.py
        asks whether another process aborted them)."""
