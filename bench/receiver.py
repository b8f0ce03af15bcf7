"""HTTP receivers for bench/server.py, and a load client to measure their ceiling.

`FastReceiver` is a minimal HTTP/1.1 server on asyncio (keep-alive, pipelining,
Content-Length bodies) that records, per request, its arrival time and the
X-Sundial-* headers, and answers `200 ok` at once. It keeps the receiver far
from being the bottleneck of a 1,000+/s burst: one event-loop thread, no thread
per connection, no per-request objects beyond one tuple.

A request to `/slow?ms=N` is answered N ms after it arrived instead (the overlap
scenario's target that outlasts its period). Both receivers count the calls of
each job still waiting for their answer, and keep the most seen at once per job
(`max_concurrency()`): an overlap policy that works keeps it at 1.

`ThreadedReceiver` is the same on `http.server.ThreadingHTTPServer` (HTTP/1.1,
a large listen backlog), for comparison (`--receiver threading`).

`python bench/receiver.py --client URL --threads N --seconds S [--kind raw|requests]`
hammers a receiver and prints `<requests> <seconds>`: it is run as a separate
process so that the client's GIL is not the receiver's.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


@dataclass(frozen=True)
class Arrival:
    at: float  # time.time() when the whole request was in
    job: str
    invocation: str
    scheduled_raw: str
    attempt: str

    @property
    def scheduled(self) -> float:
        return parse_rfc3339(self.scheduled_raw)


_parsed: dict[str, float] = {}


def parse_rfc3339(raw: str) -> float:
    value = _parsed.get(raw)
    if value is None:
        value = _parsed[raw] = datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    return value


class _Recorder:
    def __init__(self) -> None:
        self.raw: list[tuple] = []  # list.append is atomic under the GIL
        self._inflight: dict[bytes | str, int] = {}
        self._peak: dict[bytes | str, int] = {}
        self._lock = threading.Lock()  # the threaded receiver counts from many threads

    def began(self, job) -> None:
        with self._lock:
            now = self._inflight[job] = self._inflight.get(job, 0) + 1
            if now > self._peak.get(job, 0):
                self._peak[job] = now

    def ended(self, job) -> None:
        with self._lock:
            self._inflight[job] -= 1

    def max_concurrency(self) -> dict[str, int]:
        """The most calls of each job in flight at once (arrived, not yet answered)."""
        with self._lock:
            return {_s(job): peak for job, peak in self._peak.items()}

    def in_flight(self) -> int:
        with self._lock:
            return sum(self._inflight.values())

    def arrivals(self) -> list[Arrival]:
        out = []
        for at, job, invocation, scheduled, attempt in list(self.raw):
            out.append(Arrival(at, _s(job), _s(invocation), _s(scheduled), _s(attempt)))
        return out

    def count(self) -> int:
        return len(self.raw)

    def clear(self, drain: float = 10.0) -> None:
        """Forget what arrived. Calls still in flight (a slow path, a scheduler stopped
        mid-call) are first waited for, up to `drain` seconds: one left over from the
        previous run would count as a second concurrent call of its job in the next."""
        deadline = time.time() + drain
        while self.in_flight() and time.time() < deadline:
            time.sleep(0.05)
        self.raw = []
        with self._lock:
            self._peak = {job: count for job, count in self._inflight.items() if count}


def delay_of(target: bytes | str) -> float:
    """Seconds to wait before answering: `/slow?ms=N` waits N ms, anything else none."""
    target = _s(target)
    if not target.startswith("/slow"):
        return 0.0
    query = parse_qs(urlsplit(target).query)
    return int(query.get("ms", ["1000"])[0]) / 1000


def _s(value) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else (value or "")


# --- asyncio receiver ----------------------------------------------------------------


class _Protocol(asyncio.Protocol):
    def __init__(self, recorder: _Recorder) -> None:
        self.recorder = recorder
        self.buffer = b""
        self.transport = None
        self.answer_at = 0.0  # loop time of the last answer scheduled: answers keep request order

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            length, close = 0, False
            job = invocation = scheduled = attempt = b""
            lines = self.buffer[:end].split(b"\r\n")
            target = lines[0].split(b" ")[1] if lines[0].count(b" ") >= 2 else b"/"
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"connection":
                    close = value.strip().lower() == b"close"
                elif name.startswith(b"x-sundial-"):
                    value = value.strip()
                    if name == b"x-sundial-job":
                        job = value
                    elif name == b"x-sundial-invocation":
                        invocation = value
                    elif name == b"x-sundial-scheduled-time":
                        scheduled = value
                    elif name == b"x-sundial-attempt":
                        attempt = value
            total = end + 4 + length
            if len(self.buffer) < total:
                return
            self.buffer = self.buffer[total:]
            self.recorder.raw.append((time.time(), job, invocation, scheduled, attempt))
            self.recorder.began(job)
            delay = delay_of(target)
            loop = asyncio.get_running_loop()
            if delay or self.answer_at > loop.time():
                self.answer_at = max(self.answer_at, loop.time() + delay)
                loop.call_at(self.answer_at, self._answer, job, close)
            else:
                self._answer(job, close)
            if close:
                return

    def _answer(self, job: bytes, close: bool) -> None:
        self.recorder.ended(job)
        if self.transport.is_closing():
            return
        self.transport.write(RESPONSE)
        if close:
            self.transport.close()


class FastReceiver(_Recorder):
    def __init__(self, backlog: int = 4096) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.server = self.loop.run_until_complete(
                self.loop.create_server(lambda: _Protocol(self), "127.0.0.1", 0, backlog=backlog)
            )
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, name="receiver", daemon=True)
        self.thread.start()
        ready.wait(10)
        self.port = self.server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        def stop() -> None:
            self.server.close()
            self.loop.stop()

        self.loop.call_soon_threadsafe(stop)
        self.thread.join(5)


# --- threaded receiver -----------------------------------------------------------------


class ThreadedReceiver(_Recorder):
    def __init__(self, backlog: int = 4096) -> None:
        super().__init__()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: one thread per connection, not per request
            # Headers and body go out in separate writes: without TCP_NODELAY, Nagle and the
            # client's delayed ACK stall every keep-alive response by ~40 ms.
            disable_nagle_algorithm = True

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                h = self.headers
                job = h.get("X-Sundial-Job") or ""
                recorder.raw.append((time.time(), job, h.get("X-Sundial-Invocation"),
                                     h.get("X-Sundial-Scheduled-Time"), h.get("X-Sundial-Attempt")))
                recorder.began(job)
                time.sleep(delay_of(self.path))
                recorder.ended(job)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_GET = do_PUT = do_POST

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = backlog
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="receiver", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def make_receiver(kind: str):
    return FastReceiver() if kind == "asyncio" else ThreadedReceiver()


# --- load client ---------------------------------------------------------------------------

_HEADERS = {
    "X-Sundial-Job": "ceiling/probe",
    "X-Sundial-Invocation": "probe",
    "X-Sundial-Scheduled-Time": "2026-01-01T00:00:00.000Z",
    "X-Sundial-Attempt": "1",
    "Content-Type": "application/json",
}


def _raw_worker(host: str, port: int, path: str, deadline: float, counts: list, index: int) -> None:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    done = 0
    while time.perf_counter() < deadline:
        conn.request("POST", path, body=b"{}", headers=_HEADERS)
        response = conn.getresponse()
        response.read()
        done += 1
    conn.close()
    counts[index] = done


def _requests_worker(session, url: str, deadline: float, counts: list, index: int) -> None:
    done = 0
    while time.perf_counter() < deadline:
        with session.request("POST", url, data=b"{}", headers=_HEADERS, timeout=(10, 10),
                             allow_redirects=False, stream=True) as response:
            for _ in response.iter_content(256):
                pass
        done += 1
    counts[index] = done


def run_client(url: str, threads: int, seconds: float, kind: str) -> tuple[int, float]:
    parts = urlsplit(url)
    counts = [0] * threads
    began = time.perf_counter()
    deadline = began + seconds
    if kind == "requests":
        import requests
        from requests.adapters import HTTPAdapter

        session = requests.Session()
        session.trust_env = False
        adapter = HTTPAdapter(pool_connections=threads, pool_maxsize=threads, max_retries=0)
        session.mount("http://", adapter)
        workers = [threading.Thread(target=_requests_worker, args=(session, url + "/probe", deadline, counts, i))
                   for i in range(threads)]
    else:
        workers = [threading.Thread(target=_raw_worker,
                                    args=(parts.hostname, parts.port, "/probe", deadline, counts, i))
                   for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(counts), time.perf_counter() - began


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", required=True, metavar="URL")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--kind", choices=("raw", "requests"), default="raw")
    args = parser.parse_args()
    done, took = run_client(args.client, args.threads, args.seconds, args.kind)
    print(done, f"{took:.3f}")
