"""Fault 4: SIGKILL of the real server at 10 × SUNDIAL_FAULTS_SCALE seeded random instants
(10 in `make test`; 20, about 45 s, with the flag at 2) during a run
of 50 jobs firing every second or two (the kill lands in tick commits, in
deliveries, between a delivery and its result, in start tasks of fan-outs and
retries). After each restart no occurrence has been called under two invocation
ids; at the end every occurrence is accounted for: recorded once, and delivered
under its one id or SKIPPED with a reason. An attempt in flight at a kill is sent
again under its id after the restart, not counted against `max_attempts`: FAILED
`interrupted` is left only to an invocation interrupted four times running."""

from __future__ import annotations

import random
import time

from tests.e2e.support import Server
from tests.faults.servers import PROJECT, FlakyReceiver, account, ids_per_occurrence, jobs_config, settle
from tests.faults.support import SEED, report, scaled
from tests.support.records import RecordWatch

JOBS = 50
# Occurrences more than 1 s late count as missed, so a restart goes through the
# catch-up policies; an attempt in flight when the process died is re-issued
# after its lease (timeout 2 s + SUNDIAL_START_GRACE 3 s).
ENV = {"SUNDIAL_LATE_TOLERANCE": "1s"}


def test_sigkill_at_random_instants_loses_and_doubles_nothing(tmp_path):
    rng = random.Random(SEED + 4)
    kills = scaled(10)
    receiver = FlakyReceiver(SEED + 4)
    configs = tmp_path / "configs"
    configs.mkdir()
    text, paths = jobs_config(receiver.url, JOBS)
    (configs / f"{PROJECT}.yaml").write_text(text)
    db, log = tmp_path / "sundial.db", tmp_path / "server.log"
    server = Server(configs, db, log, ENV)
    records = RecordWatch.of_sqlite(db)  # read after each kill, while nothing writes
    began = time.time()
    try:
        for kill in range(kills):
            server.start()
            time.sleep(rng.uniform(0.15, 0.7))  # a random instant of this run
            server.kill()
            records.sample()
            with receiver.lock:
                arrivals = list(receiver.arrivals)
            doubled = {k: i for k, i in ids_per_occurrence(arrivals).items() if len(i) > 1}
            assert not doubled, f"after kill {kill + 1}: {list(doubled.items())[:3]}"
            # Down for a moment; every tenth time for longer than the late tolerance,
            # so that the restart goes through the catch-up policies.
            time.sleep(rng.uniform(0.0, 0.15) if kill % 10 else 1.5)
        server.start()
        time.sleep(4)  # leases of the last killed process run out; the watchdog repairs
        ended = time.time()
        settle(server, configs, list(paths))
        period = {job: 2 if path.startswith("/fanout/") else 1 for job, path in paths.items()}
        result = account(server, receiver, paths, period)
        records.sample()
        report("sigkill", "sqlite", {**result.counts(), "kills": kills, "seconds": round(ended - began)}, records)
        problems = result.problems()
        assert not problems, f"{len(problems)} problems, first: {problems[:10]}"
        # Each job's records span the whole run: nothing lost at either end.
        for job_id in paths:
            rows = server.invocations(PROJECT, job_id)
            first, last = rows[0]["scheduled_time"], rows[-1]["scheduled_time"]
            assert _ts(first) <= began + 4, f"{job_id}: first record {first}"
            assert _ts(last) >= ended - 3, f"{job_id}: last record {last}"
        assert result.occurrences >= JOBS * (ended - began) * 0.8
        assert result.skipped["missed"] > 0  # the downtime went through catch-up
        # When one interruption ended a single attempt FAILED, this run had 158 of them.
        assert result.interrupted <= 5, result.counts()
    finally:
        server.stop()
        receiver.close()


def _ts(rfc3339: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
