"""One thread that writes staged requests at their time and reads their answers, on
non-blocking sockets (selectors), instead of a sender thread per request.

A thousand requests due at one instant sent from 16-32 threads through http.client
took 150-270 ms to arrive on two cores, most of it threads handing the GIL to each
other and http.client's per-request objects; written from one thread as bytes encoded
ahead, on connections opened ahead, they took 30-45 ms (docs/PERFORMANCE.md, "One
writer at T"). So a staged request arrives here encoded (`encode_request`), and at its
time the writer, for each request in turn: takes an idle connection of its host (at
most `parallel` per host; a host's next request goes on the first connection that is
free again), runs the request's `ready()` check right before writing (the leases and
the job as stored now: the equivalent of the fence at the socket, `fence.py`), and
writes. This thread never connects: a host with no idle connection gets one opened on
a thread of its own, so a host that is slow to accept holds up none of the others, and
the new connection comes back here to be written on (if the request's deadline has not
passed meanwhile).

Answers with a Content-Length are read here. Any other (chunked, no length, 1xx, bytes
that are not HTTP), and every error, ends the request's use of the writer: `done` gets
the Answer or the error, the way `ConnectionPool.request` would have raised or returned
it, and never twice. An attempt's time runs from when the writer takes it, connecting
included: at its deadline an answer whose head has arrived ends with what arrived of
its body, any other with a timeout. A failure to connect (refused, a TLS certificate
refused, no handshake in time) is the attempt's failure, reported only after the same
`ready()` check as a write: a request whose leases were lost is reported not sent
(`done(None)`), one that may go is a failed attempt. A reused connection found closed
before the write is replaced, and the request written on the new one (nothing reached
the server); an error after the write is the attempt's.
"""

from __future__ import annotations

import http.client
import logging
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from engine.targets.http_framing import Complex, parse_answer
from engine.targets.http_pool import Answer, ConnectionPool, PoolKey, _dropped, _read_answer, bounded_response
from engine.targets.in_flight import InvocationKey

PARALLEL = 64  # connections per host at once (the pool keeps as many idle)
# How long a request whose connection is being opened counts as backlog (what the record
# stage and the collector wait for): a loopback or LAN connect takes a millisecond, a
# remote TLS handshake a few hundred; one that never completes holds nothing up longer.
CONNECT_COUNTED = 0.25
_STALE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
# Nothing to do yet on a non-blocking socket (a TLS one says so with its own errors: a
# record not complete yet, or a renegotiation that wants the other direction).
_LATER = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


@dataclass(eq=False)
class Outgoing:
    key: PoolKey  # ConnectionPool.key_of
    data: bytes  # the whole request, encoded
    method: str
    timeout: float
    read_limit: int
    ready: Callable[[], bool]  # checked right before the write; False: not sent
    done: Callable[[Answer | BaseException | None], None]  # None: not sent (ready() said no)
    deadline: float = 0.0
    buffer: bytearray = field(default_factory=bytearray)
    invocation: InvocationKey | None = None  # whose attempt it is: an abort closes it (in_flight.py)


@dataclass(eq=False)
class _Busy:
    conn: http.client.HTTPConnection
    item: Outgoing
    rest: bytes  # not yet written


