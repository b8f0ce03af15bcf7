"""The last lease check before a request leaves: at the socket, not before the work.

Between the check in `TaskRunner.send_held` and the request's bytes leaving lie the
template rendering, secrets, the address check, a token's minting and the connection
itself. A process stopped anywhere in there (SIGSTOP, a long pause) would, on waking,
send a request whose lease another process has already taken over. So the sender sets
a fence around the send; the HTTP pool calls `check()` once the connection is open,
right before it writes, and a lost lease raises `LeaseLost` there. What is left is
the write itself (docs/RELIABILITY.md): the one duplicate the invocation id is for.

`LeaseLost` is a BaseException so that the targets' handling of failed requests
(OSError, ValueError, ...) never turns a lease given up into a failed attempt.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator


class _Fence(threading.local):
    """This thread's fence: the check of the leases it sends under (None: outside any)."""

    lost: Callable[[], str] | None = None


_local = _Fence()


class LeaseLost(BaseException):
    """The lease named in the message ran out before the request was written."""


@contextmanager
def fenced(lost: Callable[[], str]) -> Iterator[None]:
    """Within the block, `check()` raises LeaseLost when `lost()` names a lease ("" while all hold)."""
    previous = _local.lost
    _local.lost = lost
    try:
        yield
    finally:
        _local.lost = previous


def check() -> None:
    """Raise LeaseLost if the fence this thread sends under has a lease that ran out."""
    lost = _local.lost
    name = lost() if lost is not None else ""
    if name:
        raise LeaseLost(name)
