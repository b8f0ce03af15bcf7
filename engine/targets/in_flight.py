"""The sockets of the requests this process has on the wire, by the invocation they
belong to, so that an invocation aborted while its attempt is in flight (`overlap:
replace`, a user's abort) has that attempt's connection closed: the target sees it drop
instead of working on for an answer nobody will record.

The blocking pool (http_pool.py) and the batch writer (http_batch.py) add a request's
socket once its first byte is written and take it out when its answer is read or it
failed. `close` shuts a socket down rather than closing it: its owner's thread is in a
recv or a select on that descriptor, and a closed descriptor number may be reused under
it; a shut-down socket wakes it with an end of file, which ends the attempt as a
connection error (the machine then refuses its result: the invocation is no longer active).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from engine.ports import DeliveryRequest


class InvocationKey(NamedTuple):
    """Which invocation a request on the wire is an attempt of (a tuple: it is hashed
    twice for every request sent, and a tuple's hash is the cheapest)."""

    project: str
    job_id: str
    invocation_id: str

    @staticmethod
    def of(request: DeliveryRequest) -> InvocationKey | None:
        """The invocation of an attempt of the job's own target (None for a hook's or a cancel's request)."""
        return InvocationKey(request.project, request.job_id, request.invocation_id) if request.attempt_of_job else None


class InFlight:
    """Implements engine/holds.py's `AttemptCanceller` for this process's HTTP requests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Mostly one socket an invocation (a fan-out's events may have more): lists, not sets.
        self._sockets: dict[InvocationKey, list[socket.socket]] = {}
        self._since: dict[InvocationKey, float] = {}  # monotonic: when its first socket was added

    def add(self, key: InvocationKey | None, sock: socket.socket | None) -> None:
        if key is None or sock is None:
            return
        with self._lock:
            held = self._sockets.get(key)
            if held is None:
                self._sockets[key] = [sock]
                self._since[key] = time.monotonic()
            else:
                held.append(sock)

    def remove(self, key: InvocationKey | None, sock: socket.socket | None) -> None:
        if key is None or sock is None:
            return
        with self._lock:
            held = self._sockets.get(key)
            if held is not None and sock in held:
                held.remove(sock)
                if not held:
                    del self._sockets[key], self._since[key]

    def close_attempts(self, project: str, job_id: str, invocation_id: str) -> int:
        """Shut down the connections of the invocation's attempts on the wire here; how many."""
        with self._lock:
            key = InvocationKey(project, job_id, invocation_id)
            held = self._sockets.pop(key, [])
            self._since.pop(key, None)
        for sock in held:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # closed meanwhile: its answer came or it failed on its own
        return len(held)

    def on_the_wire_since(self, before: float, most: int) -> list[tuple[str, str, str]]:
        """Up to `most` invocations with a request on the wire here since before monotonic
        `before`, the longest first: those another process may have aborted meanwhile."""
        with self._lock:
            held = sorted((since, key) for key, since in self._since.items() if since < before)
        return [key for _, key in held[:most]]

    def count(self) -> int:
        """Requests registered now (tests read it)."""
        with self._lock:
            return sum(len(held) for held in self._sockets.values())