class BatchWriter:
    def __init__(self, pool: ConnectionPool, parallel: int = PARALLEL,
                 hand_off: Callable[[Callable[[], None]], None] | None = None, name: str = "sundial-writer"):
        """`hand_off(work)`: run `work` on another thread (an answer this one will not read)."""
        self.pool, self.parallel = pool, parallel
        self.hand_off = hand_off or (lambda work: threading.Thread(target=work, daemon=True).start())
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._incoming: list[Outgoing] = []
        self._waiting: dict[PoolKey, deque[Outgoing]] = {}
        self._in_use: dict[PoolKey, int] = {}
        self._busy: dict[int, _Busy] = {}  # by socket fd
        self._connected: list[tuple[Outgoing, http.client.HTTPConnection | BaseException]] = []
        self._connecting: dict[int, float] = {}  # id(item) -> when its connection began to be opened elsewhere
        self._queued = 0  # requests taken in and not yet written (only this writer's thread sets it)
        self._timeouts_at = float("inf")  # the earliest deadline of an answer (or later: none is missed)
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, items: list[Outgoing]) -> None:
        with self._lock:
            self._incoming.extend(items)
        self._wake_w.send(b"x")

    def backlog(self) -> int:
        """Requests submitted and not yet written: while there are any, whatever else
        this process does can wait (the record stage does, engine/adapters/local/pipeline.py)."""
        with self._lock:
            now = time.monotonic()
            # A request whose host is slow to accept stops counting after a while: a host
            # that never accepts would otherwise hold this process up for its timeout.
            connecting = sum(1 for began in self._connecting.values() if now - began < CONNECT_COUNTED)
            return len(self._incoming) + self._queued + connecting

    def shutdown(self, timeout: float | None = None) -> None:
        """Finish what was submitted (answers or timeouts), then stop; wait `timeout`
        seconds at most (None: as long as their timeouts take). Its thread is a daemon:
        answers still due after that are not waited for (a process stopping within its
        grace leaves them to the next start, engine/adapters/local/pipeline.py)."""
        with self._lock:
            self._closing = True
        self._wake_w.send(b"x")
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._lock:
                incoming, self._incoming = self._incoming, []
                connected, self._connected = self._connected, []
                self._queued += len(incoming)  # still counted: backlog() never dips to 0 meanwhile
                closing = self._closing
            now = time.monotonic()
            for item in incoming:
                # The attempt's time runs from its intake, waiting for a connection of its
                # host (and connecting) included: it ends within its timeout whatever it waits for.
                item.deadline = now + item.timeout
                self._timeouts_at = min(self._timeouts_at, item.deadline)
                self._waiting.setdefault(item.key, deque()).append(item)
            for item, outcome in connected:
                with self._lock:
                    del self._connecting[id(item)]
                if isinstance(outcome, BaseException):
                    self._fail(item, outcome)
                elif time.monotonic() >= item.deadline:  # connected too late: never written
                    outcome.close()
                    self._fail(item, TimeoutError(f"no connection to its host within {item.timeout:g}s"))
                else:
                    self._write(outcome, False, item)
            for key in list(self._waiting):
                self._start_some(key)
            self._queued = sum(len(waiting) for waiting in self._waiting.values())
            if closing and not self._busy and not self._connecting and not any(self._waiting.values()):
                return
            self._wait_once()

    def _wait_once(self) -> None:
        now = time.monotonic()
        timeout = max(self._timeouts_at - now, 0.0) if self._busy and self._timeouts_at < float("inf") else None
        for key, events in self._selector.select(timeout):
            if key.data is None:
                try:
                    self._wake_r.recv(4096)
                except BlockingIOError:
                    pass
                continue
            busy = self._busy.get(key.fd)
            if busy is not None:
                self._writable(key.fd, busy) if busy.rest else self._readable(key.fd, busy)
        now = time.monotonic()
        if now >= self._timeouts_at:  # not at every answer: a pass looks at every request out
            self._end_timed_out(now)

    def _end_timed_out(self, now: float) -> None:
        """End the requests whose answers are overdue, and those still waiting for a
        connection of their host past their timeout (never written); note the next deadline."""
        nearest = float("inf")
        for fd, busy in list(self._busy.items()):
            if now >= busy.item.deadline:
                partial = parse_answer(bytes(busy.item.buffer), busy.item.read_limit, final=True)
                ended = partial[0] if isinstance(partial, tuple) else TimeoutError(
                    f"no answer within {busy.item.timeout:g}s")
                self._end(fd, busy, ended, reuse=False)
            elif busy.item.deadline < nearest:
                nearest = busy.item.deadline
        for waiting in self._waiting.values():  # for one of its host's connections to be free
            for item in [item for item in waiting if now >= item.deadline]:
                waiting.remove(item)
                _done_unwritten(item, TimeoutError(f"no connection to its host free within {item.timeout:g}s"))
            nearest = min([nearest, *(item.deadline for item in waiting)])
        self._timeouts_at = nearest

    def _start_some(self, key: PoolKey) -> None:
        waiting = self._waiting.get(key)
        while waiting and self._in_use.get(key, 0) < self.parallel:
            item = waiting.popleft()
            self._in_use[key] = self._in_use.get(key, 0) + 1
            conn = self.pool.take_idle(key, item.timeout)
            if conn is None:
                self._connect_elsewhere(item)
            else:
                self._write(conn, True, item)
        if waiting is not None and not waiting:
            del self._waiting[key]

    def _connect_elsewhere(self, item: Outgoing) -> None:
        """Open a connection for `item` on another thread (a connect waits on the host,
        and this thread writes every other host's requests); the new connection, or the
        error, comes back through the loop, which writes on it only before the request's
        deadline."""
        with self._lock:
            self._connecting[id(item)] = time.monotonic()

        def connect() -> None:
            outcome: http.client.HTTPConnection | BaseException
            try:
                outcome = self.pool.open(item.key, max(item.deadline - time.monotonic(), 0.001))
            except BaseException as error:  # refused, unresolvable, TLS, timeout: the attempt's
                outcome = error
            with self._lock:
                self._connected.append((item, outcome))
            self._wake_w.send(b"x")
        # A thread of its own, not `hand_off`'s senders: a connect must not queue behind
        # blocking sends to a slow host (it rarely happens: idle connections are reused).
        threading.Thread(target=connect, name="sundial-connect", daemon=True).start()

    def _fail(self, item: Outgoing, error: BaseException) -> None:
        """No connection could be had for `item` (its slot is free again)."""
        self._release(item.key)
        _done_unwritten(item, error)

    def _write(self, conn: http.client.HTTPConnection, reused: bool, item: Outgoing) -> None:
        """Check, then write as much as the socket takes; the rest when it is writable."""
        if reused and _dropped(conn):  # closed while idle: nothing of this request reached it
            conn.close()
            return self._connect_elsewhere(item)
        if not _ready(item):
            self._release(item.key, conn)
            _done(item, None)
            return
        sock = conn.sock
        sock.setblocking(False)
        self._timeouts_at = min(self._timeouts_at, item.deadline)
        try:
            sent = sock.send(item.data)
        except _LATER:
            sent = 0
        except _STALE as error:
            conn.close()
            if reused:  # as ConnectionPool.request: nothing reached the server, sent anew
                return self._connect_elsewhere(item)
            return self._fail_unsent(conn, item, error)
        except OSError as error:
            return self._fail_unsent(conn, item, error)
        busy = _Busy(conn, item, item.data[sent:])
        self._busy[sock.fileno()] = busy
        self.pool.in_flight.add(item.invocation, sock)
        self._selector.register(sock, selectors.EVENT_WRITE if busy.rest else selectors.EVENT_READ, busy)

    def _fail_unsent(self, conn: http.client.HTTPConnection, item: Outgoing, error: BaseException) -> None:
        conn.close()
        self._release(item.key)
        _done(item, error)

    def _writable(self, fd: int, busy: _Busy) -> None:
        try:
            sent = busy.conn.sock.send(busy.rest)
        except _LATER:
            return
        except OSError as error:
            return self._end(fd, busy, error, reuse=False)
        busy.rest = busy.rest[sent:]
        if not busy.rest:
            self._selector.modify(busy.conn.sock, selectors.EVENT_READ, busy)

    def _readable(self, fd: int, busy: _Busy) -> None:
        item = busy.item
        try:
            chunk = _receive(busy.conn.sock)
        except _LATER:
            return
        except OSError as error:
            return self._end(fd, busy, error, reuse=False)
        if not chunk:
            closed = http.client.RemoteDisconnected("Remote end closed connection without response")
            return self._end(fd, busy, closed if not item.buffer else _incomplete(item), reuse=False)
        item.buffer += chunk
        parsed = parse_answer(bytes(item.buffer), item.read_limit)
        if parsed is None:
            return  # more to come
        if isinstance(parsed, Complex):
            return self._hand_off(fd, busy)
        answer, reusable = parsed
        self._end(fd, busy, answer, reuse=reusable)

    def _hand_off(self, fd: int, busy: _Busy) -> None:
        """An answer this loop does not parse: read on another thread by http.client."""
        self._forget(fd, busy)
        self._release(busy.item.key)
        conn, item = busy.conn, busy.item

        def read() -> None:
            try:
                conn.sock.setblocking(True)
                response = bounded_response(conn.sock, item.method, deadline=item.deadline, head=bytes(item.buffer))
                response.begin()
                answer = _read_answer(conn.sock, response, item.deadline, item.read_limit)
            except BaseException as error:
                conn.close()
                _done(item, error)
                return
            conn.close()  # its reader holds bytes the connection no longer has
            _done(item, answer)
        self.hand_off(read)

    def _end(self, fd: int, busy: _Busy, outcome: Answer | BaseException, reuse: bool) -> None:
        self._forget(fd, busy)
        key = busy.item.key
        if reuse:
            busy.conn.sock.settimeout(busy.item.timeout)
            self._release(key, busy.conn)
        else:
            busy.conn.close()
            self._release(key)
        _done(busy.item, outcome)

    def _forget(self, fd: int, busy: _Busy) -> None:
        self._busy.pop(fd, None)
        self.pool.in_flight.remove(busy.item.invocation, busy.conn.sock)
        try:
            self._selector.unregister(busy.conn.sock)
        except (KeyError, ValueError):
            pass

    def _release(self, key: PoolKey, conn: http.client.HTTPConnection | None = None) -> None:
        """A connection of `key` is free: back to the pool (if given), and the next waits less."""
        self._in_use[key] = max(self._in_use.get(key, 1) - 1, 0)
        if conn is not None:
            self.pool.give_back(key, conn)


def _ready(item: Outgoing) -> bool:
    """The request's own check, right before it goes (or fails to)."""
    try:
        return item.ready()
    except BaseException:  # (ready() handles its own errors: this is a bug) not sent
        return False


def _done_unwritten(item: Outgoing, error: BaseException) -> None:
    """`item` ends without being written: a failed attempt if it may still go (its leases
    hold, as for a write), else not sent at all."""
    _done(item, error if _ready(item) else None)


def _receive(sock: socket.socket) -> bytes:
    """What the socket has now; with TLS, also what it decrypted beyond the first record
    (the selector only wakes for bytes still in the kernel)."""
    chunk = sock.recv(65536)
    if isinstance(sock, ssl.SSLSocket):
        while chunk and sock.pending():
            chunk += sock.recv(sock.pending())
    return chunk


def _done(item: Outgoing, outcome: Answer | BaseException | None) -> None:
    try:
        item.done(outcome)
    except Exception:  # the caller's: it must not end the writer and every later request
        logging.getLogger("sundial.dispatcher").exception("a staged request's result was lost")


def _incomplete(item: Outgoing) -> BaseException:
    return http.client.IncompleteRead(bytes(item.buffer))
