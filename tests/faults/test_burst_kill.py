"""A crash just after a burst's instant costs no occurrence: N one-off jobs due at T, the
server killed -9 at T + 0.2 s (some requests out, most still held or on the wire) and
started again at once. Every job's occurrence is then delivered, each under the one
invocation id it was committed with (a request cut by the kill goes again under it), and
none ends FAILED `interrupted`: an attempt a crash interrupted is no failure of its
target's. Runs with SUNDIAL_FAULTS_SCALE 2 and more: 600 jobs; from 5, 5,000 as in the chaos
trial. The target answers after a second, so every call out at the kill is cut."""

from __future__ import annotations

import math
import sqlite3
import time
from collections import defaultdict

import pytest

from tests.e2e.support import Receiver, Server, wait_until
from tests.faults.support import SCALE

JOBS = 5_000 if SCALE >= 5 else 600
# About 30 s: a long run, behind SUNDIAL_FAULTS_SCALE (the fault suite's flag). The rule it
# holds is tested in `make test` by tests/e2e/test_interrupted.py and tests/local/test_stop.py.
pytestmark = pytest.mark.skipif(SCALE < 2, reason="a kill in a burst (about 30 s): set SUNDIAL_FAULTS_SCALE=2")
LEAD = 12.0  # seconds from the server's start to T: the import, then staging ahead of T
PROJECT = "burst"


def _config(url: str, at: str) -> str:
    # A short backoff: an interrupted attempt goes again after it (the default's 10 s
    # would only make the trial longer).
    return "jobs:\n" + "".join(f"  - id: j{i:05d}\n    at: [\"{at}\"]\n    retry: {{min_backoff: 1s}}\n"
                               f"    target: {{http: {{url: \"{url}/hit\"}}}}\n" for i in range(JOBS))


def _ids_by_job(receiver: Receiver) -> dict[str, set[str]]:
    ids: dict[str, set[str]] = defaultdict(set)
    with receiver.lock:
        arrivals = list(receiver.arrivals)
    for arrival in arrivals:
        ids[arrival.headers["X-Sundial-Job"]].add(arrival.headers["X-Sundial-Invocation"])
    return ids


def test_a_kill_just_after_a_burst_instant_delivers_every_occurrence_and_fails_none(tmp_path):
    receiver = Receiver(delays={"/hit": 1.0})  # every call still unanswered at the kill
    configs = tmp_path / "configs"
    configs.mkdir()
    fire_at = math.ceil(time.time() + LEAD)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(fire_at))
    (configs / f"{PROJECT}.yaml").write_text(_config(receiver.url, stamp))
    db, log = tmp_path / "sundial.db", tmp_path / "server.log"
    server = Server(configs, db, log).start(timeout=60)
    try:
        assert time.time() < fire_at - 1, "the import took the whole lead: nothing was staged"
        time.sleep(max(fire_at + 0.2 - time.time(), 0))
        server.kill()
        before_restart = sum(len(ids) for ids in _ids_by_job(receiver).values())
        assert before_restart > 0, "nothing went out before the kill: the trial missed its instant"
        server = Server(configs, db, log, port=server.port).start(timeout=60)
        delivered = wait_until(lambda: len(_ids_by_job(receiver)) == JOBS, timeout=60)
        ids = _ids_by_job(receiver)
        assert delivered, f"{JOBS - len(ids)} of {JOBS} jobs never called ({before_restart} calls before the restart)"
        assert [job for job, seen in ids.items() if len(seen) > 1] == [], "an occurrence under two invocation ids"
        rows = sqlite3.connect(db).execute(
            "SELECT status, reason, count(*) FROM invocations WHERE project = ? GROUP BY status, reason",
            (PROJECT,)).fetchall()
        assert not [row for row in rows if row[0] == "FAILED"], rows
    finally:
        server.stop()
        receiver.close()
