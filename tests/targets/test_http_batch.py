"""The batch writer of staged requests (engine/targets/http_batch.py) against a real
HTTP server on 127.0.0.1: answers read on its own thread or handed to http.client,
the check right before each write, a bounded number of connections per host."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.targets.http_batch import BatchWriter, Outgoing
from engine.targets.http_pool import Answer, ConnectionPool, encode_request, parse_endpoint


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        if self.path == "/hang":
            time.sleep(1.0)  # the client has given up by now
            self.close_connection = True
            return
        if self.path == "/continue":  # an interim answer, then nothing
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.wfile.flush()
            time.sleep(2.0)
            self.close_connection = True
            return
        if self.path == "/chunked":
            self.send_response(500)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
            return
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.paths = []  # type: ignore[attr-defined]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _send(server, paths: list[str], parallel: int = 4, ready=lambda: True, timeout: float = 5.0):
    pool = ConnectionPool()
    writer = BatchWriter(pool, parallel=parallel)
    writer.start()
    outcomes: list = []
    done = threading.Event()

    def finished(outcome):
        outcomes.append(outcome)
        if len(outcomes) == len(paths):
            done.set()
    items = []
    for path in paths:
        endpoint = parse_endpoint(f"http://127.0.0.1:{server.server_port}{path}")
        data = encode_request(endpoint, "POST", {"X-Test": "1"}, b"{}")
        items.append(Outgoing(pool.key_of(endpoint, None, "p"), data, "POST", timeout, 2000, ready, finished))
    writer.submit(items)
    assert done.wait(10)
    writer.shutdown()
    return outcomes, pool


def test_every_request_is_answered_on_at_most_parallel_connections(server):
    outcomes, pool = _send(server, ["/ok"] * 40, parallel=4)
    assert [(a.status, a.body, a.complete) for a in outcomes] == [(200, b"ok", True)] * 40
    assert len(server.paths) == 40 and pool.opened <= 4


def test_a_request_whose_check_says_no_is_not_written(server):
    outcomes, _ = _send(server, ["/ok"] * 3, ready=lambda: False)
    assert outcomes == [None] * 3 and server.paths == []


def test_an_answer_without_a_length_is_read_by_http_client(server):
    (answer,), _ = _send(server, ["/chunked"])
    assert isinstance(answer, Answer) and (answer.status, answer.body) == (500, b"hello world")


def test_no_answer_within_the_timeout_is_a_timeout(server):
    (outcome,), _ = _send(server, ["/hang"], timeout=0.2)
    assert isinstance(outcome, TimeoutError)


def test_requests_waiting_for_a_connection_of_their_host_time_out_from_their_own_time(server):
    """More requests to a host that never answers than the writer opens to it at once:
    each one's timeout counts from when the writer took it in (its time), so the ones
    that waited for a connection end with the first ones, not a whole timeout later."""
    began = time.monotonic()
    outcomes, _ = _send(server, ["/hang"] * 6, parallel=2, timeout=0.3)
    took = time.monotonic() - began
    assert all(isinstance(outcome, TimeoutError) for outcome in outcomes), outcomes
    assert took < 0.55, took  # (without: 0.3 s for each wave of 2, 0.9 s in all)
    assert len(server.paths) == 2  # the others were never written: nothing of them reached it


def test_an_interim_answer_and_then_silence_times_out_at_the_deadline(server):
    """A 100 Continue is read by http.client on another thread (not this loop's
    framing); that read stops at the request's deadline too."""
    began = time.monotonic()
    (outcome,), _ = _send(server, ["/continue"], timeout=0.3)
    assert isinstance(outcome, TimeoutError), outcome
    assert time.monotonic() - began < 0.8  # (without: until the server closes, 2 s)


def test_a_connection_that_comes_after_the_deadline_is_not_written_on(server):
    """A host slow to accept (here: a pool that takes 0.3 s to connect) for a request of
    0.1 s: the request fails as a timeout and never reaches the target, where writing it
    late would have the target act on an attempt recorded as failed."""

    class SlowToConnect(ConnectionPool):
        def open(self, key, timeout):
            time.sleep(0.3)
            return super().open(key, 5.0)

    pool = SlowToConnect()
    writer = BatchWriter(pool, parallel=4)
    writer.start()
    ended, outcomes = threading.Event(), []
    endpoint = parse_endpoint(f"http://127.0.0.1:{server.server_port}/ok")
    data = encode_request(endpoint, "POST", {}, b"{}")
    writer.submit([Outgoing(pool.key_of(endpoint, None, "p"), data, "POST", 0.1, 2000, lambda: True,
                            lambda outcome: (outcomes.append(outcome), ended.set()))])
    assert ended.wait(5)
    writer.shutdown()
    assert isinstance(outcomes[0], TimeoutError), outcomes
    time.sleep(0.2)
    assert server.paths == []
