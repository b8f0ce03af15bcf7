"""Keep-alive HTTP/1.1 connections on `http.client`, pooled per (scheme, host, port,
pinned address).

`requests` cost about 0.4 ms of CPU per delivery, a third of the embedded server's
budget; `http.client` with reused connections costs a fraction of that. The pool is
shared by every dispatcher thread: only taking and returning a connection holds its
lock, never the network.

A reused connection may have been closed by the server while it sat idle. Two
defences, and neither can send a request twice:
- before reuse, a connection that is readable (the server's FIN, or stray bytes) is
  discarded: an idle HTTP/1.1 connection has nothing to say;
- if sending on a reused connection still fails with a reset or a broken pipe, the
  server never got a whole request, so it is sent once more on a new connection.
  Any failure after the request was sent (no answer, a reset while reading) is the
  attempt's failure: the server may have acted on it.
"""

from __future__ import annotations

import base64
import http.client
import io
import re
import select
import socket
import ssl
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import partial
from typing import Callable
from urllib.parse import quote, unquote, urlsplit

from engine.targets.fence import check as check_fence
from engine.targets.in_flight import InFlight, InvocationKey

MAX_IDLE_PER_HOST = 64  # about the dispatcher's thread count
MAX_HOSTS = 64  # hosts whose idle connections are kept (least recently used go)
IDLE_SECONDS = 30.0  # an idle connection older than this is closed, not reused
_STALE_ON_SEND = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
# What requests' requote_uri leaves alone; everything else (spaces, non-ASCII) is escaped.
_URL_SAFE = "!#$%&'()*+,/:;=?@[]~"


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    target: str  # the request target: path and query, percent-encoded
    authorization: str | None  # Basic credentials from user:password@ in the URL


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    body: bytes  # at most the read limit, or less if the deadline came first
    complete: bool  # False when the body could not be read to its end
    location: str | None = None  # the Location header, for a redirect


