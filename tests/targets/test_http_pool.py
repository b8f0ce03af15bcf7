"""The keep-alive pool against real sockets on 127.0.0.1: reuse, stale connections,
timeouts, TLS. Each server here is scripted per connection, so a test can close,
reset or stall a connection at exactly the moment it is about."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
import time

import pytest

import engine.targets.http_pool as http_pool
from engine.targets.http_pool import ConnectionPool, parse_endpoint

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class ScriptedServer:
    """Accepts connections; `script(conn, number)` serves each one on its own thread.
    Every request it reads is counted in `requests` (the first line of each)."""

    def __init__(self, script, wrap=None):
        self.script, self.wrap = script, wrap
        self.requests: list[bytes] = []
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, path: str = "/", scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            number = self.connections
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    def _serve(self, conn, number) -> None:
        try:
            if self.wrap is not None:
                conn = self.wrap(conn)
            self.script(self, conn, number)
        except OSError:
            pass
        finally:
            conn.close()

    def read_request(self, conn) -> bool:
        """Read one request (headers and a Content-Length body); False at EOF."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            body += conn.recv(65536)
        self.requests.append(head.split(b"\r\n")[0])
        return True

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def pool():
    made = ConnectionPool()
    yield made
    made.close()


def send(pool, url, timeout=2.0, limit=2000):
    return pool.request(parse_endpoint(url), "POST", {"X-Test": "1"}, b"{}", timeout, limit)


def keep_alive(server, conn, number):
    while server.read_request(conn):
        conn.sendall(OK)


def test_requests_reuse_one_connection(pool):
    server = ScriptedServer(keep_alive)
    for _ in range(5):
        answer = send(pool, server.url())
        assert (answer.status, answer.body, answer.complete) == (200, b"ok", True)
    assert (server.connections, pool.opened, len(server.requests)) == (1, 1, 5)
    server.close()


def test_connection_closed_by_the_server_while_idle_is_not_reused(pool):
    def one_per_connection(server, conn, number):
        if server.read_request(conn):
            conn.sendall(OK)  # keep-alive promised, then closed: an idle timeout
    server = ScriptedServer(one_per_connection)
    for _ in range(3):
        assert send(pool, server.url()).status == 200
        time.sleep(0.05)  # let the FIN arrive
    assert len(server.requests) == 3  # each sent exactly once
    assert server.connections == 3
    server.close()


def test_reset_on_send_of_a_reused_connection_is_sent_once_more(pool, monkeypatch):
    def reset_after_first(server, conn, number):
        if server.read_request(conn):
            conn.sendall(OK)
        if number == 1:  # then reset it, as a server dropping idle connections may
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            return
        keep_alive(server, conn, number)
    server = ScriptedServer(reset_after_first)
    assert send(pool, server.url()).status == 200
    time.sleep(0.1)
    # The race this covers: the reset comes after the pre-use check passed.
    monkeypatch.setattr(http_pool, "_dropped", lambda conn: False)
    assert send(pool, server.url()).status == 200
    assert len(server.requests) == 2  # the reset request never reached the server
    assert server.connections == 2
    server.close()


def test_no_resend_once_the_request_may_have_been_received(pool):
    def answer_first_then_drop_second(server, conn, number):
        if server.read_request(conn):
            conn.sendall(OK)
        server.read_request(conn)  # received, maybe acted on, then no answer
    server = ScriptedServer(answer_first_then_drop_second)
    assert send(pool, server.url()).status == 200
    with pytest.raises(OSError):  # http.client.RemoteDisconnected is one
        send(pool, server.url())
    time.sleep(0.1)
    assert len(server.requests) == 2  # never a third copy
    assert server.connections == 1
    server.close()


def test_a_server_that_never_answers_times_out(pool):
    stalled = threading.Event()

    def stall(server, conn, number):
        server.read_request(conn)
        stalled.wait(5)
    server = ScriptedServer(stall)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        send(pool, server.url(), timeout=0.3)
    assert time.monotonic() - started < 2
    stalled.set()
    server.close()


