"""End-to-end support: a real `main.py serve` process and a real HTTP receiver.

The receiver records every request with its arrival time and counts how many
requests of each job it is serving at once, so tests can check overlap
policies from the outside.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Arrival:
    path: str
    headers: dict
    body: str
    at: float  # time.time() on arrival

    @property
    def scheduled(self) -> float:
        return epoch(self.headers["X-Sundial-Scheduled-Time"])

    @property
    def lateness(self) -> float:
        return self.at - self.scheduled


class _DeepBacklogServer(ThreadingHTTPServer):
    request_queue_size = 128


@dataclass
class Receiver:
    """Answers POSTs; `delays[path]` seconds of work and `statuses[path]` answer per path."""

    delays: dict = field(default_factory=dict)
    statuses: dict = field(default_factory=dict)
    arrivals: list = field(default_factory=list)
    active: dict = field(default_factory=lambda: defaultdict(int))
    max_active: dict = field(default_factory=lambda: defaultdict(int))

    def __post_init__(self):
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                receiver._serve(self)

            do_GET = do_PUT = do_POST

            def log_message(self, *args):
                pass

        # A deep listen backlog: Sundial opens many connections at once ahead of a burst,
        # and a full backlog of 5 (the default) has the kernel drop connects for a second.
        self.server = _DeepBacklogServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def _serve(self, handler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length).decode() if length else ""
        arrival = Arrival(handler.path, dict(handler.headers), body, time.time())
        job = handler.headers.get("X-Sundial-Job", "")
        with self.lock:
            self.arrivals.append(arrival)
            self.active[job] += 1
            self.max_active[job] = max(self.max_active[job], self.active[job])
        try:
            time.sleep(self.delays.get(handler.path, 0))
            handler.send_response(self.statuses.get(handler.path, 200))
            handler.send_header("Content-Length", "2")
            handler.end_headers()
            handler.wfile.write(b"ok")
        finally:
            with self.lock:
                self.active[job] -= 1

    def at_path(self, path: str) -> list[Arrival]:
        with self.lock:
            return [a for a in self.arrivals if a.path == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Short chain timings so that repairs happen within a test's patience.
FAST_ENV = {
    "SUNDIAL_IMPORT_PERIOD": "1s",
    "SUNDIAL_WATCHDOG_PERIOD": "2s",
    "SUNDIAL_TICK_GRACE": "2s",
    "SUNDIAL_START_GRACE": "3s",
    "SUNDIAL_TASK_LEASE": "3s",
    "SUNDIAL_LATE_TOLERANCE": "5s",
    # One process unless a test asks for more (or the run does, SUNDIAL_PROCESSES=2): a
    # second per server would cost every end-to-end test a child's start-up.
    "SUNDIAL_PROCESSES": os.environ.get("SUNDIAL_PROCESSES", "1"),
}


class Server:
    """`python main.py serve` in a subprocess on a free port."""

    def __init__(self, configs: Path, db: Path, log: Path, env: dict | None = None, port: int | None = None,
                 wrapper: tuple[str, ...] = (), stderr_log: Path | None = None):
        """`stderr_log`: where stderr goes, apart from stdout (by default both go to `log`)."""
        self.configs, self.db, self.log_path, self.stderr_log = configs, db, log, stderr_log
        self.wrapper = wrapper  # a command the server runs under, e.g. setpriv
        self.port = port or free_port()
        self.env = {**os.environ, **FAST_ENV, **(env or {})}
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> "Server":
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [*self.wrapper, sys.executable, "main.py", "serve", "--port", str(self.port),
             "--db", str(self.db), "--configs", str(self.configs)],
            cwd=ROOT, env=self.env, stdout=log,
            stderr=open(self.stderr_log, "ab") if self.stderr_log else subprocess.STDOUT,
        )
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text()[-2000:]}")
            try:
                self.get("/healthz")
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"server did not start: {self.log_path.read_text()[-2000:]}")

    def get(self, path: str):
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return json.loads(response.read())

    def call(self, method: str, path: str, body=None, headers: dict | None = None) -> tuple[int, dict | None]:
        """Any request to the server: (status, JSON body or None), error answers included."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        return status, json.loads(raw) if raw else None

    def kill(self) -> None:
        """SIGKILL: no chance to clean up."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def invocations(self, project: str, job: str) -> list[dict]:
        """Every invocation of the job, oldest first."""
        rows, token = [], None
        while True:
            query = "?page_size=1000" + (f"&page_token={token}" if token else "")
            page = self.get(f"/api/v1/projects/{project}/jobs/{job}/invocations{query}")
            rows += page["invocations"]
            token = page["next_page_token"]
            if not token:
                return list(reversed(rows))


def settle(server: Server, configs: Path, jobs, timeout: float = 20, project: str = "e2e") -> bool:
    """Empty the project's file (no new occurrences) and wait until none of `jobs` has
    anything in flight; False if something still is after `timeout`."""
    (configs / f"{project}.yaml").write_text("jobs: []\n")

    def idle():
        # An invocation started by its tick is in its job's active list until its result is saved.
        return all(
            not server.get(f"/api/v1/projects/{project}/jobs/{job}")["active_invocations"]
            and all(row["status"] not in ("STARTING", "RUNNING") for row in server.invocations(project, job))
            for job in jobs
        )

    return bool(wait_until(idle, timeout=timeout))


def wait_until(condition, timeout: float, interval: float = 0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    return condition()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def epoch(rfc3339: str) -> float:
    """An RFC 3339 time as the API and the headers write it (`...Z`), in seconds since the epoch."""
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _instant(raw: str | None) -> float | None:
    return None if raw is None else epoch(raw)


def shown_staged(job: dict, t: float) -> bool:
    """Whether the API's Job shows its occurrence at `t` staged (committed ahead, nothing
    sent): SCHEDULED, its next run at `t`, and that invocation STARTING and not started."""
    last = job.get("last_invocation") or {}
    return (job["state"] == "SCHEDULED" and _instant(job["next_run_time"]) == t
            and last.get("status") == "STARTING" and last.get("started_time") is None
            and _instant(last.get("scheduled_time")) == t and last.get("id") in job["active_invocations"])