def parse_endpoint(url: str) -> Endpoint:
    """:raises ValueError: not an http(s) URL with a host, or a bad port."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"url must be http(s)://host/..., got {url[:200]!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)  # .port raises on junk
    target = quote(parts.path or "/", safe=_URL_SAFE)
    if parts.query:
        target += "?" + quote(parts.query, safe=_URL_SAFE)
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
    return Endpoint(parts.scheme, parts.hostname, port, target, authorization)


PoolKey = tuple[str, str, int, str | None, str]  # key_of: scheme, host, port, address, owner


class ConnectionPool:
    """Idle connections by (scheme, host, port); thread-safe."""

    def __init__(self, max_idle_per_host: int = MAX_IDLE_PER_HOST, max_hosts: int = MAX_HOSTS):
        self.max_idle_per_host, self.max_hosts = max_idle_per_host, max_hosts
        self._idle: OrderedDict[PoolKey, list[tuple[float, http.client.HTTPConnection]]] = OrderedDict()
        self._lock = threading.Lock()
        self._tls = ssl.create_default_context()  # verifies certificates and host names
        self.opened = 0  # connections opened so far (tests read it)
        self.in_flight = InFlight()  # requests on the wire, by invocation, for aborts to close

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, OrderedDict()
        for conns in idle.values():
            for _, conn in conns:
                conn.close()

    def request(self, endpoint: Endpoint, method: str, headers: dict[str, str],
                body: bytes | None, timeout: float, read_limit: int, address: str | None = None,
                owner: str = "", invocation: InvocationKey | None = None) -> Answer:
        """Send one request and read at most `read_limit` bytes of the answer.

        With `address`, the connection goes to that IP address (the one the target
        check approved), never to whatever the host name resolves to by then: a DNS
        answer that changes after the check (rebinding) cannot redirect the request.
        TLS still verifies the certificate against the host name. Idle connections are
        kept per `owner` (the job's project): a connection one project left in a state it
        did not expect is never handed to another project. `invocation`: the request is an
        attempt of it, closed should it be aborted meanwhile (in_flight.py).

        :raises OSError: connecting, sending or reading failed (TimeoutError for a timeout).
        :raises http.client.HTTPException: the server's answer was not HTTP.
        :raises ValueError: a header or the method cannot be sent.
        """
        key = (endpoint.scheme, endpoint.host, endpoint.port, address, owner)
        deadline = time.monotonic() + timeout
        conn, reused = self._take(key, timeout)
        sock: socket.socket | None = None
        try:
            try:
                _write(conn, method, endpoint.target, body, headers)
            except _STALE_ON_SEND:
                if not reused:
                    raise
                conn.close()  # closed while idle: nothing reached the server; send it anew
                conn, reused = self._open(key, timeout), False
                _write(conn, method, endpoint.target, body, headers)
            sock = conn.sock  # getresponse() forgets it when the server will close
            self.in_flight.add(invocation, sock)
            # The status line and headers are read against the deadline too: a server
            # that trickles them a byte at a time cannot hold the attempt past its timeout.
            conn.response_class = partial(bounded_response, deadline=deadline)  # type: ignore[assignment]
            response = conn.getresponse()
            answer = _read_answer(sock, response, deadline, read_limit)
        except BaseException:
            conn.close()
            raise
        finally:
            self.in_flight.remove(invocation, sock)
        if answer.complete and not response.will_close and conn.sock is not None:
            self._give_back(key, conn)
        else:
            conn.close()  # an unread rest of the body would be read as the next answer
        return answer

    # --- for the batch writer (http_batch.py): connections by key, opened ahead --------

    @staticmethod
    def key_of(endpoint: Endpoint, address: str | None, owner: str) -> PoolKey:
        return (endpoint.scheme, endpoint.host, endpoint.port, address, owner)

    def take_idle(self, key: PoolKey, timeout: float) -> http.client.HTTPConnection | None:
        """An idle connection still open, or None: never connects (the batch writer's
        thread must not wait on a host that is slow to accept)."""
        now = time.monotonic()
        while True:
            with self._lock:
                conns = self._idle.get(key)
                taken = conns.pop() if conns else None
            if taken is None:
                return None
            idle_since, conn = taken
            if now - idle_since > IDLE_SECONDS or _dropped(conn):
                conn.close()
                continue
            conn.timeout = timeout
            conn.sock.settimeout(timeout)
            return conn

    def open(self, key: PoolKey, timeout: float) -> http.client.HTTPConnection:
        return self._open(key, timeout)

    def give_back(self, key: PoolKey, conn: http.client.HTTPConnection) -> None:
        self._give_back(key, conn)

    def warm(self, key: PoolKey, timeout: float, most: int) -> None:
        """Open one connection for `key` ahead of need, unless `most` are idle already.

        :raises OSError: connecting failed.
        """
        with self._lock:
            idle = len(self._idle.get(key) or ())
        if idle < min(most, self.max_idle_per_host):
            self._give_back(key, self._open(key, timeout))

    def _take(self, key: PoolKey, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        conn = self.take_idle(key, timeout)
        return (conn, True) if conn is not None else (self._open(key, timeout), False)

    def _open(self, key: PoolKey, timeout: float) -> http.client.HTTPConnection:
        scheme, host, port, address, _ = key
        conn: http.client.HTTPConnection
        if scheme == "https":
            conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=self._tls)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        if address is not None:
            # Connect to the address that was checked, not to what the name resolves to now.
            setattr(conn, "_create_connection", _connect_to(address))
        # Connect here, so that a failure inside request() can only be a send failure.
        conn.connect()
        self.opened += 1
        return conn

    def _give_back(self, key: PoolKey, conn: http.client.HTTPConnection) -> None:
        evicted: list[http.client.HTTPConnection] = []
        with self._lock:
            conns = self._idle.setdefault(key, [])
            self._idle.move_to_end(key)
            if len(conns) < self.max_idle_per_host:
                conns.append((time.monotonic(), conn))
            else:
                evicted.append(conn)
            while len(self._idle) > self.max_hosts:
                evicted.extend(c for _, c in self._idle.popitem(last=False)[1])
        for extra in evicted:
            extra.close()


def _write(conn: http.client.HTTPConnection, method: str, target: str, body: bytes | None,
           headers: dict[str, str]) -> None:
    """Connect if need be, check the sender's lease (fence.py) last, then write the request."""
    if conn.sock is None:
        conn.connect()
    check_fence()
    conn.request(method, target, body=body, headers=headers)


def _connect_to(address: str) -> Callable[..., socket.socket]:
    """http.client's connection factory, with the host name replaced by `address`."""
    def create(host_and_port: tuple[str, int], timeout: float | None = socket.getdefaulttimeout(),
               source_address: tuple[str, int] | None = None) -> socket.socket:
        return socket.create_connection((address, host_and_port[1]), timeout, source_address)
    return create


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle connection was closed by the server (or is otherwise unusable)."""
    sock = conn.sock
    if sock is None:
        return True
    poller = select.poll()  # not select(): descriptors above 1023 are fine here
    try:
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


def _read_answer(sock: socket.socket, response: http.client.HTTPResponse, deadline: float, limit: int) -> Answer:
    """Read up to `limit` bytes of the body, stopping at `deadline` too, so that a huge
    or trickling body costs neither memory nor a dispatcher thread's time."""
    body = b""
    try:
        while len(body) < limit:
            left = deadline - time.monotonic()
            if left <= 0:
                return Answer(response.status, response.reason, body, False, response.getheader("Location"))
            sock.settimeout(left)
            chunk = response.read1(limit - len(body))
            if not chunk:
                break
            body += chunk
    except (OSError, http.client.HTTPException):
        # The status already decided the outcome; a body that fails to arrive only
        # shortens the log.
        return Answer(response.status, response.reason, body, False, response.getheader("Location"))
    # read1() leaves a fully read fixed-length body open; closing the response
    # frees the connection for its next request (the socket stays open).
    complete = response.isclosed() or response.length == 0
    response.close()
    return Answer(response.status, response.reason, body, complete, response.getheader("Location"))


def bounded_response(sock: socket.socket, method: str | None = None, *, deadline: float,
                     head: bytes = b"") -> http.client.HTTPResponse:
    """An HTTPResponse that reads `sock` (after `head`, bytes already read from it) only
    until `deadline` (time.monotonic()); past it a read raises TimeoutError."""
    return http.client.HTTPResponse(_Bounded(sock, head, deadline), method=method)  # type: ignore[arg-type]


class _Bounded:
    """A socket as HTTPResponse uses it (only makefile), its reads bounded by a deadline."""

    def __init__(self, sock: socket.socket, head: bytes, deadline: float):
        self.raw = _BoundedRaw(sock, head, deadline)

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(self.raw)


class _BoundedRaw(io.RawIOBase):
    def __init__(self, sock: socket.socket, head: bytes, deadline: float):
        self.sock, self.head, self.deadline = sock, head, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]  # RawIOBase's Buffer
        if self.head:
            count = min(len(buffer), len(self.head))
            buffer[:count] = self.head[:count]
            self.head = self.head[count:]
            return count
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


