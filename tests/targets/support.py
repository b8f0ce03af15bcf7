"""Target test support: a real HTTP receiver on 127.0.0.1 that records every request
it gets, and a DeliveryRequest builder.

The path picks the answer, so one server serves every test:
  /status/<code>   answer <code> with body "answer <code>"
  /slow            wait until the test ends (or 5 s), then answer 200
  /redirect        302 to /status/200
  /redirect-to?code=C&url=U   C (default 302) to U
  /loop            302 to itself
  /big             500 with a 100 kB body
  /set-cookie      200 with a Set-Cookie header
  anything else    200 "ok"
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from engine.ports import DeliveryRequest

SCHEDULED = datetime(2018, 3, 22, 0, 9, tzinfo=timezone.utc)


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    client_port: int


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so the client's pool is exercised
    server: "Receiver"

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = dict(self.headers.items())
        self.server.record(Received(self.command, self.path, headers, body, self.client_address[1]))
        if self.path == "/slow":
            self.server.release.wait(5)
            self._answer(200, b"late")
        elif self.path == "/redirect":
            self._answer(302, b"", {"Location": "/status/200"})
        elif self.path == "/loop":
            self._answer(302, b"", {"Location": "/loop"})
        elif self.path.startswith("/redirect-to?"):
            query = parse_qs(urlsplit(self.path).query)
            self._answer(int(query.get("code", ["302"])[0]), b"", {"Location": query["url"][0]})
        elif self.path.startswith("/status/"):
            code = int(self.path.rsplit("/", 1)[1])
            self._answer(code, b"" if code == 204 else f"answer {code}".encode())
        elif self.path == "/set-cookie":
            self._answer(200, b"ok", {"Set-Cookie": "session=abc; Path=/"})
        elif self.path == "/big":
            self._answer(500, b"x" * 100_000)
        else:
            self._answer(200, b"ok")

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

    def _answer(self, code: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if code != 204:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args) -> None:  # keep test output clean
        pass


class Receiver(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 drops bursts of connects (1 s SYN retry)

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.release = threading.Event()
        self._lock = threading.Lock()
        self.requests: list[Received] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def record(self, received: Received) -> None:
        # The port may have served an earlier test's Sundial server, and the shared Cloud
        # Tasks emulator still dispatches that server's chain tasks to it: not this test's.
        if received.path.startswith("/internal/"):
            return
        with self._lock:
            self.requests.append(received)

    def handle_error(self, request, client_address) -> None:
        pass  # a client that timed out and hung up is expected here

    def __enter__(self) -> "Receiver":
        # A short poll interval: shutdown() waits for it, once per test.
        threading.Thread(target=self.serve_forever, args=(0.02,), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()


def delivery(url: str = "", **fields) -> DeliveryRequest:
    """A DeliveryRequest for an http target at `url`; `http` fields and request fields
    given as keyword arguments (http fields: method, headers, body, timeout, async_)."""
    http = {"url": url, "method": fields.pop("method", "POST")}
    for name in ("headers", "body", "timeout"):
        if name in fields:
            http[name] = fields.pop(name)
    if "async_" in fields:
        http["async"] = fields.pop("async_")
    defaults = dict(
        project="billing",
        job_id="exporter-hourly",
        invocation_id="inv-0001",
        scheduled_time=SCHEDULED,
        attempt=1,
        event_index=0,
        event_count=1,
    )
    return DeliveryRequest(target={"http": http}, **{**defaults, **fields})
