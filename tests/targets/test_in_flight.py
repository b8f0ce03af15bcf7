"""Closing an aborted invocation's requests on the wire (engine/targets/in_flight.py),
against a real TCP server on 127.0.0.1 that reads each request and never answers: the
blocking pool's request and the batch writer's both end at once with a connection error
when their invocation's attempts are closed, and the server sees the end of its input."""

from __future__ import annotations

import http.client
import socket
import threading
import time

import pytest

from engine.targets.http_batch import BatchWriter, Outgoing
from engine.targets.http_pool import ConnectionPool, encode_request, parse_endpoint
from engine.targets.in_flight import InvocationKey

KEY = InvocationKey("p", "j", "inv-1")


class Silent:
    """Accepts, reads a request, never answers; `dropped` is set when the client's side ends."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.arrived, self.dropped = threading.Event(), threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    self.dropped.set()
                    return
                self.arrived.set()


@pytest.fixture
def silent():
    server = Silent()
    yield server
    server.listener.close()


class Closer(threading.Thread):
    """Closes the invocation's requests once the server has one; `closed`: what that returned."""

    def __init__(self, server: Silent, pool: ConnectionPool) -> None:
        super().__init__(daemon=True)
        self.server, self.pool, self.closed = server, pool, []

    def run(self) -> None:
        assert self.server.arrived.wait(5)
        time.sleep(0.1)  # the request is registered once written
        self.closed.append(self.pool.in_flight.close_attempts("p", "j", "inv-1"))

    def result(self) -> list[int]:
        self.join(5)
        return self.closed


def _close_when_arrived(server: Silent, pool: ConnectionPool) -> Closer:
    closer = Closer(server, pool)
    closer.start()
    return closer


def test_the_blocking_pools_request_is_closed(silent):
    pool = ConnectionPool()
    endpoint = parse_endpoint(f"http://127.0.0.1:{silent.port}/x")
    closed = _close_when_arrived(silent, pool)
    started = time.monotonic()
    with pytest.raises((OSError, http.client.HTTPException)):
        pool.request(endpoint, "POST", {}, b"{}", 20.0, 1000, invocation=KEY)
    assert time.monotonic() - started < 3
    assert closed.result() == [1] and silent.dropped.wait(2) and pool.in_flight.count() == 0


def test_the_batch_writers_request_is_closed(silent):
    pool = ConnectionPool()
    writer = BatchWriter(pool, parallel=2)
    writer.start()
    endpoint = parse_endpoint(f"http://127.0.0.1:{silent.port}/x")
    outcomes: list = []
    done = threading.Event()
    item = Outgoing(pool.key_of(endpoint, None, "p"), encode_request(endpoint, "POST", {}, b"{}"), "POST", 20.0,
                    1000, lambda: True, lambda outcome: (outcomes.append(outcome), done.set()), invocation=KEY)
    closed = _close_when_arrived(silent, pool)
    started = time.monotonic()
    writer.submit([item])
    assert done.wait(5) and time.monotonic() - started < 3
    assert isinstance(outcomes[0], BaseException)
    assert closed.result() == [1] and silent.dropped.wait(2) and pool.in_flight.count() == 0
    writer.shutdown(1)


def test_another_invocations_request_is_left_alone(silent):
    pool = ConnectionPool()
    endpoint = parse_endpoint(f"http://127.0.0.1:{silent.port}/x")
    closed: list[int] = []
    threading.Timer(0.3, lambda: closed.append(pool.in_flight.close_attempts("p", "j", "other"))).start()
    started = time.monotonic()
    with pytest.raises(TimeoutError):  # it ran to its own timeout
        pool.request(endpoint, "POST", {}, b"{}", 1.0, 1000, invocation=KEY)
    assert time.monotonic() - started >= 0.9 and closed == [0]
