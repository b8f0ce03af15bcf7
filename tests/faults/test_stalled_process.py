"""Fault 7: a process stalls past its leases (SIGSTOP) while it holds attempts
committed as starting and not yet sent, and then goes on (SIGCONT).

Two `serve` processes on one SQLite database (and, in long runs, one `serve
--processes 2`: a server and a child dispatcher), 30 `overlap: skip` jobs every second
against a target that takes 200 ms. The receiver freezes whichever process sent the
first call of a second right at that call, while the rest of that process's batch
is still on its way out, and lets it go on once every lease it held has run out
(the other process has settled its attempts meanwhile and retried them under the
same invocation ids). The receiver counts the moments where one invocation, or one
job, has two calls in flight at once: `overlap: skip` promises none. The woken
process must give up what it no longer holds instead of sending it
(docs/RELIABILITY.md, "A process that stalls past its leases")."""

from __future__ import annotations

import os
import signal
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.e2e.support import Arrival, Server, wait_until
from tests.faults.servers import PROJECT, FlakyReceiver, account, settle
from tests.faults.support import SEED, report, scaled
from tests.support.cloud_stores import LONG_RUN
from tests.support.records import RecordWatch

# Alone on the machine: what a woken process may still send is what it had between its
# last lease check and the write, and a loaded machine (the other test worker) stretches
# that window by the wait for the interpreter lock (docs/RELIABILITY.md); the count this
# trial asserts is the one for a process that gets its core.
pytestmark = pytest.mark.serial

JOBS = 30
WORK = 0.2  # seconds the target takes per call
# Short leases, so that a stall past all of them takes seconds: heartbeat timeout 2 s
# (4 periods), an attempt's lease 1 s + SUNDIAL_START_GRACE 3 s, a task's 3 s. Eight
# senders for 30 calls of 200 ms: most of a second's attempts wait, committed as
# starting, for a sender, which is when the freeze comes.
ENV = {"SUNDIAL_HEARTBEAT_PERIOD": "500ms", "SUNDIAL_START_GRACE": "3s", "SUNDIAL_TASK_LEASE": "3s",
       "SUNDIAL_WORKERS": "8"}
STALL = 5.0  # longer than every lease above


def stall_config(url: str) -> tuple[str, dict[str, str]]:
    lines, paths = ["jobs:"], {}
    for n in range(JOBS):
        job_id = f"job-{n:02d}"
        paths[job_id] = f"/slow/{job_id}"
        lines.append(
            f"  - id: {job_id}\n"
            f"    schedule: \"* * * * * ?\"\n"
            f"    overlap: skip\n"
            f"    catchup: {{policy: none, window: 1h}}\n"
            f"    retry: {{max_attempts: 3, min_backoff: 100ms, max_backoff: 300ms}}\n"
            f"    target: {{http: {{url: {url}{paths[job_id]}, timeout: 1s}}}}"
        )
    return "\n".join(lines) + "\n", paths


