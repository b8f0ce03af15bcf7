"""A process frozen (SIGSTOP) while it holds the database's write lock costs the other
process a bounded pause and none of its work (docs/RELIABILITY.md, "A process frozen
holding the write lock").

A real `serve` and, beside it on the same database, a second registered process (a
dispatcher, as a child of `serve --processes 2` is) that takes the write lock and
freezes itself inside its transaction. The test lets it go on after STALL seconds,
far past the heartbeat timeout. Measured: how long the serve's API write takes to
answer while the lock is held (503 with Retry-After, not a hang), and how long after
the holder lets go its writes and deliveries resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engine.adapters.local.write_lock import LOCK_WAIT
from tests.e2e.support import FAST_ENV, ROOT, Receiver, Server, wait_until
from tests.faults.support import SCALE

# Its figures are pauses: alone on the machine, so about 21 s of the suite's wall time; a
# long run, behind SUNDIAL_FAULTS_SCALE. Its rules are held in `make test` by
# tests/local/test_lock_bound.py and tests/local/test_liveness_under_stall.py.
pytestmark = [pytest.mark.serial,
              pytest.mark.skipif(SCALE < 2, reason="a frozen lock holder end to end (about 21 s, alone): "
                                                   "set SUNDIAL_FAULTS_SCALE=2")]

# A stall of STALL seconds is well past the heartbeat timeout; the timeout exceeds the
# period plus the write lock's bound, as a waiting process's heartbeats come that far apart.
ENV = {"SUNDIAL_HEARTBEAT_PERIOD": "500ms", "SUNDIAL_HEARTBEAT_TIMEOUT": "5s"}
STALL = 12.0
PROJECT, JOB = "e2e", "ticker"
TRIGGERED = "on-demand"


def _holder(configs: Path, db: Path) -> subprocess.Popen:
    """A registered dispatcher process on `db` that, told so on its stdin, takes the write
    lock, stops itself in the middle of its transaction, and once continued, looks around
    for a second (its heartbeat and its settling run then) before it lets go."""
    code = textwrap.dedent("""
        import os, signal, sys, time
        from app.bootstrap import Role, build_local
        from config.settings import from_environment
        from engine.adapters.local.sqlite_store import SqliteJobStore
        settings = from_environment()
        runtime = build_local(settings, role=Role.DISPATCHER)
        runtime.start()
        print("started", flush=True)
        sys.stdin.readline()
        holder = SqliteJobStore(settings.db_path)
        with holder.transaction() as tx:
            tx.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('frozen', 'x')")
            print("held", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
            time.sleep(1.0)
        print("released", time.time(), flush=True)
        sys.stdin.readline()
        runtime.stop()
    """)
    env = {**os.environ, **FAST_ENV, **ENV, "SUNDIAL_DB": str(db), "SUNDIAL_CONFIG_DIR": str(configs)}
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _json_lines(text: str) -> list[dict]:
    lines = []
    for line in text.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            pass  # the start-up banner
    return lines


def _trigger(server: Server) -> tuple[int, float, dict]:
    """POST :trigger; (status, seconds to the answer, headers)."""
    import urllib.error
    import urllib.request
    request = urllib.request.Request(f"{server.url}/api/v1/projects/{PROJECT}/jobs/{TRIGGERED}:trigger",
                                     data=b"{}", method="POST", headers={"Content-Type": "application/json"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, time.monotonic() - started, dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, time.monotonic() - started, dict(error.headers)


def test_a_frozen_lock_holder_costs_the_other_process_a_bounded_pause_and_none_of_its_work(tmp_path):
    receiver = Receiver()
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / f"{PROJECT}.yaml").write_text(
        "jobs:\n"
        f"  - id: {JOB}\n    schedule: every 1s\n    catchup: {{policy: none, window: 1h}}\n"
        f"    target: {{http: {{url: {receiver.url}/tick}}}}\n"
        f"  - id: {TRIGGERED}\n    schedule: triggered\n    overlap: allow\n    max_concurrent: 100\n"
        f"    target: {{http: {{url: {receiver.url}/manual}}}}\n")
    db = tmp_path / "sundial.db"
    server = Server(configs, db, tmp_path / "serve.log", env=ENV).start()
    holder = _holder(configs, db)
    try:
        assert holder.stdout.readline().strip() == "started"
        assert wait_until(lambda: len(receiver.at_path("/tick")) >= 3, 20)
        holder.stdin.write("freeze\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "held"
        frozen_at = time.time()

        during = [_trigger(server) for _ in range(2)]  # while the lock is held
        for status, seconds, headers in during:
            assert status == 503, during
            assert seconds < LOCK_WAIT + 2.0, during  # an answer, not a hang
            assert int(headers["Retry-After"]) > 0
        time.sleep(max(0.0, frozen_at + STALL - time.time()))
        os.kill(holder.pid, signal.SIGCONT)
        released = float(holder.stdout.readline().split()[1])

        # Its API writes go through again within seconds of the holder letting go.
        triggered, statuses = [], []
        while time.time() < released + 4.0:
            status, seconds, _ = _trigger(server)
            statuses.append(status)
            if status == 200:
                triggered.append(time.time())
            time.sleep(0.1)
        assert triggered, statuses
        write_pause = triggered[0] - released
        ticks_after = [a.at for a in receiver.at_path("/tick") if a.at > released]
        assert wait_until(lambda: [a for a in receiver.at_path("/tick") if a.at > released], 10)
        delivery_pause = min(a.at for a in receiver.at_path("/tick") if a.at > released) - released
        print(f"\nAPI write during the stall answered 503 in {max(s for _, s, _ in during):.2f} s;"
              f" after the holder let go: first API write {write_pause:.2f} s, first delivery {delivery_pause:.2f} s")
        assert write_pause < 3.0 and delivery_pause < 3.0, (write_pause, delivery_pause, ticks_after)

        # None of its work is lost: every trigger it accepted reached the target and
        # succeeded, none settled as interrupted, and it was never taken for gone.
        def done() -> bool:
            rows = server.invocations(PROJECT, TRIGGERED)
            return len(rows) >= len(triggered) and all(r["status"] == "SUCCEEDED" for r in rows)
        assert wait_until(done, 20), [(r["status"], r["reason"]) for r in server.invocations(PROJECT, TRIGGERED)]
        sent = {a.headers["X-Sundial-Invocation"] for a in receiver.at_path("/manual")}
        assert {r["id"] for r in server.invocations(PROJECT, TRIGGERED)} <= sent
        log = (tmp_path / "serve.log").read_text()
        assert "taken for gone" not in log
        # (The frozen process's own attempts are settled again: it stalled past its lease.)
        holders = [line["process"] for line in _json_lines(log) if line.get("message") == "attempt interrupted"]
        assert not [h for h in holders if h.startswith(f"{server.process.pid}.")], holders
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        server.stop()
        receiver.close()