def test_an_answer_whose_head_trickles_in_times_out_at_the_deadline(pool):
    """A status line, then a byte of a header every 0.1 s: each read gets something well
    within the timeout, but the answer is never complete. The whole answer is bounded
    by the request's deadline, not each read by the timeout."""
    stopped = threading.Event()

    def trickle(server, conn, number):
        server.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        for _ in range(30):  # 3 s, then the connection closes
            if stopped.wait(0.1):
                return
            conn.sendall(b"X")
    server = ScriptedServer(trickle)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        send(pool, server.url(), timeout=0.5)
    assert time.monotonic() - started < 0.8  # (without: until the server stops)
    stopped.set()
    server.close()


def test_a_body_beyond_the_limit_is_cut_and_its_connection_dropped(pool):
    def big(server, conn, number):
        while server.read_request(conn):
            conn.sendall(b"HTTP/1.1 500 Oops\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100_000)
    server = ScriptedServer(big)
    first = send(pool, server.url(), limit=2000)
    assert (first.status, first.reason, len(first.body), first.complete) == (500, "Oops", 2000, False)
    send(pool, server.url(), limit=2000)
    assert server.connections == 2  # the unread rest made the first one unusable
    server.close()


def test_chunked_answers_keep_the_connection(pool):
    def chunked(server, conn, number):
        while server.read_request(conn):
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")
    server = ScriptedServer(chunked)
    for _ in range(3):
        answer = send(pool, server.url())
        assert (answer.body, answer.complete) == (b"ok", True)
    assert server.connections == 1
    server.close()


def test_url_parts():
    endpoint = parse_endpoint("https://u:p%40ss@Example.com/a b/ü?q=1 2#frag")
    assert (endpoint.scheme, endpoint.host, endpoint.port) == ("https", "example.com", 443)
    assert endpoint.target == "/a%20b/%C3%BC?q=1%202"
    assert endpoint.authorization == "Basic dTpwQHNz"  # u:p@ss
    assert parse_endpoint("http://h:8080").target == "/"
    for bad in ("", "ftp://h/", "http:///x", "http://h:99999/"):
        with pytest.raises(ValueError):
            parse_endpoint(bad)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_https_verifies_the_certificate(pool, tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = ScriptedServer(keep_alive, wrap=lambda conn: context.wrap_socket(conn, server_side=True))
    with pytest.raises(ssl.SSLCertVerificationError):
        send(pool, server.url(scheme="https"))
    assert server.requests == []
    trusting = ConnectionPool()
    trusting._tls.load_verify_locations(cert)  # the same check, with the test's CA trusted
    trusting._tls.check_hostname = False  # a self-signed cert for an IP has no SAN here
    try:
        assert send(trusting, server.url(scheme="https")).status == 200
        assert send(trusting, server.url(scheme="https")).status == 200
        assert server.connections == 2  # the refused handshake, then one kept-alive connection
    finally:
        trusting.close()
        server.close()


def test_a_lease_lost_before_the_write_sends_nothing_even_on_a_fresh_connection(pool):
    # The sender's last lease check sits at the socket (fence.py): a process stopped
    # between its first check and the write must not send on waking.
    from engine.targets.fence import LeaseLost, fenced
    server = ScriptedServer(keep_alive)
    leases = {"lost": ""}
    with fenced(lambda: leases["lost"]):
        assert send(pool, server.url()).status == 200  # held: sent
        leases["lost"] = "attempt"
        with pytest.raises(LeaseLost, match="attempt"):
            send(pool, server.url())  # the reused connection
        with pytest.raises(LeaseLost, match="attempt"):
            send(pool, server.url())  # the failed try closed that one: a fresh one, connected, never written
    assert send(pool, server.url()).status == 200  # outside a fence nothing is checked
    time.sleep(0.1)
    assert len(server.requests) == 2
    server.close()
