"""More idle connections than select() can watch, against a real `serve` that holds
pooled connections to its targets: the process lives, /healthz answers within a second
while they are open and after, and the scheduler keeps delivering.

waitress's default loop is select(), which raises on a descriptor numbered 1024 or more
and so ended the whole process; `serve` runs waitress's poll() loop instead, and raises
its own open-file limit from the 1,024 it was started with to the hard limit (it says so).
"""

from __future__ import annotations

import os
import resource
import shutil
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from tests.e2e.support import Server, wait_until

IDLE_CONNECTIONS = 1100  # past 1,024 descriptors, with the server's own on top
STARTED_WITH = 1024  # the soft limit the server is started with, a distribution's default


class KeepAliveReceiver:
    """Answers every request with HTTP/1.1 keep-alive, so the server's sender keeps its
    connections open in its pool; records the arrival time per path."""

    def __init__(self):
        self.arrivals: dict[str, list[float]] = {}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.arrivals.setdefault(self.path, []).append(time.time())
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_GET = do_POST

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def since(self, path: str, moment: float) -> int:
        return sum(1 for at in list(self.arrivals.get(path, [])) if at > moment)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _room_for_sockets(wanted: int) -> None:
    """This test's own process needs a descriptor per connection too."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"the open-file hard limit {hard} is below the {wanted} this test needs")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def _soft_limit_of(pid: int) -> tuple[str, str]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return soft, hard
    raise AssertionError("no open-file limit in /proc")


def _descriptors(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:  # gone
        return 0


def _healthz_seconds(url: str) -> float:
    started = time.monotonic()
    assert requests.get(f"{url}/healthz", timeout=5).status_code == 200
    return time.monotonic() - started


@pytest.fixture
def receiver():
    running = KeepAliveReceiver()
    yield running
    running.close()


def test_more_than_1024_idle_connections_leave_the_server_serving(tmp_path, receiver):
    if shutil.which("prlimit") is None:
        pytest.skip("prlimit (util-linux) starts the server with a soft limit of 1,024")
    _room_for_sockets(IDLE_CONNECTIONS + 300)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard_text = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    configs = tmp_path / "configs"
    configs.mkdir()
    pooled = "".join(f"  - id: pooled-{i}\n    schedule: triggered\n    target: {{http: {{url: '{receiver.url}/"
                     f"pooled'}}}}\n" for i in range(6))
    (configs / "p.yaml").write_text(f"jobs:\n  - id: beat\n    schedule: every 1s\n    target: {{http: {{url: "
                                    f"'{receiver.url}/beat'}}}}\n" + pooled)
    server = Server(configs, tmp_path / "s.db", tmp_path / "s.log",
                    wrapper=("prlimit", f"--nofile={STARTED_WITH}:{hard_text}", "--")).start()
    sockets: list[socket.socket] = []
    try:
        pid = server.process.pid
        assert _soft_limit_of(pid)[0] == _soft_limit_of(pid)[1], "serve raises its soft limit to the hard one"
        assert f"open-file limit raised from {STARTED_WITH}" in server.log_path.read_text()
        for i in range(6):  # pooled keep-alive connections to the target, as a busy server holds
            assert server.call("POST", f"/api/v1/projects/p/jobs/pooled-{i}:trigger")[0] == 200
        assert wait_until(lambda: receiver.since("/pooled", 0) >= 6, timeout=15)
        for _ in range(IDLE_CONNECTIONS):
            conn = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the rest
            sockets.append(conn)
        opened = time.time()
        # The server has taken them all: its descriptors are past what select() can watch.
        assert wait_until(lambda: server.process.poll() is not None or _descriptors(pid) > IDLE_CONNECTIONS,
                          timeout=10)
        time.sleep(1.5)  # a select() loop would have met a descriptor >= 1024 by now
        assert server.process.poll() is None, "serve died: " + server.log_path.read_text()[-3000:]
        assert _descriptors(pid) > IDLE_CONNECTIONS
        assert _healthz_seconds(server.url) < 1.0
        assert wait_until(lambda: receiver.since("/beat", opened) >= 2, timeout=10), "the scheduler stopped"
        for conn in sockets:
            conn.close()
        time.sleep(0.5)
        assert _healthz_seconds(server.url) < 1.0  # and afterwards
    finally:
        for conn in sockets:
            conn.close()
        alive = server.process.poll() is None
        server.stop()
    assert alive
    assert "filedescriptor out of range" not in server.log_path.read_text()
