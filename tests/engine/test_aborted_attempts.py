"""Each process closes its requests whose invocation another process aborted
(engine/aborted_attempts.py): against a real TCP server that never answers, a request of
this process on the wire for longer than LONG is shut down once its invocation's row says
ABORTED, and left alone while it is running, or before it is LONG on the wire."""

from __future__ import annotations

import socket
import threading
import time
from datetime import datetime, timezone

from engine import aborted_attempts
from engine.aborted_attempts import AbortedAttempts
from engine.adapters.memory import build_memory_backend
from engine.ports import InvocationRow
from engine.targets.in_flight import InFlight, InvocationKey

KEY = InvocationKey("p", "j", "inv-1")


def _connected() -> tuple[socket.socket, threading.Event]:
    """A client socket to a server that reads until the end; the event is set then."""
    listener = socket.create_server(("127.0.0.1", 0))
    ended = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            while conn.recv(1024):
                pass
            ended.set()
        listener.close()
    threading.Thread(target=serve, daemon=True).start()
    client = socket.create_connection(listener.getsockname())
    client.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    return client, ended


def _stored(store, status: str) -> None:
    row = InvocationRow("p", "j", "inv-1", status, datetime(2026, 1, 1, tzinfo=timezone.utc), "manual")
    store.run_in_transaction(lambda tx: tx.put_invocation(row))


def test_a_long_request_aborted_elsewhere_is_closed_and_a_running_one_is_not():
    store, _ = build_memory_backend()
    in_flight = InFlight()
    now = [time.monotonic()]
    check = AbortedAttempts(store, in_flight, monotonic=lambda: now[0])
    client, ended = _connected()
    in_flight.add(KEY, client)
    _stored(store, "RUNNING")
    now[0] += aborted_attempts.LONG + 1  # long on the wire
    assert check.check() == 0 and not ended.wait(0.3)
    _stored(store, "ABORTED")
    assert check.check() == 1
    assert ended.wait(2) and in_flight.count() == 0
    client.close()


def test_a_short_request_is_not_asked_about():
    store, _ = build_memory_backend()
    in_flight = InFlight()
    client, ended = _connected()
    in_flight.add(KEY, client)
    _stored(store, "ABORTED")
    # Just registered: not LONG on the wire yet, so its row is not even read.
    assert AbortedAttempts(store, in_flight).check() == 0 and in_flight.count() == 1
    assert aborted_attempts.LONG >= 0.5
    client.close()


def test_more_long_requests_than_a_check_reads_are_each_asked_about_in_turn(monkeypatch):
    monkeypatch.setattr(aborted_attempts, "MOST", 2)
    store, _ = build_memory_backend()
    in_flight = InFlight()
    now = [time.monotonic()]
    check = AbortedAttempts(store, in_flight, monotonic=lambda: now[0])
    clients = []
    for index in range(5):
        client, _ended = _connected()
        clients.append(client)
        in_flight.add(InvocationKey("p", "j", f"inv-{index}"), client)
    row = InvocationRow("p", "j", "inv-4", "ABORTED", datetime(2026, 1, 1, tzinfo=timezone.utc), "manual")
    store.run_in_transaction(lambda tx: tx.put_invocation(row))  # the newest: asked about last
    now[0] += aborted_attempts.LONG + 1
    assert [check.check() for _ in range(3)] == [0, 0, 1]
    assert in_flight.count() == 4
    for client in clients:
        client.close()
