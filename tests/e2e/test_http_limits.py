"""The HTTP listener under abuse, through a real server: idle connections past
waitress's old limit of 100 do not stop it, a body past the limit is refused before it
is read (with or without Content-Length, before authentication), and JSON nested past
the documented depth is a 400 on every endpoint, the unauthenticated one included."""

from __future__ import annotations

import socket
import time

import pytest
import requests

from tests.e2e.support import Server

TOKENS = "tok-owner=user:owner@example.com"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("limits")
    configs = tmp / "configs"
    configs.mkdir()
    (configs / "p.yaml").write_text("acl: {owners: [user:owner@example.com]}\n"
                                    "jobs:\n  - id: j\n    schedule: triggered\n    target: {noop: {}}\n")
    running = Server(configs, tmp / "s.db", tmp / "s.log", env={"SUNDIAL_API_TOKENS": TOKENS}).start()
    yield running
    running.stop()


def test_many_slow_connections_do_not_stop_the_server(server):
    sockets = []
    try:
        for _ in range(150):  # waitress's default connection_limit was 100
            conn = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            sockets.append(conn)
        for round_ in range(2):  # trickle a header line, as a slowloris client does
            for conn in sockets:
                conn.sendall(b"X-a: b\r\n")
            started = time.monotonic()
            assert requests.get(f"{server.url}/healthz", timeout=5).status_code == 200
            assert time.monotonic() - started < 2
    finally:
        for conn in sockets:
            conn.close()


def _send_until_answered(head: bytes, chunk: bytes, total: int, port: int) -> tuple[int, bytes]:
    """Send `head`, then `chunk` until `total` bytes or the server answers: (sent, answer)."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    conn.sendall(head)
    conn.setblocking(False)
    sent, answer = 0, b""
    deadline = time.monotonic() + 20
    try:
        while sent < total and time.monotonic() < deadline:
            try:
                answer += conn.recv(65536)
                if answer:
                    break
            except BlockingIOError:
                pass
            try:
                sent += conn.send(chunk)
            except BlockingIOError:
                time.sleep(0.01)
            except OSError:  # the server closed the connection
                break
        conn.setblocking(True)
        conn.settimeout(5)
        while b"\r\n\r\n" not in answer:
            more = conn.recv(65536)
            if not more:
                break
            answer += more
    finally:
        conn.close()
    return sent, answer


TWENTY_MB = 20_000_000


def test_a_large_body_is_refused_before_it_is_read(server):
    head = (f"PUT /api/v1/projects/p/jobs/big HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {TWENTY_MB}\r\n\r\n").encode()
    sent, answer = _send_until_answered(head, b"x" * 65536, TWENTY_MB, server.port)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:100]
    assert sent < TWENTY_MB / 2


def test_a_large_chunked_body_is_refused_before_it_is_read(server):
    head = (b"PUT /api/v1/projects/p/jobs/big HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
    sent, answer = _send_until_answered(head, chunk, TWENTY_MB, server.port)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:100]
    assert sent < TWENTY_MB / 2


DEEP = '{"a":' + "[" * 100_000 + "]" * 100_000 + "}"


@pytest.mark.parametrize("method, path, authorized", [
    ("PUT", "/api/v1/projects/p/jobs/deep", True),
    ("POST", "/api/v1/projects/p/jobs/j:pause", True),
    ("POST", "/api/v1/projects/p/jobs/j/invocations/x:complete", False),
])
def test_deeply_nested_json_is_a_400(server, method, path, authorized):
    headers = {"Content-Type": "application/json", "X-Sundial-Completion-Token": "t"}
    if authorized:
        headers["Authorization"] = "Bearer tok-owner"
    answer = requests.request(method, server.url + path, data=DEEP, headers=headers, timeout=10)
    assert answer.status_code == 400, answer.text[:200]
    assert "nested more than 64 levels" in answer.json()["error"]["message"]
    assert "Traceback" not in server.log_path.read_text()
