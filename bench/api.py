"""Figures of the REST API on the embedded backend: a real `main.py serve` process,
clients on keep-alive HTTP connections.

    .venv/bin/python bench/api.py [--jobs N] [--threads T] [--invocations M] [--aps-python PY]

Prints:
- PUT creations per second: N new API jobs (each an `at` job of three future times
  and an HTTP target), from one client and then from T clients at once (default 4), with
  the latency p50/p99 of one PUT;
- PUT of an unchanged body (idempotent replacement, no write) per second;
- batch creations per second: N more of those jobs through `jobs:batchPut`, 1,000 a
  request, from one client, with the time of one request;
- APScheduler 3.x adding N date jobs to its SQLAlchemy store on SQLite (bench/aps_adds.py,
  run by --aps-python, an interpreter with requirements-bench.txt; skipped without one),
  and each Sundial rate as a multiple of it;
- the time to list M invocations (default 10,000) newest first, page by page,
  with page_size 100 and 1000; the history is written straight into the database
  beforehand, as years of a job's runs would have left it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.server_process import child_pids, proc_cpu_seconds  # noqa: E402
from engine.adapters.local.sqlite_store import SqliteJobStore  # noqa: E402
from engine.ports import InvocationRow  # noqa: E402
from statemachine import ids  # noqa: E402

PROJECT = "bench"


def line(name: str, value: str) -> None:
    print(f"{name:<48} {value}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Client:
    """One keep-alive connection to the server."""

    def __init__(self, port: int):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def call(self, method: str, path: str, body=None) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body)
        self.conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        response = self.conn.getresponse()
        return response.status, response.read()


def start_server(tmp: Path, port: int) -> subprocess.Popen:
    configs = tmp / "configs"
    configs.mkdir()
    (configs / f"{PROJECT}.yaml").write_text("jobs: []\n")
    log = open(tmp / "server.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "main.py", "serve", "--port", str(port), "--db", str(tmp / "sundial.db"),
         "--configs", str(configs)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "SUNDIAL_IMPORT_PERIOD": "1s"})
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            status, body = Client(port).call("GET", "/api/v1/projects")
            if status == 200 and PROJECT in body.decode():
                return process
        except OSError:
            pass
        time.sleep(0.1)
    process.kill()
    raise SystemExit(f"server did not start: {(tmp / 'server.log').read_text()[-2000:]}")


# The jobs' first time, fixed once: a body built again for the same job is the same body
# (built from the clock at each call, the "unchanged" PUTs were replacements).
FIRST = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=30)


def job_body(index: int) -> dict:
    first = FIRST + timedelta(minutes=index % 1000)
    times = [(first + timedelta(hours=h)).isoformat().replace("+00:00", "Z") for h in range(3)]
    return {"at": times, "target": {"http": {"url": "http://127.0.0.1:9/remind",
                                             "body": '{"job":"${jobId}","at":"${scheduledTime}"}'}}}


def put_jobs(port: int, names: list[str], expect: int) -> list[float]:
    client, latencies = Client(port), []
    for name in names:
        started = time.perf_counter()
        status, body = client.call("PUT", f"/api/v1/projects/{PROJECT}/jobs/{name}", job_body(int(name.split("-")[-1])))
        latencies.append(time.perf_counter() - started)
        if status != expect:
            raise SystemExit(f"PUT {name}: {status} {body[:300]!r}")
    return latencies


def timed_puts(port: int, names: list[str], threads: int, expect: int) -> tuple[float, list[float]]:
    shares = [names[i::threads] for i in range(threads)]
    results: list[list[float]] = [[] for _ in shares]

    def work(i: int) -> None:
        results[i] = put_jobs(port, shares[i], expect)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - started, sorted(x for share in results for x in share)


def server_cpu(pid: int) -> float:
    """CPU seconds the server (and any dispatcher children) has used so far."""
    return sum(proc_cpu_seconds(each) for each in (pid, *child_pids(pid)))


def report_puts(label: str, count: int, elapsed: float, latencies: list[float], cpu: float) -> float:
    p50, p99 = latencies[len(latencies) // 2], latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    line(label, f"{count / elapsed:,.0f}/s  (p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms; "
                f"server CPU {cpu / count * 1000:.2f} ms each)")
    return count / elapsed


BATCH = 1_000  # jobs a batch put request (the API's limit)


def batch_put(port: int, names: list[str]) -> tuple[float, list[float]] | None:
    """Seconds for all of `names` in batch puts of BATCH jobs, and each request's seconds;
    None from a server without the batch put (an older release, for a side-by-side run)."""
    client, latencies = Client(port), []
    began = time.perf_counter()
    for start in range(0, len(names), BATCH):
        entries = [{"id": name, "job": job_body(int(name.split("-")[-1]))} for name in names[start:start + BATCH]]
        started = time.perf_counter()
        status, body = client.call("POST", f"/api/v1/projects/{PROJECT}/jobs:batchPut", {"jobs": entries})
        latencies.append(time.perf_counter() - started)
        if status == 404:
            return None
        statuses = {result["status"] for result in json.loads(body)["results"]} if status == 200 else set()
        if statuses != {201}:
            raise SystemExit(f"batch put: {status} {body[:300]!r}")
    return time.perf_counter() - began, sorted(latencies)


def apscheduler_adds(python: str, tmp: Path, count: int) -> float | None:
    """APScheduler's add_job rate on its SQLite store (bench/aps_adds.py); None without it."""
    if not python:
        return None
    done = subprocess.run([python, str(ROOT / "bench" / "aps_adds.py"), "--db", str(tmp / "aps.db"),
                           "--jobs", str(count)], capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not done.stdout.startswith("added "):
        raise SystemExit(f"bench/aps_adds.py failed: {done.stderr[-1000:]}")
    return count / float(done.stdout.split()[1])


HISTORY_COMMIT = 400  # invocation rows a commit (the budget is 500 entities)


def write_history(db: Path, job: str, count: int) -> None:
    store = SqliteJobStore(db)
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)

    def body(minutes: range):
        def write(tx):
            for minute in minutes:
                scheduled = start + timedelta(minutes=minute)
                tx.put_invocation(InvocationRow(
                    PROJECT, job, ids.invocation_id(PROJECT, job, scheduled, ids.OCCURRENCE), "SUCCEEDED",
                    scheduled, "schedule", created_time=scheduled, started_time=scheduled,
                    finished_time=scheduled + timedelta(seconds=1), attempt=1,
                    log=[{"time": scheduled.isoformat(), "message": "created", "trigger": "schedule"}]))
        return write

    # In commits within the store's budget (statemachine/budget.py: 500 entities), which
    # refuses a larger one as Datastore would.
    for first in range(0, count, HISTORY_COMMIT):
        store.run_in_transaction(body(range(first, min(first + HISTORY_COMMIT, count))))


