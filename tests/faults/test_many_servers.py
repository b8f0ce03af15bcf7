"""Fault 5: two, then three `serve` processes on one SQLite database, each with
its own dispatcher, watchdog and config importer racing the others: no
occurrence gets two invocations, none is called under two ids, none is lost,
and — nothing having crashed — no attempt is called twice."""

from __future__ import annotations

import time

from tests.e2e.support import Server
from tests.faults.servers import PROJECT, FlakyReceiver, account, jobs_config, settle
from tests.faults.support import SEED, report
from tests.support.records import RecordWatch

JOBS = 30
SECONDS_EACH = 3  # with two processes, then with three


def test_two_then_three_servers_on_one_database_make_no_duplicates(tmp_path):
    receiver = FlakyReceiver(SEED + 5)
    configs = tmp_path / "configs"
    configs.mkdir()
    text, paths = jobs_config(receiver.url, JOBS)
    (configs / f"{PROJECT}.yaml").write_text(text)
    db = tmp_path / "sundial.db"
    servers = [Server(configs, db, tmp_path / f"server-{n}.log") for n in range(3)]
    records = RecordWatch.of_sqlite(db)
    try:
        began = time.time()
        servers[0].start()
        records.every(0.5)  # the database exists now
        servers[1].start()
        time.sleep(SECONDS_EACH)
        servers[2].start()
        time.sleep(SECONDS_EACH)
        ended = time.time()
        records.stop()
        settle(servers[0], configs, list(paths))
        period = {job: 2 if path.startswith("/fanout/") else 1 for job, path in paths.items()}
        result = account(servers[2], receiver, paths, period)
        # Who did the work: a process leases up to 128 due tasks at once, so one may take nearly all.
        shares = [(tmp_path / f"server-{n}.log").read_text().count('"message": "delivered"') for n in range(3)]
        report("2 then 3 servers, one database", "sqlite", {**result.counts(), "calls_by_process": shares},
               records)
        problems = result.problems()
        assert not problems, f"{len(problems)} problems, first: {problems[:10]}"
        assert result.redelivered == 0, "an attempt was called twice without any crash"
        assert result.occurrences >= JOBS * (ended - began - 2) * 0.8
    finally:
        records.close()
        for server in servers:
            server.stop()
        receiver.close()
