"""SIGTERM stops `serve` within SUNDIAL_STOP_GRACE (docs/REFERENCE.md section 4.2), in one
process and with `--processes 2`, and loses nothing:

- a request on the wire to a target that takes a minute to answer is waited for until
  the grace is nearly up, then left: the process exits within the grace, and after a
  restart the attempt is sent again under its invocation id (attempt 2, not counted
  against `max_attempts: 1`) and succeeds;
- an occurrence staged ahead (committed, its request held for its time, due 3 s after
  the signal) is not written, at its time or ever: the restart sends it under the same
  invocation id, as attempt 1.

Nothing at all reaches the target between the signal and the restart."""

from __future__ import annotations

import signal
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.e2e.support import Receiver, Server, shown_staged, wait_until

GRACE = 3.0
SLOW = """jobs:
  - id: slow
    schedule: triggered
    target: {{http: {{url: "{url}/slow", timeout: 90s}}}}
"""
SOON = """  - id: soon
    at: ["{at}"]
    target: {{http: {{url: "{url}/soon"}}}}
"""
JOBS = "/api/v1/projects/e2e/jobs"


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text() if (task / "children").exists() else ""
        found += [int(child) for child in text.split()]
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _start(configs: Path, db: Path, log: Path, processes: int, port: int | None = None) -> Server:
    return Server(configs, db, log, {"SUNDIAL_STOP_GRACE": f"{GRACE:g}s", "SUNDIAL_PROCESSES": str(processes),
                                     "SUNDIAL_STAGE_AHEAD": "10s"}, port=port).start()


def _staged_soon(server: Server, receiver: Receiver, configs: Path) -> tuple[str, float]:
    """Add `soon`, one occurrence 7 s from now, and wait until it is staged (its tick runs
    up to half the time to it ahead); its invocation id and time."""
    t = float(int(time.time()) + 7)
    at = datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    (configs / "e2e.yaml").write_text(SLOW.format(url=receiver.url) + SOON.format(url=receiver.url, at=at))

    def staged() -> dict | None:
        status, view = server.call("GET", f"{JOBS}/soon")  # (404 until the file is imported)
        return view if status == 200 and view is not None and shown_staged(view, t) else None

    job = wait_until(staged, timeout=t - time.time() - 1.5)
    assert job, "the occurrence was not staged 1.5 s before its time; the machine is too slow for this check"
    return job["last_invocation"]["id"], t


@pytest.mark.parametrize("processes", [1, 2])
def test_sigterm_exits_within_the_grace_sends_nothing_more_and_loses_nothing(tmp_path, processes):
    receiver = Receiver(delays={"/slow": 60})
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "e2e.yaml").write_text(SLOW.format(url=receiver.url))
    db, log = tmp_path / "sundial.db", tmp_path / "server.log"
    server = _start(configs, db, log, processes)
    try:
        children = wait_until(lambda: _children(server.process.pid), timeout=10) if processes > 1 else []
        assert len(children) == processes - 1
        assert server.call("POST", f"{JOBS}/slow:trigger")[0] == 200
        assert wait_until(lambda: receiver.at_path("/slow"), timeout=10)
        in_flight = receiver.at_path("/slow")[0].headers["X-Sundial-Invocation"]
        staged, t = _staged_soon(server, receiver, configs)
        time.sleep(max(t - 3 - time.time(), 0.0))  # the staged request is due in 3 s at most

        signalled = time.time()
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(GRACE + 10)
        took = time.time() - signalled
        print(f"{processes} process(es): exited {took:.2f} s after SIGTERM (grace {GRACE:g} s)")
        assert server.process.returncode == 0
        assert took <= GRACE + 2
        assert all(not _alive(child) for child in children)  # the children stopped too
        time.sleep(max(t + 0.5 - time.time(), 0.5))  # past the staged occurrence's time
        assert [a.path for a in receiver.arrivals if a.at >= signalled] == []  # nothing after the signal

        receiver.delays.clear()
        server = _start(configs, db, log, processes, port=server.port)
        assert wait_until(lambda: _arrived(receiver, "/soon") and len(_arrived(receiver, "/slow")) == 2, timeout=20)
        assert _arrived(receiver, "/soon") == [(staged, "1")]  # sent once, under its id, as attempt 1
        assert _arrived(receiver, "/slow") == [(in_flight, "1"), (in_flight, "2")]  # again under its id
        for job, invocation in (("slow", in_flight), ("soon", staged)):
            row = wait_until(lambda: _finished(server, job, invocation), timeout=10)
            assert row and (row["status"], row["reason"]) == ("SUCCEEDED", ""), row
        assert len(server.invocations("e2e", "slow")) == len(server.invocations("e2e", "soon")) == 1
    finally:
        server.stop()
        receiver.close()


def _arrived(receiver: Receiver, path: str) -> list[tuple[str, str]]:
    return [(a.headers["X-Sundial-Invocation"], a.headers["X-Sundial-Attempt"]) for a in receiver.at_path(path)]


def _finished(server: Server, job: str, invocation: str) -> dict | None:
    row = server.get(f"{JOBS}/{job}/invocations/{invocation}")
    return row if row["status"] not in ("STARTING", "RUNNING") else None
