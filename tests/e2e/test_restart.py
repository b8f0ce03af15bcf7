"""Kill -9 and restart, and two servers on one database: every occurrence is
accounted for, and none is delivered under two invocation ids."""

import time
from collections import defaultdict

from tests.e2e.support import Receiver, Server, settle

JOBS = """
jobs:
  - id: catchup-all
    schedule: "* * * * * ?"
    catchup: {{policy: all, window: 1h}}
    target: {{http: {{url: {url}/all, timeout: 2s}}}}
  - id: catchup-latest
    schedule: "* * * * * ?"
    catchup: {{policy: latest, window: 1h}}
    target: {{http: {{url: {url}/latest, timeout: 2s}}}}
  - id: catchup-none
    schedule: "* * * * * ?"
    catchup: {{policy: none}}
    target: {{http: {{url: {url}/none, timeout: 2s}}}}
"""

# Occurrences more than 1 s late count as missed, so a 4 s outage misses some.
ENV = {"SUNDIAL_LATE_TOLERANCE": "1s"}


def _settle(server: Server, jobs: list[str], configs) -> None:
    """Stop new occurrences and wait until nothing is in flight."""
    assert settle(server, configs, jobs), "invocations still in flight"


def _by_second(rows: list[dict]) -> dict:
    grouped = defaultdict(list)
    for row in rows:
        grouped[row["scheduled_time"]].append(row)
    return grouped


def _delivered_ids_per_second(arrivals) -> dict:
    ids = defaultdict(set)
    for arrival in arrivals:
        ids[arrival.headers["X-Sundial-Scheduled-Time"]].add(arrival.headers["X-Sundial-Invocation"])
    return ids


def test_kill_nine_and_restart_accounts_for_every_occurrence(tmp_path):
    receiver = Receiver()
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "e2e.yaml").write_text(JOBS.format(url=receiver.url))
    db, log = tmp_path / "sundial.db", tmp_path / "server.log"
    server = Server(configs, db, log, ENV).start()
    time.sleep(5)
    server.kill()
    time.sleep(4)
    server = Server(configs, db, log, ENV, port=server.port).start()
    time.sleep(5)
    jobs = ["catchup-all", "catchup-latest", "catchup-none"]
    _settle(server, jobs, configs)
    try:
        for job, path in zip(jobs, ["/all", "/latest", "/none"]):
            rows = server.invocations("e2e", job)
            grouped = _by_second(rows)
            seconds = sorted(grouped)
            first, last = seconds[0], seconds[-1]
            # Every second from the first occurrence to the last has exactly one record.
            expected = int(_ts(last) - _ts(first)) + 1
            assert len(seconds) == expected, f"{job}: gaps in {seconds}"
            assert all(len(group) == 1 for group in grouped.values()), f"{job}: doubled"
            statuses = {row["status"] for row in rows}
            assert statuses <= {"SUCCEEDED", "SKIPPED"}, f"{job}: {statuses}"
            delivered = _delivered_ids_per_second(receiver.at_path(path))
            assert all(len(ids) == 1 for ids in delivered.values()), f"{job}: one second, two ids"
            succeeded = {row["scheduled_time"] for row in rows if row["status"] == "SUCCEEDED"}
            assert succeeded <= set(delivered), f"{job}: recorded but never delivered"
            assert set(delivered) <= {row["scheduled_time"] for row in rows}, f"{job}: unrecorded delivery"
            # The attempt in flight when the process died holds the job until its
            # lease runs out; occurrences meanwhile are skipped for overlap, with
            # that reason. Nothing is silent.
            skipped = [row for row in rows if row["status"] == "SKIPPED"]
            # The settle disables the jobs: an occurrence staged ahead of its time then is
            # the job's last, recorded SKIPPED, reason disabled (docs/REFERENCE.md 4.2).
            assert [row["scheduled_time"] for row in skipped if row["reason"] == "disabled"] in ([], [last])
            assert {row["reason"] for row in skipped} <= {"missed", "overlap", "disabled"}
            missed = [row for row in skipped if row["reason"] == "missed"]
            if job == "catchup-all":
                assert not missed, "catch-up all delivers every missed occurrence"
                catchups = [row for row in rows if row["trigger"] == "catchup" and row["status"] != "SKIPPED"]
                assert len(catchups) >= 2, "the outage left occurrences to catch up"
                assert {row["scheduled_time"] for row in catchups} <= set(delivered)
            if job == "catchup-none":
                assert len(missed) >= 2, "a 4 s outage misses occurrences"
                assert all(row["status"] == "SKIPPED" for row in rows if row["trigger"] == "catchup")
            if job == "catchup-latest":
                assert len(missed) >= 1
                caught = [row for row in rows if row["trigger"] == "catchup" and row["status"] != "SKIPPED"]
                assert len(caught) <= 1
    finally:
        server.stop()
        receiver.close()


def test_two_servers_on_one_database_deliver_each_occurrence_once(tmp_path):
    receiver = Receiver()
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "e2e.yaml").write_text(
        f'jobs:\n  - id: shared\n    schedule: "* * * * * ?"\n    target: {{http: {{url: {receiver.url}/shared}}}}\n'
    )
    db = tmp_path / "sundial.db"
    first = Server(configs, db, tmp_path / "a.log").start()
    second = Server(configs, db, tmp_path / "b.log").start()
    try:
        time.sleep(10)
        _settle(first, ["shared"], configs)
        arrivals = receiver.at_path("/shared")
        per_second = _delivered_ids_per_second(arrivals)
        assert len(per_second) >= 8
        assert len(arrivals) == len(per_second), "an occurrence was delivered twice"
        assert all(len(ids) == 1 for ids in per_second.values())
    finally:
        first.stop()
        second.stop()
        receiver.close()


def _ts(rfc3339: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
