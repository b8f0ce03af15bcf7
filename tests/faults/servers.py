"""Fault injection against the real `main.py serve` (tests/e2e/support.py): a
config of many second-level jobs, a receiver whose answers can fail, and the
accounting of every occurrence through the API against what the receiver got."""

from __future__ import annotations

import hashlib
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from tests.e2e.support import Arrival, Receiver, Server, wait_until

PROJECT = "faults"
CATCHUPS = ("none", "latest", "all")


def jobs_config(url: str, count: int, head: str = "") -> tuple[str, dict[str, str]]:
    """`count` jobs firing every second or two: catch-up none / latest / all, a few
    fanned out over two events (start tasks), a few against a flaky path with
    retries. Returns the YAML (after `head`) and each job's receiver path."""
    lines, paths = [head + "jobs:"], {}
    for n in range(count):
        job_id = f"job-{n:02d}"
        kind = ("plain", "plain", "fanout", "flaky")[n % 4] if n % 5 else "plain"
        path = f"/{kind}/{job_id}"
        schedule = '"*/2 * * * * ?"' if kind == "fanout" else '"* * * * * ?"'
        extra = ""
        if kind == "fanout":
            extra = "    fanout: {count: 2, spread: 1s}\n"
        if kind == "flaky":
            extra = "    retry: {max_attempts: 3, min_backoff: 100ms, max_backoff: 300ms}\n"
        lines.append(
            f"  - id: {job_id}\n"
            f"    schedule: {schedule}\n"
            f"    catchup: {{policy: {CATCHUPS[n % 3]}, window: 1h}}\n"
            f"{extra}"
            f"    target: {{http: {{url: {url}{path}, timeout: 2s}}}}"
        )
        paths[job_id] = path
    return "\n".join(lines) + "\n", paths


class FlakyReceiver(Receiver):
    """A Receiver whose /flaky/... paths answer 503 to a seeded 25% of attempts
    (decided by a hash of the invocation and attempt, not by arrival order)."""

    def __init__(self, seed: int):
        self.seed = seed
        super().__init__()
        # socketserver listens with a backlog of 5; 50 jobs firing on the same second
        # overflow it, and a dropped SYN costs a second: the target would seem to time out.
        self.server.socket.listen(256)

    def _serve(self, handler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length).decode() if length else ""
        with self.lock:
            self.arrivals.append(Arrival(handler.path, dict(handler.headers), body, time.time()))
        status = 200
        if handler.path.startswith("/flaky/"):
            key = (f"{self.seed}/{handler.headers.get('X-Sundial-Invocation')}/"
                   f"{handler.headers.get('X-Sundial-Attempt')}").encode()
            draw = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64
            status = 503 if draw < 0.25 else 200
        handler.send_response(status)
        handler.send_header("Content-Length", "2")
        handler.end_headers()
        handler.wfile.write(b"ok")


def settle(server: Server, configs: Path, job_ids: list[str], timeout: float = 30, head: str = "") -> None:
    """Stop new occurrences (the file loses its jobs, keeps `head`) and wait until nothing is in flight."""
    (configs / f"{PROJECT}.yaml").write_text(head + "jobs: []\n")

    def disabled():
        return all(j["state"] == "DISABLED" for j in server.get(f"/api/v1/projects/{PROJECT}/jobs")["jobs"])

    assert wait_until(disabled, timeout=timeout), "jobs not disabled"

    def idle():
        jobs = server.get(f"/api/v1/projects/{PROJECT}/jobs")["jobs"]
        return all(not j["active_invocations"] for j in jobs)

    assert wait_until(idle, timeout=timeout, interval=0.3), "invocations still in flight"