def sender_pid(client_port: int, pids: list[int]) -> int | None:
    """Which of `pids` owns the local TCP socket on `client_port` (from /proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == client_port:
                inodes.add(f"socket:[{fields[9]}]")
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return pid
            except OSError:
                continue
    return None


class StallingReceiver(FlakyReceiver):
    """Takes WORK seconds per call, counts calls in flight per invocation and per job,
    and, once armed, freezes the process that sends the next call."""

    def __init__(self, seed: int):
        super().__init__(seed)
        self.in_flight: dict[str, int] = defaultdict(int)
        self.doubles: list[str] = []  # a call that found another of its invocation or job in flight
        self.pids: list[int] = []
        self.armed = False
        self.frozen: int | None = None

    def _serve(self, handler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length).decode() if length else ""
        invocation = handler.headers.get("X-Sundial-Invocation", "")
        keys = (f"invocation {invocation}", f"job {handler.headers.get('X-Sundial-Job', '')}")
        with self.lock:
            if self.armed:
                self._freeze_sender(handler.client_address[1])
            self.arrivals.append(Arrival(handler.path, dict(handler.headers), body, time.time()))
            for key in keys:
                self.in_flight[key] += 1
                if self.in_flight[key] > 1:
                    self.doubles.append(f"{key} (attempt {handler.headers.get('X-Sundial-Attempt')})"
                                        f" at {time.time():.3f}")
        try:
            time.sleep(WORK)
            handler.send_response(200)
            handler.send_header("Content-Length", "2")
            handler.end_headers()
            handler.wfile.write(b"ok")
        finally:
            with self.lock:
                for key in keys:
                    self.in_flight[key] -= 1

    def _freeze_sender(self, client_port: int) -> None:
        # Both stop at once, so the sender's batch stops where it is; the other goes
        # on as soon as we know which one sent.
        self.armed = False
        for pid in self.pids:
            os.kill(pid, signal.SIGSTOP)
        self.frozen = sender_pid(client_port, self.pids)
        for pid in self.pids:
            if pid != self.frozen:
                os.kill(pid, signal.SIGCONT)


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _next_second(offset: float) -> None:
    """Sleep until `offset` past the next whole second (when the jobs' calls are out)."""
    now = time.time()
    wait = int(now) + 1 + offset - now
    # A negative offset may be past already (now within it of the next second): the one after.
    time.sleep(wait if wait >= 0 else wait + 1)


TWO_SERVES = "two serves"
CHILDREN = "serve --processes 2"
LAYOUTS = [TWO_SERVES, pytest.param(CHILDREN, marks=pytest.mark.skipif(
    not LONG_RUN, reason="a second layout of a slow trial: set SUNDIAL_FAULTS_SCALE"))]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_process_woken_after_its_leases_sends_nothing_stale(tmp_path, layout):
    stalls = scaled(1)
    receiver = StallingReceiver(SEED + 7)
    configs = tmp_path / "configs"
    configs.mkdir()
    text, paths = stall_config(receiver.url)
    (configs / f"{PROJECT}.yaml").write_text(text)
    db = tmp_path / "sundial.db"
    if layout == TWO_SERVES:
        # One process each, whatever the run's SUNDIAL_PROCESSES: the layout is two of them.
        servers = [Server(configs, db, tmp_path / f"server-{n}.log", {**ENV, "SUNDIAL_PROCESSES": "1"})
                   for n in range(2)]
    else:  # the child logs to its parent's output
        servers = [Server(configs, db, tmp_path / "server-0.log", {**ENV, "SUNDIAL_PROCESSES": "2"})]
    records = RecordWatch.of_sqlite(db)
    frozen_logs = []
    try:
        for server in servers:
            server.start()
        records.every(0.5)
        time.sleep(2)  # both dispatching
        receiver.pids = [pid for server in servers for pid in (server.process.pid, *_children(server.process.pid))]
        assert len(receiver.pids) == 2, receiver.pids
        for _ in range(stalls):
            _next_second(-0.05)
            with receiver.lock:
                receiver.armed = True
            assert wait_until(lambda: receiver.frozen is not None, timeout=5, interval=0.01), "nobody sent"
            frozen = receiver.frozen
            frozen_logs.append(next((s.log_path for s in servers if s.process.pid == frozen), servers[0].log_path))
            time.sleep(STALL)
            _next_second(0.02)  # it wakes while the other process's calls of this second are out
            os.kill(frozen, signal.SIGCONT)
            receiver.frozen = None
            time.sleep(3)
        records.stop()
        settle(servers[0], configs, list(paths))
        result = account(servers[-1], receiver, paths, {job: 1 for job in paths})
        given_up = sum(log.read_text().count('"message": "lease ran out; work given up"') for log in set(frozen_logs))
        stale = sum(s.log_path.read_text().count('"message": "stale result dropped"') for s in servers)
        report(f"a process stalled past its leases ({layout})", "sqlite",
               {**result.counts(), "stalls": stalls, "double_in_flight": len(receiver.doubles),
                "given_up_on_waking": given_up, "stale_results_dropped": stale}, records)
        problems = result.problems()
        assert not problems, f"{len(problems)} problems, first: {problems[:10]}"
        assert not receiver.doubles, f"{len(receiver.doubles)} calls overlapped: {receiver.doubles[:10]}"
    finally:
        for pid in receiver.pids:  # never leave one stopped
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        records.close()
        for server in servers:
            server.stop()
        receiver.close()