class _Encoder(http.client.HTTPConnection):
    """http.client's own request encoding (validation, Host, Content-Length), captured
    as bytes instead of written: a staged request is encoded ahead of its time."""

    def __init__(self, endpoint: Endpoint):
        super().__init__(endpoint.host, endpoint.port)
        self.default_port = 443 if endpoint.scheme == "https" else 80  # Host omits the default port
        self.captured: list[bytes] = []

    def send(self, data: bytes | bytearray) -> None:  # type: ignore[override]  # only bytes reach it here
        self.captured.append(bytes(data))


def encode_request(endpoint: Endpoint, method: str, headers: dict[str, str], body: bytes | None) -> bytes:
    """The bytes `ConnectionPool.request` would write for this request.

    :raises ValueError: a header or the method cannot be sent.
    """
    plain = _encode_plain(endpoint, method, headers, body)
    if plain is not None:
        return plain
    encoder = _Encoder(endpoint)
    try:
        encoder.request(method, endpoint.target, body=body, headers=headers)
    except http.client.HTTPException as error:
        raise ValueError(str(error)) from error
    return b"".join(encoder.captured)


# What http.client refuses, by its own tests (a request it would refuse is never encoded
# here: it goes to _Encoder, which raises as http.client does).
_PLAIN_HOST = re.compile(r"[A-Za-z0-9.-]+").fullmatch
_BAD_IN_METHOD = re.compile("[\x00-\x1f]").search
_BAD_IN_PATH = re.compile("[\x00-\x20\x7f]").search
_LEGAL_NAME = re.compile(rb"[^:\s][^:\r\n]*").fullmatch
_ILLEGAL_VALUE = re.compile(rb"\n(?![ \t])|\r(?![ \t\n])").search
_METHODS_WITH_BODY = frozenset({"PATCH", "POST", "PUT"})


def _encode_plain(endpoint: Endpoint, method: str, headers: dict[str, str], body: bytes | None) -> bytes | None:
    """http.client's bytes for the common request (an ASCII host name or IPv4 address, a
    path, str header values it accepts), built without an HTTPConnection per request;
    None for anything else, which _Encoder encodes (or refuses) as http.client does."""
    url = endpoint.target or "/"
    if (url.startswith("http") or not url.isascii() or _BAD_IN_PATH(url) or not method.isascii()
            or _BAD_IN_METHOD(method) or not _PLAIN_HOST(endpoint.host)):
        return None
    lower = {name.lower() for name in headers}
    if lower & {"host", "content-length", "transfer-encoding"}:
        return None
    default_port = 443 if endpoint.scheme == "https" else 80
    host = endpoint.host if endpoint.port == default_port else f"{endpoint.host}:{endpoint.port}"
    lines = [f"{method} {url} HTTP/1.1".encode("ascii"), b"Host: " + host.encode("ascii")]
    if "accept-encoding" not in lower:
        lines.append(b"Accept-Encoding: identity")
    length = len(body) if body is not None else 0 if method.upper() in _METHODS_WITH_BODY else None
    if length is not None:
        lines.append(b"Content-Length: %d" % length)
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str) or not name.isascii():
            return None
        try:
            encoded = value.encode("latin-1")
        except UnicodeEncodeError:
            return None
        raw = name.encode("ascii")
        if not _LEGAL_NAME(raw) or _ILLEGAL_VALUE(encoded):
            return None
        lines.append(raw + b": " + encoded)
    lines += [b"", b""]
    message = b"\r\n".join(lines)
    return message + body if body is not None else message
