"""`overlap: replace` through the real server on the embedded backend: a target that holds
every request open and never answers sees the connection of the running attempt drop
within a couple of seconds of the next occurrence (which replaces it), not at the
attempt's 30 s timeout; and an async target with a `cancel_url` is told of each
invocation replaced, once, after it is ABORTED."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field

import pytest

from tests.e2e.support import Receiver, Server, wait_until
from tests.faults.support import SCALE


@dataclass
class Held:
    """One connection the target accepted: when its request came, and when it was dropped."""

    opened: float
    request: bytes = b""
    arrived: float | None = None  # the request's first byte (a connection may be opened ahead)
    dropped: float | None = None


@dataclass
class HoldingTarget:
    """A raw TCP server that reads each request and answers nothing, noting when the client
    shuts the connection (a read that returns the end of file)."""

    held: list[Held] = field(default_factory=list)
    conns: list[socket.socket] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/hold"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            entry = Held(time.monotonic())
            self.held.append(entry)
            self.conns.append(conn)
            threading.Thread(target=self._hold, args=(conn, entry), daemon=True).start()

    @staticmethod
    def _hold(conn: socket.socket, entry: Held) -> None:
        with conn:
            while True:
                try:
                    chunk = conn.recv(65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    entry.dropped = time.monotonic()
                    return
                entry.arrived = entry.arrived or time.monotonic()
                entry.request += chunk

    def requests(self) -> list[Held]:
        return [entry for entry in self.held if entry.request]

    def close(self) -> None:
        """Stop listening and drop what is held (a stopping server need not wait for it)."""
        self._listener.close()
        for conn in self.conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def test_the_replaced_attempts_connection_is_closed(tmp_path):
    target = HoldingTarget()
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "e2e.yaml").write_text(f"""
jobs:
  - id: held
    schedule: every 2s
    overlap: replace
    retry: {{max_attempts: 1}}
    target: {{http: {{url: "{target.url}", timeout: 30s}}}}
""")
    server = Server(configs, tmp_path / "sundial.db", tmp_path / "server.log").start()
    try:
        assert wait_until(lambda: len(target.requests()) >= 2, timeout=30)
        first, second = target.requests()[:2]
        # The first attempt's connection dropped when the second occurrence replaced it
        # (2 s later), within 2 s of the second request's arrival; not at its 30 s timeout.
        assert wait_until(lambda: first.dropped is not None, timeout=5)
        assert first.dropped is not None and first.arrived is not None and second.arrived is not None
        assert first.dropped - second.arrived < 2.0, (first.dropped - first.arrived, second.arrived - first.arrived)
        replaced = [row for row in server.invocations("e2e", "held") if row["reason"] == "replaced"]
        assert replaced and all(row["status"] == "ABORTED" for row in replaced)
    finally:
        target.close()
        server.stop()


def test_an_async_target_is_told_at_its_cancel_url(tmp_path):
    receiver = Receiver()
    receiver.statuses["/run"] = 202  # it works on; the next occurrence replaces it
    # A cancel endpoint slower than a second: the request telling it is no attempt of the
    # aborted invocation, and must not be closed as one (engine/aborted_attempts.py).
    receiver.delays["/cancel"] = 1.8
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "e2e.yaml").write_text(f"""
jobs:
  - id: long
    schedule: every 2s
    overlap: replace
    timeout: 1h
    target:
      http: {{url: "{receiver.url}/run", async: true, cancel_url: "{receiver.url}/cancel", headers: {{X-Key: k1}}}}
""")
    server = Server(configs, tmp_path / "sundial.db", tmp_path / "server.log").start()
    try:
        assert wait_until(lambda: len(receiver.at_path("/cancel")) >= 2, timeout=30)
        rows = {row["id"]: row for row in server.invocations("e2e", "long")}
        cancels = [json.loads(arrival.body) for arrival in receiver.at_path("/cancel")]
        told = [cancel["invocation_id"] for cancel in cancels]
        assert len(told) == len(set(told))  # once each
        for cancel in cancels:
            row = rows[cancel["invocation_id"]]
            assert (row["status"], row["reason"], cancel["reason"], cancel["job"]) == (
                "ABORTED", "replaced", "replaced", "long")
            assert cancel["scheduled_time"][:19] == row["scheduled_time"][:19]
        assert all(arrival.headers.get("X-Key") == "k1" for arrival in receiver.at_path("/cancel"))
        told_first = cancels[0]["invocation_id"]

        def messages() -> list[str]:
            row = server.get(f"/api/v1/projects/e2e/jobs/long/invocations/{told_first}")
            return [entry["message"] for entry in row["log"]]
        assert wait_until(lambda: any(m.startswith("cancel") for m in messages()), timeout=10)
        assert "cancel sent" in messages(), messages()
    finally:
        server.stop()
        receiver.close()


# The rule is held fast by tests/engine/test_aborted_attempts.py; two processes end to end
# take about 10 s of the suite.
@pytest.mark.skipif(SCALE < 2, reason="an abort closing another process's attempts end to end (about 10 s):"
                                      " set SUNDIAL_FAULTS_SCALE=2")
def test_an_abort_closes_attempts_sent_by_another_process(tmp_path):
    """`--processes 2`: the server process commits each `:abort`, and the child sends its
    share of the jobs' occurrences; every attempt is closed within about a second, those
    the child sends by the child's own check (engine/aborted_attempts.py)."""
    target = HoldingTarget()
    configs = tmp_path / "configs"
    configs.mkdir()
    jobs = "".join(f"""
  - id: j{i}
    schedule: every 3s
    overlap: allow
    max_concurrent: 5
    retry: {{max_attempts: 1}}
    target: {{http: {{url: "{target.url}", timeout: 30s}}}}
""" for i in range(8))
    (configs / "e2e.yaml").write_text("jobs:" + jobs)
    log = tmp_path / "server.log"
    server = Server(configs, tmp_path / "sundial.db", log, env={"SUNDIAL_PROCESSES": "2"}).start()
    try:
        assert wait_until(lambda: "dispatcher process started" in log.read_text(), timeout=20)
        child_up = time.monotonic()
        # Two rounds of occurrences since the child is up: it has taken its share by then.
        assert wait_until(lambda: len([e for e in target.requests() if e.opened > child_up]) >= 16, timeout=30)
        time.sleep(1.5)  # every request long on the wire
        aborted_at = time.monotonic()
        for i in range(8):
            assert server.call("POST", f"/api/v1/projects/e2e/jobs/j{i}:abort", {"reason": "stop"})[0] == 200
        before = [entry for entry in target.requests() if entry.arrived is not None and entry.arrived < aborted_at]
        assert wait_until(lambda: all(entry.dropped is not None for entry in before), timeout=10)
        assert max(entry.dropped for entry in before) - aborted_at < 2.5
        assert '"aborted_by": "another process"' in log.read_text()
    finally:
        server.stop()
        target.close()
