"""One thread that writes staged requests at their time and reads their answers, on
non-blocking sockets (selectors), instead of a sender thread per request.

A thousand requests due at one instant sent from 16-32 threads through http.client
took 150-270 ms to arrive on two cores, most of it threads handing the GIL to each
other and http.client's per-request objects; written from one thread as bytes encoded
ahead, on connections opened ahead, they took 30-45 ms (docs/PERFORMANCE.md, "One
writer at T"). So a staged request arrives here encoded (`encode_request`), and at its
time the writer, for each request in turn: takes a connection of its host (at most
`parallel` per host; a host's next request goes on the first connection that is free
again), runs the request's `ready()` check right before writing (the leases and the
job as stored now: the equivalent of the fence at the socket, `fence.py`), and writes.

Answers with a Content-Length are read here. Any other (chunked, no length, 1xx), and
every error, ends the request's use of the writer: `done` gets the Answer or the
error, the way `ConnectionPool.request` would have raised or returned it, and never
twice. A reused connection found closed before the write is replaced, and the request
written on the new one (nothing reached the server); an error after the write is the
attempt's.
"""

from __future__ import annotations

import http.client
import io
import logging
import selectors
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, cast

from engine.targets.http_pool import Answer, ConnectionPool, _dropped, _read_answer

PARALLEL = 64  # connections per host at once (the pool keeps as many idle)
_STALE = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


