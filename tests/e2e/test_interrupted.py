"""kill -9 with an attempt in flight, restart 6 s later on the same database
(docs/REFERENCE.md section 4.2): the attempt is settled at start, the downtime goes through
the catch-up policy, and the job fires normally again at once.

Four every-second jobs (`overlap: skip`): `catchup: none` and `catchup: latest`, each
with three attempts and with one. Either way the interrupted attempt is sent again under
its invocation id, as attempt 2, without counting against `max_attempts`. Their target
answers only after 20 s until the kill, so the first occurrence of each is in flight
when the server dies, and at once after it.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from collections import Counter, defaultdict
from contextlib import closing
from pathlib import Path

from tests.e2e.support import Receiver, Server, epoch, settle, wait_until

TOLERANCE = 0.5  # SUNDIAL_LATE_TOLERANCE: the newest due fire time is on time within it
ENV = {"SUNDIAL_LATE_TOLERANCE": "500ms"}
DOWN = 6.0

JOBS = {  # id: (catchup, attempts)
    "none-retry": ("none", 3),
    "none-once": ("none", 1),
    "latest-retry": ("latest", 3),
    "latest-once": ("latest", 1),
}


def _config(url: str) -> str:
    entries = "".join(
        f'  - id: {job}\n    schedule: "* * * * * ?"\n    catchup: {{policy: {catchup}, window: 1h}}\n'
        f"    retry: {{max_attempts: {attempts}, min_backoff: 200ms, max_backoff: 1s}}\n"
        f"    target: {{http: {{url: {url}/{job}, timeout: 20s}}}}\n"
        for job, (catchup, attempts) in JOBS.items()
    )
    return "jobs:\n" + entries



def _restart_at(kill_at: float, startup: float) -> float:
    """When to start the server again: at least DOWN after the kill, placed so that
    its first tick most likely comes TOLERANCE + 0.25 s into a second (then the
    newest due fire time is late, and `latest` delivers it as a catch-up). Only the
    timing aims at that branch; the checks below hold for whichever one happens."""
    earliest = kill_at + DOWN
    aim = int(earliest + startup) + TOLERANCE + 0.25
    while aim - startup < earliest:
        aim += 1
    return aim - startup


def test_an_attempt_in_flight_at_a_kill_is_settled_at_restart(tmp_path):
    receiver = Receiver(delays={f"/{job}": 20 for job in JOBS})
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "e2e.yaml").write_text(_config(receiver.url))
    db, log = tmp_path / "sundial.db", tmp_path / "server.log"
    began = time.time()
    server = Server(configs, db, log, ENV).start()
    startup = time.time() - began
    try:
        assert wait_until(lambda: all(receiver.at_path(f"/{job}") for job in JOBS), timeout=10)
        time.sleep(0.5)
        in_flight = {job: receiver.at_path(f"/{job}")[0].headers["X-Sundial-Invocation"] for job in JOBS}
        kill_at = time.time()
        server.kill()
        receiver.delays.clear()  # answers at once from here on
        time.sleep(max(0.0, _restart_at(kill_at, startup) - time.time()))
        restarted = time.time()
        server = Server(configs, db, log, ENV, port=server.port).start()
        up_at = time.time()
        print(f"down {restarted - kill_at:.2f} s; up {up_at - restarted:.2f} s after the restart")
        problems = _settled_at_start(server, in_flight)
        wait_until(lambda: all(_fired_normally(server, job, kill_at) for job in JOBS), timeout=5)
        time.sleep(1.5)
        settle(server, configs, JOBS, timeout=10)
        for job in JOBS:
            problems += _check_job(server, receiver, job, in_flight[job], kill_at, up_at)
        assert not problems, "\n".join(problems)
    finally:
        server.stop()
        receiver.close()


def _settled_at_start(server: Server, in_flight: dict[str, str]) -> list[str]:
    """Right after the restart, every invocation in flight at the kill has its
    attempt settled: interrupted, and waiting for (or past) its next attempt."""
    problems = []
    for job, invocation in in_flight.items():
        status, row = server.call("GET", f"/api/v1/projects/e2e/jobs/{job}/invocations/{invocation}")
        if status != 200:
            problems.append(f"{job}: the invocation in flight at the kill has no record after the restart "
                            f"({status}); its attempt was not settled")
            continue
        messages = [entry["message"] for entry in row["log"]]
        if not any("interrupted" in message for message in messages):
            problems.append(f"{job}: not settled at start: {row['status']} {row['reason']!r}, log {messages}")
    return problems


def _fired_normally(server: Server, job: str, kill_at: float) -> bool:
    return any(row["trigger"] == "schedule" and row["status"] == "SUCCEEDED" and epoch(row["scheduled_time"]) > kill_at
               for row in server.invocations("e2e", job))


def _check_job(server: Server, receiver: Receiver, job: str, interrupted: str, kill_at: float,
               up_at: float) -> list[str]:
    catchup, _ = JOBS[job]
    rows = server.invocations("e2e", job)
    calls = receiver.at_path(f"/{job}")
    problems = _no_duplicates(job, rows, calls)
    problems += _the_interrupted_one(job, rows, calls, interrupted)
    after = [row for row in rows if epoch(row["scheduled_time"]) > kill_at]
    if not after:
        return problems + [f"{job}: nothing recorded after the kill"]
    # The restart's first tick handles the whole downtime in one transaction.
    first = min(row["created_time"] for row in after)
    downtime = [row for row in after if row["created_time"] == first]
    if len(downtime) < 5:
        problems.append(f"{job}: the restart's first tick handled {len(downtime)} fire times, expected the 6 s gap")
    *older, newest = downtime
    for row in older:
        if (row["status"], row["reason"], row["trigger"]) != ("SKIPPED", "missed", "catchup"):
            problems.append(f"{job}: downtime occurrence {row['scheduled_time']} is "
                            f"{row['status']}/{row['reason']} ({row['trigger']}), expected SKIPPED/missed")
    problems += _the_newest(job, newest, catchup)
    # The job is free again at once: a fire time after the downtime reaches the target
    # within 2 s of the restart. Its trigger says only whether its tick came within
    # TOLERANCE (a loaded machine makes it `catchup`): either is the job firing again.
    fired = [row for row in after if row not in downtime and row["status"] == "SUCCEEDED"]
    arrivals = {call.headers["X-Sundial-Invocation"]: call.at for call in calls}
    if not fired or arrivals.get(fired[0]["id"], float("inf")) > up_at + 2.0:
        problems.append(f"{job}: no invocation after the downtime delivered within 2 s of the restart: "
                        + ", ".join(f"{r['scheduled_time']} {r['status']}/{r['reason']} ({r['trigger']})"
                                    for r in after[:12]))
    return problems


def _no_duplicates(job: str, rows: list[dict], calls) -> list[str]:
    problems = []
    per_second = defaultdict(set)
    for row in rows:
        per_second[row["scheduled_time"]].add(row["id"])
    for call in calls:
        per_second[call.headers["X-Sundial-Scheduled-Time"]].add(call.headers["X-Sundial-Invocation"])
    doubled = {second: ids for second, ids in per_second.items() if len(ids) > 1}
    if doubled:
        problems.append(f"{job}: occurrences with two invocation ids: {doubled}")
    unfinished = [row["id"] for row in rows if row["status"] in ("STARTING", "RUNNING")]
    if unfinished:
        problems.append(f"{job}: still in flight after settling: {unfinished}")
    return problems


def _the_interrupted_one(job: str, rows: list[dict], calls, invocation: str) -> list[str]:
    row = next((r for r in rows if r["id"] == invocation), None)
    if row is None:
        return [f"{job}: the invocation in flight at the kill was never recorded"]
    sent = sorted(int(c.headers["X-Sundial-Attempt"]) for c in calls
                  if c.headers["X-Sundial-Invocation"] == invocation)
    # Sent again under the same invocation id, uncounted whatever max_attempts is; it answered at once.
    expected, expected_sent = ("SUCCEEDED", ""), [1, 2]
    if (row["status"], row["reason"]) != expected or sent != expected_sent:
        return [f"{job}: the invocation in flight at the kill ended {row['status']}/{row['reason']!r} with "
                f"attempts {sent} sent; expected {expected[0]}/{expected[1]!r} with {expected_sent}"]
    return []


def _the_newest(job: str, row: dict, catchup: str) -> list[str]:
    """The newest fire time the restart's first tick found due: on time if it was
    handled within TOLERANCE, else late and up to the catch-up policy."""
    late = epoch(row["created_time"]) - epoch(row["scheduled_time"]) > TOLERANCE
    print(f"{job}: the newest due fire time at the restart was {'late' if late else 'on time'}: "
          f"{row['status']}/{row['reason']} ({row['trigger']})")
    outcome = (row["status"], row["reason"], row["trigger"])
    if late and catchup == "none":
        allowed = {("SKIPPED", "missed", "catchup")}
    else:
        trigger = "catchup" if late else "schedule"
        allowed = {("SUCCEEDED", "", trigger)}
        # The interrupted invocation's next attempt holds the job (overlap: skip).
        allowed.add(("SKIPPED", "overlap", trigger))
    if outcome not in allowed:
        return [f"{job}: the newest due fire time {row['scheduled_time']} is {outcome}, expected one of {allowed}"]
    return []


# --- serve --processes 2: a child killed -9 --------------------------------------------

HEARTBEAT = 0.5  # SUNDIAL_HEARTBEAT_PERIOD in the test below


def _child_of(pid: int) -> int | None:
    for task in Path(f"/proc/{pid}/task").iterdir():
        found = (task / "children").read_text().split() if (task / "children").exists() else []
        if found:
            return int(found[0])
    return None


def _holds_by_pid(db: Path) -> dict[int, list[tuple[str, str]]]:
    """pid -> the (job, invocation) each of its attempts in flight belongs to."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)) as conn:
        rows = conn.execute("SELECT p.pid, h.job_id, h.invocation_id FROM held_attempts h"
                            " JOIN processes p ON p.id = h.holder").fetchall()
    held = defaultdict(list)
    for pid, job, invocation in rows:
        held[pid].append((job, invocation))
    return held