def list_all(port: int, job: str, page_size: int) -> tuple[int, int, float]:
    client, token, seen, pages = Client(port), None, 0, 0
    started = time.perf_counter()
    while True:
        query = f"?page_size={page_size}" + (f"&page_token={token}" if token else "")
        status, body = client.call("GET", f"/api/v1/projects/{PROJECT}/jobs/{job}/invocations{query}")
        page = json.loads(body)
        seen, pages, token = seen + len(page["invocations"]), pages + 1, page["next_page_token"]
        if not token:
            return seen, pages, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2000, help="jobs to create per measurement")
    parser.add_argument("--threads", type=int, default=4, help="concurrent clients for the second measurement")
    parser.add_argument("--invocations", type=int, default=10_000)
    parser.add_argument("--aps-python", default="", help="an interpreter with APScheduler 3.x (requirements-bench.txt)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp, port = Path(name), free_port()
        server = start_server(tmp, port)
        try:
            line("machine", f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
            rates = measure_creations(port, args.jobs, args.threads, server.pid)
            list_history(tmp, port, args.invocations)
        finally:
            server.terminate()
            server.wait(15)
        aps = apscheduler_adds(args.aps_python, tmp, args.jobs)
        if aps is not None:
            line("APScheduler add_job (SQLAlchemy on SQLite), 1 thread", f"{aps:,.0f}/s")
            for label, rate in rates.items():
                line(f"  {label} / APScheduler", f"{rate / aps:.1f}x")


def measure_creations(port: int, jobs: int, threads: int, pid: int) -> dict[str, float]:
    """Each way of creating `jobs` jobs: its rate, latencies and the server's CPU per job."""
    one, many = [f"one-{i}" for i in range(jobs)], [f"many-{i}" for i in range(jobs)]
    rates: dict[str, float] = {}
    for title, key, names, clients, expect in (
            ("PUT creations, 1 client", "PUT, 1 client", one, 1, 201),
            (f"PUT creations, {threads} clients", f"PUT, {threads} clients", many, threads, 201),
            ("PUT unchanged (idempotent), 1 client", "", one, 1, 200)):
        cpu = server_cpu(pid)
        elapsed, latencies = timed_puts(port, names, clients, expect)
        rate = report_puts(title, jobs, elapsed, latencies, server_cpu(pid) - cpu)
        if key:
            rates[key] = rate
    cpu = server_cpu(pid)
    batched = batch_put(port, [f"batch-{i}" for i in range(jobs)])
    if batched is None:
        line("batch put creations", "not served (404)")
        return rates
    elapsed, latencies = batched
    rates["batch put"] = jobs / elapsed
    line(f"batch put creations, {BATCH:,} a request, 1 client",
         f"{jobs / elapsed:,.0f} jobs/s  (p50 {latencies[len(latencies) // 2] * 1000:.0f} ms a request; "
         f"server CPU {(server_cpu(pid) - cpu) / jobs * 1000:.2f} ms a job)")
    return rates


def list_history(tmp: Path, port: int, invocations: int) -> None:
    Client(port).call("PUT", f"/api/v1/projects/{PROJECT}/jobs/history",
                      {"schedule": "triggered", "target": {"noop": {}}})
    write_history(tmp / "sundial.db", "history", invocations)
    for page_size in (100, 1000):
        seen, pages, elapsed = list_all(port, "history", page_size)
        line(f"list {seen:,} invocations, page_size {page_size}",
             f"{elapsed * 1000:,.0f} ms ({pages} pages, {elapsed / pages * 1000:.1f} ms/page)")

if __name__ == "__main__":
    main()
