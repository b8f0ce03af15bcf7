"""The target fault suite: a real server delivering to targets that fail in every way
(tests/support/misbehaving.py), each case on the scheduled path and the manual path,
on the embedded backend and on the cloud backend (Datastore and Cloud Tasks emulators).

On one machine a scheduled occurrence is staged and written by the batch writer at its
time, and a manual trigger goes through the blocking pool; on the cloud backend both go
through a start task and the blocking pool. Every invocation must end with the case's
reason within the attempt's timeout plus a second of its start (within a second when
nothing makes it wait for the timeout: a refusal, a reset, a bad certificate), and on one machine a
scheduled one must start on time (gcloud-tasks-emulator sends a queue's tasks one at a
time, so on the cloud backend a start may wait behind another case's timeout: how late
it started is reported, not held). With SUNDIAL_TARGET_FAULTS_REPORT=FILE each run appends its cells to FILE
as JSON lines (docs/RELIABILITY.md's table comes from such a run).
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.e2e.support import Server, free_port, wait_until
from tests.support.emulators import cloud_server_env
from tests.support.misbehaving import CASES, Targets

TIMEOUT = 2  # seconds, each attempt's
LEAD = 13  # seconds from the start of the test to the scheduled occurrences (past the staging lead)
TERMINAL = {"SUCCEEDED", "FAILED", "SKIPPED", "ABORTED"}


def _config(targets: Targets, at: datetime) -> str:
    lines = ['allowed_hosts: ["127.0.0.1"]', "jobs:"]
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    for case in CASES:
        target = f'target: {{http: {{url: "{targets.url(case.name)}", timeout: {TIMEOUT}s}}}}'
        lines += [f"  - id: scheduled-{case.name}", f'    at: ["{stamp}"]', f"    {target}",
                  f"  - id: manual-{case.name}", "    schedule: triggered", f"    {target}"]
    return "\n".join(lines) + "\n"


def _instant(raw: str | None) -> datetime | None:
    return None if raw is None else datetime.fromisoformat(raw.replace("Z", "+00:00"))


def _run(server: Server, at: datetime) -> dict[tuple[str, str], dict]:
    """Trigger every manual job, wait for every invocation to end; (path, case) -> its row."""
    for case in CASES:
        status, body = server.call("POST", f"/api/v1/projects/faults/jobs/manual-{case.name}:trigger", {})
        assert status == 200, body
    jobs = [(path, case.name) for case in CASES for path in ("scheduled", "manual")]

    def ended():
        rows = {}
        for path, case in jobs:
            found = server.invocations("faults", f"{path}-{case}")
            if not found or found[-1]["status"] not in TERMINAL:
                return None
            rows[path, case] = found[-1]
        return rows
    wait_until(lambda: datetime.now(timezone.utc) > at, timeout=LEAD + 5)
    rows = wait_until(ended, timeout=TIMEOUT * 4 + 20, interval=0.25)
    assert rows, "some invocations never ended"
    return rows


def _check(rows: dict, backend: str, at: datetime) -> None:
    report = os.environ.get("SUNDIAL_TARGET_FAULTS_REPORT")
    failures = []
    for case in CASES:
        for path in ("scheduled", "manual"):
            row = rows[path, case.name]
            started, finished = _instant(row["started_time"]), _instant(row["finished_time"])
            took = (finished - started).total_seconds() if started and finished else None
            late = (started - at).total_seconds() if path == "scheduled" and started else 0.0
            if report:
                with open(report, "a") as out:
                    out.write(json.dumps({"backend": backend, "case": case.name, "path": path, "status": row["status"],
                                          "reason": row["reason"], "seconds": took, "late": late}) + "\n")
            if row["status"] != case.status or case.reason not in (row["reason"] or ""):
                failures.append(f"{backend} {path} {case.name}: {row['status']} {row['reason']!r}")
            elif took is None or took > (TIMEOUT + 1 if not case.at_once else 1):
                failures.append(f"{backend} {path} {case.name}: ended {took} s after its start")
            elif late > 1.5 and backend == "embedded":  # the tasks emulator sends a queue's tasks one at a time
                failures.append(f"{backend} {path} {case.name}: started {late:.2f} s after its time")
    assert not failures, "\n".join(failures)


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    made = Targets(tmp_path_factory.mktemp("targets"))
    yield made
    made.close()


def _server(targets: Targets, folder: Path, env: dict, port: int | None = None) -> tuple[Server, datetime]:
    at = (datetime.now(timezone.utc) + timedelta(seconds=LEAD)).replace(microsecond=0)
    configs = folder / "configs"
    configs.mkdir()
    (configs / "faults.yaml").write_text(_config(targets, at))
    env = {**env, "SSL_CERT_FILE": str(targets.authority.bundle)}
    server = Server(configs, folder / "s.db", folder / "server.log", env, port=port).start()
    return server, at


def test_every_failure_on_every_path_ends_within_the_timeout_embedded(targets, tmp_path):
    server, at = _server(targets, tmp_path, {})
    try:
        _check(_run(server, at), "embedded", at)
    finally:
        server.stop()


def test_every_failure_on_every_path_ends_within_the_timeout_cloud(targets, tmp_path, datastore, tasks_emulator):
    port = free_port()
    env = {**cloud_server_env(datastore, tasks_emulator, "faults", port),
           "SUNDIAL_TASKS_QUEUE_SHARDS": "8"}  # the emulator sends one task of a queue at a time
    server, at = _server(targets, tmp_path, env, port)
    try:
        _check(_run(server, at), "cloud", at)
    finally:
        server.stop()


EVERY_TWO = """
jobs:
  - id: refused
    schedule: "*/2 * * * * ?"
    target: {{http: {{url: "{refused}", timeout: 2s}}}}
  - id: unresolvable
    schedule: "*/2 * * * * ?"
    target: {{http: {{url: "{unresolvable}", timeout: 2s}}}}
