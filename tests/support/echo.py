"""A target that echoes the request it got: a real HTTP server on 127.0.0.1 whose answer
(200) is the request's path and the values of a few headers, one per line, with the
Authorization header last (a minted token is long: the short values come first, so that
all of them fall in the start of the answer an invocation's log keeps)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ECHOED = ("X-Vendor", "X-Auth-Token", "X-Sundial-Completion-Token", "Authorization")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "EchoServer"

    def _serve(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        got = {name: self.headers[name] for name in ECHOED if name in self.headers}
        with self.server.lock:
            self.server.received.append((self.path, got))
        body = "\n".join([f"path: {self.path}", *(f"{name}: {value}" for name, value in got.items())]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _serve

    def log_message(self, *args) -> None:
        pass


class EchoServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.received: list[tuple[str, dict[str, str]]] = []  # (path, echoed headers) of each request
        threading.Thread(target=self.serve_forever, args=(0.02,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()