def _sent_invocations(receiver) -> set[str]:
    with receiver.lock:
        return {arrival.headers.get("X-Sundial-Invocation") for arrival in receiver.arrivals}


def _status(server, job: str, invocation: str) -> tuple[str, str]:
    row = server.get(f"/api/v1/projects/e2e/jobs/{job}/invocations/{invocation}")
    return row["status"], row["reason"]


def test_the_attempts_of_a_child_killed_9_are_settled_by_the_survivor_within_a_few_heartbeats(tmp_path):
    receiver = Receiver(delays={"/slow": 5})
    configs = tmp_path / "configs"
    configs.mkdir()
    jobs = "".join(f'  - id: j{i}\n    schedule: "* * * * * ?"\n    retry: {{max_attempts: 1}}\n'
                   f"    target: {{http: {{url: {receiver.url}/slow, timeout: 20s}}}}\n" for i in range(20))
    (configs / "e2e.yaml").write_text("jobs:\n" + jobs)
    db = tmp_path / "sundial.db"
    env = {"SUNDIAL_PROCESSES": "2", "SUNDIAL_WORKERS": "2", "SUNDIAL_HEARTBEAT_PERIOD": f"{HEARTBEAT}s"}
    server = Server(configs, db, tmp_path / "serve.log", env).start()
    try:
        child = wait_until(lambda: _child_of(server.process.pid), timeout=10)
        # Both processes have attempts out (the target answers after 5 s), the child's at
        # the target already (others of its may be staged ahead of their time).
        assert wait_until(lambda: {server.process.pid, child} <= set(_holds_by_pid(db)) and any(
            invocation in _sent_invocations(receiver) for _, invocation in _holds_by_pid(db)[child]), timeout=10)
        os.kill(child, signal.SIGKILL)
        killed_at = time.time()
        orphans = _holds_by_pid(db)[child]
        time.sleep(0.1)  # what the child wrote before it died has reached the receiver
        sent = _sent_invocations(receiver)
        receiver.delays.clear()
        assert wait_until(lambda: child not in _holds_by_pid(db), timeout=10), "never settled"
        settled_in = time.time() - killed_at
        print(f"{len(orphans)} attempts of the killed child settled {settled_in:.2f} s after the kill, "
              f"{sum(invocation in sent for _, invocation in orphans)} of them sent")
        assert settled_in <= 4 * HEARTBEAT + 0.5  # the survivor's next heartbeats; its pid is dead
        assert any(invocation in sent for _, invocation in orphans)
        # The survivor holds none of the orphans' attempts as its own. (It may hold attempts
        # of the same jobs: once settled, their next occurrences are anyone's to run.)
        assert not set(_holds_by_pid(db)[server.process.pid]) & set(orphans)
        for job, invocation in orphans:
            # Sent again under its own id (as attempt 2 if it may have reached the target:
            # a staged one never let out goes as attempt 1), not counted against max_attempts 1.
            assert wait_until(lambda: _status(server, job, invocation) == ("SUCCEEDED", ""), timeout=10), job
        # The jobs are free again: each fires anew at once.
        for job, invocation in orphans:
            assert wait_until(lambda: any(r["id"] != invocation and r["status"] == "SUCCEEDED"
                                          for r in server.invocations("e2e", job)), timeout=5), job
        counts = Counter((a.headers.get("X-Sundial-Invocation"), a.headers.get("X-Sundial-Attempt"))
                         for a in receiver.arrivals)
        assert max(counts.values()) == 1  # no attempt reached the target twice
        attempts = {invocation: {a for (i, a) in counts if i == invocation} for _, invocation in orphans}
        assert all(attempts[invocation] == ({"1", "2"} if invocation in sent else {"1"})
                   for _, invocation in orphans), attempts
    finally:
        server.stop()
        receiver.close()