"""


def test_a_target_that_is_down_fails_every_occurrence_and_skips_none(targets, tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "down.yaml").write_text(EVERY_TWO.format(refused=targets.url("refused"),
                                                        unresolvable=targets.url("unresolvable")))
    server = Server(configs, tmp_path / "s.db", tmp_path / "server.log").start()
    try:
        time.sleep(11)
        for job in ("refused", "unresolvable"):
            rows = server.invocations("down", job)
            failed = [row for row in rows if row["status"] == "FAILED"]
            skipped = [row for row in rows if row["status"] == "SKIPPED" and row["reason"] == "overlap"]
            assert len(failed) >= 3, (job, [(row["status"], row["reason"]) for row in rows])
            assert not skipped, (job, skipped)
    finally:
        server.stop()


OTHER_PATHS = """
jobs:
  - id: retried
    at: ["{at}"]
    retry: {{max_attempts: 3, min_backoff: 1s, max_backoff: 1s}}
    target: {{http: {{url: "{silent}", timeout: 1s}}}}
  - id: fanned-out
    at: ["{at}"]
    fanout: {{count: 3, spread: 2s}}
    target: {{http: {{url: "{refused}", timeout: 2s}}}}
  - id: hooked
    at: ["{at}"]
    target: {{http: {{url: "{refused}", timeout: 2s}}}}
    on_failure: {{http: {{url: "{silent}", timeout: 2s}}}}
"""


def test_retries_fanned_out_events_and_hooks_end_as_promptly(targets, tmp_path):
    """The other paths a delivery takes, against a target that refuses or never answers:
    each attempt ends within its timeout plus a second, so the invocation (or the hook)
    ends within the sum of its attempts, backoffs and spread."""
    at = (datetime.now(timezone.utc) + timedelta(seconds=LEAD)).replace(microsecond=0)
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "paths.yaml").write_text(OTHER_PATHS.format(
        at=at.strftime("%Y-%m-%dT%H:%M:%SZ"), silent=targets.url("silent"), refused=targets.url("refused")))
    log = tmp_path / "server.log"
    server = Server(configs, tmp_path / "s.db", log).start()
    try:
        ended = {job: wait_until(lambda job=job: _ended(server, job), timeout=LEAD + 15) for job in
                 ("retried", "fanned-out", "hooked")}
        notified = wait_until(lambda: _notified(log), timeout=10)
    finally:
        server.stop()
    retried, fanned, hooked = ended["retried"], ended["fanned-out"], ended["hooked"]
    assert (retried["status"], retried["reason"], retried["attempt"]) == ("FAILED", "timeout", 3)
    assert _seconds(at, retried["finished_time"]) <= 3 * (1 + 1) + 2 * 1 + 1
    assert fanned["status"] == "FAILED" and "connection refused" in fanned["reason"]
    assert _seconds(at, fanned["finished_time"]) <= 2 + 1 + 1
    assert (hooked["status"], hooked["reason"]) == ("FAILED", "connection error: connection refused")
    assert notified and notified["outcome"] == "failed" and notified["reason"] == "timeout"
    assert _seconds(_instant(hooked["finished_time"]), notified["time"]) <= 2 + 1.5


def _ended(server: Server, job: str) -> dict | None:
    rows = server.invocations("paths", job)
    return rows[-1] if rows and rows[-1]["status"] in TERMINAL else None


def _notified(log: Path) -> dict | None:
    for line in log.read_text().splitlines():
        if line.startswith("{") and '"notified"' in line:
            return json.loads(line)
    return None


def _seconds(since: datetime | None, raw: str) -> float:
    assert since is not None
    return (_instant(raw) - since).total_seconds()  # type: ignore[operator]