@dataclass
class Accounting:
    jobs: int = 0
    occurrences: int = 0
    delivered: int = 0  # SUCCEEDED or FAILED (after its attempts), each called at least once
    skipped: Counter = field(default_factory=Counter)
    calls: int = 0  # requests the receiver got
    redelivered: int = 0  # requests repeating an (invocation, event, attempt) already received
    duplicates: list[str] = field(default_factory=list)  # one occurrence, two invocations or ids
    missing: list[str] = field(default_factory=list)  # a second without a record
    unrecorded: list[str] = field(default_factory=list)  # a call of no recorded invocation
    undelivered: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)  # a status or reason that should not be
    # FAILED/interrupted: in flight when its process was killed, and sent again (not
    # counted) until its deadline or its 4th interruption (docs/REFERENCE.md section 4.2).
    interrupted: int = 0

    def problems(self) -> list[str]:
        return (self.duplicates + self.missing + self.unrecorded + self.undelivered
                + self.unfinished + self.wrong)

    def counts(self) -> dict:
        return {
            "jobs": self.jobs, "occurrences": self.occurrences, "delivered": self.delivered,
            "skipped": dict(self.skipped), "calls": self.calls,
            "redelivered_same_id": self.redelivered, "duplicates": len(self.duplicates),
            "missing": len(self.missing), "unrecorded": len(self.unrecorded),
            "undelivered": len(self.undelivered), "unfinished": len(self.unfinished),
            "wrong": len(self.wrong), "interrupted": self.interrupted,
        }

    def summary(self) -> str:
        skipped = ", ".join(f"{r} {n}" for r, n in sorted(self.skipped.items())) or "none"
        return (f"jobs {self.jobs}, occurrences {self.occurrences}, delivered {self.delivered},"
                f" skipped ({skipped}), calls {self.calls}, redelivered (same id) {self.redelivered},"
                f" duplicates {len(self.duplicates)}, missing {len(self.missing)},"
                f" unrecorded {len(self.unrecorded)}, unfinished {len(self.unfinished)}")


def ids_per_occurrence(arrivals) -> dict:
    """(job, scheduled time) -> the invocation ids its calls carried."""
    ids = defaultdict(set)
    for a in arrivals:
        ids[(a.headers["X-Sundial-Job"], a.headers["X-Sundial-Scheduled-Time"])].add(
            a.headers["X-Sundial-Invocation"])
    return ids


def account(server: Server, receiver: Receiver, paths: dict[str, str], period: dict[str, int]) -> Accounting:
    """Every occurrence of every job: one record per fire time from the first to the
    last, each delivered (and called under its one id) or SKIPPED with a reason."""
    result = Accounting(jobs=len(paths))
    with receiver.lock:
        arrivals = list(receiver.arrivals)
    result.calls = len(arrivals)
    attempts = Counter((a.headers["X-Sundial-Invocation"], a.headers.get("X-Sundial-Event", ""),
                        a.headers["X-Sundial-Attempt"]) for a in arrivals)
    result.redelivered = sum(n - 1 for n in attempts.values())
    by_job = defaultdict(list)
    for a in arrivals:
        by_job[a.headers["X-Sundial-Job"]].append(a)
    for job_id, path in paths.items():
        rows = server.invocations(PROJECT, job_id)
        per_time = defaultdict(list)
        for row in rows:
            per_time[row["scheduled_time"]].append(row)
        result.duplicates += [f"{job_id} {t}: {len(g)} invocations" for t, g in per_time.items() if len(g) > 1]
        seconds = sorted(_ts(t) for t in per_time)
        step = period[job_id]
        if seconds:
            expected = int(round((seconds[-1] - seconds[0]) / step)) + 1
            result.occurrences += expected
            have = {round(s) for s in seconds}
            result.missing += [f"{job_id} {datetime.fromtimestamp(s)}: no record"
                               for s in range(round(seconds[0]), round(seconds[-1]) + 1, step) if s not in have]
        calls = by_job[f"{PROJECT}/{job_id}"]
        ids = ids_per_occurrence(calls)
        result.duplicates += [f"{job_id} {t}: called under {sorted(i)}" for (_, t), i in ids.items() if len(i) > 1]
        recorded = {row["id"]: row for row in rows}
        called = {a.headers["X-Sundial-Invocation"] for a in calls}
        result.unrecorded += [f"{job_id} {i}: called, no record" for i in called - set(recorded)]
        for row in rows:
            status, reason = row["status"], row["reason"]
            if status in ("STARTING", "RUNNING"):
                result.unfinished.append(f"{job_id} {row['id']} {status}")
            elif status == "SKIPPED":
                result.skipped[reason] += 1
                if reason not in ("missed", "overlap", "disabled"):
                    result.wrong.append(f"{job_id} {row['id']} SKIPPED for {reason!r}")
            elif status == "FAILED" and (reason == "interrupted" or reason.endswith("; first: interrupted")):
                # (a fan-out says which of its events failed first: here, one in flight at the kill)
                result.interrupted += 1
            else:
                result.delivered += 1
                if row["id"] not in called:
                    result.undelivered.append(f"{job_id} {row['id']} {status}, never called")
                if status == "FAILED" and not (path.startswith("/flaky/") and reason == "http 503"):
                    result.wrong.append(f"{job_id} {row['id']} FAILED: {reason}")
    return result


def _ts(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