@dataclass(eq=False)
class Outgoing:
    key: tuple  # ConnectionPool.key_of
    data: bytes  # the whole request, encoded
    method: str
    timeout: float
    read_limit: int
    ready: Callable[[], bool]  # checked right before the write; False: not sent
    done: Callable[[Answer | BaseException | None], None]  # None: not sent (ready() said no)
    deadline: float = 0.0
    # Its timeout counted from when the writer took it in (its time): a request that
    # waits for a connection of its host still ends within its timeout (`_end_timed_out`).
    due_by: float = float("inf")
    buffer: bytearray = field(default_factory=bytearray)


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
        self._waiting: dict[tuple, deque[Outgoing]] = {}
        self._in_use: dict[tuple, int] = {}
        self._busy: dict[int, _Busy] = {}  # by socket fd
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
            return len(self._incoming) + self._queued

    def shutdown(self) -> None:
        """Finish what was submitted (answers or timeouts), then stop."""
        with self._lock:
            self._closing = True
        self._wake_w.send(b"x")
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while True:
            with self._lock:
                incoming, self._incoming = self._incoming, []
                self._queued += len(incoming)  # still counted: backlog() never dips to 0 meanwhile
                closing = self._closing
            now = time.monotonic()
            for item in incoming:
                item.due_by = now + item.timeout
                self._timeouts_at = min(self._timeouts_at, item.due_by)
                self._waiting.setdefault(item.key, deque()).append(item)
            for key in list(self._waiting):
                self._start_some(key)
            self._queued = sum(len(waiting) for waiting in self._waiting.values())
            if closing and not self._busy and not any(self._waiting.values()):
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
        connection past their timeout (never written); note the next deadline."""
        nearest = float("inf")
        for fd, busy in list(self._busy.items()):
            due = min(busy.item.deadline, busy.item.due_by)
            if now >= due:
                self._end(fd, busy, TimeoutError(f"no answer within {busy.item.timeout:g}s"), reuse=False)
            else:
                nearest = min(nearest, due)
        for waiting in self._waiting.values():
            for item in [item for item in waiting if now >= item.due_by]:
                waiting.remove(item)
                _done(item, TimeoutError(f"no connection to its host free within {item.timeout:g}s"))
            nearest = min([nearest, *(item.due_by for item in waiting)])
        self._timeouts_at = nearest

    def _start_some(self, key: tuple) -> None:
        waiting = self._waiting.get(key)
        while waiting and self._in_use.get(key, 0) < self.parallel:
            item = waiting.popleft()
            try:
                conn, reused = self.pool.take(key, item.timeout)
            except OSError as error:
                _done(item, error)
                continue
            self._in_use[key] = self._in_use.get(key, 0) + 1
            self._write(conn, reused, item)
        if waiting is not None and not waiting:
            del self._waiting[key]

    def _write(self, conn: http.client.HTTPConnection, reused: bool, item: Outgoing) -> None:
        """Check, then write as much as the socket takes; the rest when it is writable."""
        if reused and _dropped(conn):  # closed while idle: nothing of this request reached it
            conn.close()
            try:
                conn, reused = self.pool.open(item.key, item.timeout), False
            except OSError as error:
                self._release(item.key)
                _done(item, error)
                return
        try:
            go = item.ready()
        except BaseException:  # (ready() handles its own errors: this is a bug) not sent
            go = False
        if not go:
            self._release(item.key, conn)
            _done(item, None)
            return
        sock = conn.sock
        sock.setblocking(False)
        item.deadline = time.monotonic() + item.timeout
        self._timeouts_at = min(self._timeouts_at, item.deadline)
        try:
            sent = sock.send(item.data)
        except BlockingIOError:
            sent = 0
        except _STALE as error:
            if not reused:
                return self._fail_unsent(conn, item, error)
            conn.close()  # as ConnectionPool.request: sent anew on a new connection
            try:
                conn = self.pool.open(item.key, item.timeout)
                conn.sock.setblocking(False)
                sent = conn.sock.send(item.data)
                sock = conn.sock
            except OSError as again:
                return self._fail_unsent(conn, item, again)
        except OSError as error:
            return self._fail_unsent(conn, item, error)
        busy = _Busy(conn, item, item.data[sent:])
        self._busy[sock.fileno()] = busy
        self._selector.register(sock, selectors.EVENT_WRITE if busy.rest else selectors.EVENT_READ, busy)

    def _fail_unsent(self, conn: http.client.HTTPConnection, item: Outgoing, error: BaseException) -> None:
        conn.close()
        self._release(item.key)
        _done(item, error)

    def _writable(self, fd: int, busy: _Busy) -> None:
        try:
            sent = busy.conn.sock.send(busy.rest)
        except BlockingIOError:
            return
        except OSError as error:
            return self._end(fd, busy, error, reuse=False)
        busy.rest = busy.rest[sent:]
        if not busy.rest:
            self._selector.modify(busy.conn.sock, selectors.EVENT_READ, busy)

    def _readable(self, fd: int, busy: _Busy) -> None:
        item = busy.item
        try:
            chunk = busy.conn.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError as error:
            return self._end(fd, busy, error, reuse=False)
        if not chunk:
            closed = http.client.RemoteDisconnected("Remote end closed connection without response")
            return self._end(fd, busy, closed if not item.buffer else _incomplete(item), reuse=False)
        item.buffer += chunk
        parsed = _parse(bytes(item.buffer), item.read_limit)
        if parsed is None:
            return  # more to come
        if parsed is _COMPLEX:
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
                due = min(item.deadline, item.due_by)
                conn.sock.setblocking(True)
                replay = cast(socket.socket, _Replay(conn.sock, bytes(item.buffer), due))
                response = http.client.HTTPResponse(replay, method=item.method)
                response.begin()
                answer = _read_answer(conn.sock, response, due, item.read_limit)
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
        try:
            self._selector.unregister(busy.conn.sock)
        except (KeyError, ValueError):
            pass

    def _release(self, key: tuple, conn: http.client.HTTPConnection | None = None) -> None:
        """A connection of `key` is free: back to the pool (if given), and the next waits less."""
        self._in_use[key] = max(self._in_use.get(key, 1) - 1, 0)
        if conn is not None:
            self.pool.give_back(key, conn)


def _done(item: Outgoing, outcome: Answer | BaseException | None) -> None:
    try:
        item.done(outcome)
    except Exception:  # the caller's: it must not end the writer and every later request
        logging.getLogger("sundial.dispatcher").exception("a staged request's result was lost")


_COMPLEX = object()


def _parse(data: bytes, limit: int):
    """(Answer, reusable) for a complete answer with a Content-Length; None: incomplete;
    _COMPLEX: any other framing, for http.client to read."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None if len(data) < 65536 else _COMPLEX
    lines = data[:end].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        return _COMPLEX
    status = int(parts[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            return _COMPLEX
        headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length", "")
    if status < 200 or "transfer-encoding" in headers or not length.isdigit():
        return _COMPLEX
    body, total = data[end + 4:], int(length)
    if len(body) < min(total, limit):
        return None
    complete = total <= limit and len(body) == total
    close = headers.get("connection", "").lower() == "close" or parts[0] == "HTTP/1.0"
    answer = Answer(status, parts[2] if len(parts) > 2 else "", body[:limit], complete, headers.get("location"))
    return answer, complete and not close


def _incomplete(item: Outgoing) -> BaseException:
    return http.client.IncompleteRead(bytes(item.buffer))


class _Replay:
    """A socket for http.client.HTTPResponse whose first bytes were read already, and
    whose rest is read by `deadline` at the latest (a 100 Continue and then silence must
    not hold the reading thread past the request's timeout)."""

    def __init__(self, sock: socket.socket, head: bytes, deadline: float):
        self.sock, self.head, self.deadline = sock, head, deadline

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_ReplayRaw(self.sock, self.head, self.deadline))


class _ReplayRaw(io.RawIOBase):
    def __init__(self, sock: socket.socket, head: bytes, deadline: float):
        self.sock, self.head, self.deadline = sock, head, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.head:
            count = min(len(buffer), len(self.head))
            buffer[:count] = self.head[:count]
            self.head = self.head[count:]
            return count
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no whole answer before the deadline")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)
