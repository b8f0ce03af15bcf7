"""The CPU one invocation costs the app on the cloud path, measured in this process.

    python bench/cloud_cpu.py [--jobs 10] [--warmup 15] [--seconds 40]

Starts the Datastore emulator and gcloud-tasks-emulator (separate processes), and a
target that answers 200 (a third process). This process builds the cloud runtime as
App Engine's gunicorn would (app/bootstrap.py `build_cloud`: the real DatastoreJobStore,
the real CloudTasksQueue creating tasks in the emulator over gRPC) and serves its Flask
app with waitress on the port the tasks emulator dispatches to. `--jobs` jobs fire every
second with an `http` target; after a warm-up, the process's CPU time
(time.process_time: every thread, user and system) over `--seconds` is divided by the
invocations the target received in that time. Everything an App Engine instance does for
an invocation is in it: the task request's HTTP framing, Flask, the guard, the engine,
two ndb transactions, CreateTask for the next tick, the outbound request to the target,
and the housekeeping loops `serve` runs (the watchdog, the config import), which App
Engine runs from cron instead: they are a small share at one occurrence a second a job.

The emulators' own CPU (their process trees, from /proc) is printed apart: production's
Datastore and Cloud Tasks do that work on Google's machines, not on the instance.
The figure is this machine's; the model (bench/scale_simulation.py) scales it to an F2.
Run it on a quiet machine: the process's fixed work (its threads, the loops) is divided by
the invocations delivered, so a loaded machine that starves the emulators makes the
figure larger (docs/COST.md gives two runs).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.bootstrap import build_cloud  # noqa: E402
from app.listener import Application, open_listener  # noqa: E402
from config.settings import from_environment  # noqa: E402
from tests.support.emulators import DatastoreEmulator, TasksEmulator, cloud_server_env, free_port  # noqa: E402

# A target in its own process (its CPU is not the app's): answers 200, one byte per request to a file.
TARGET = textwrap.dedent("""
    import sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    count = open(sys.argv[2], "ab", buffering=0)
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
            count.write(b".")
        def log_message(self, *args):
            pass
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
""")

CONFIG = """
allowed_hosts: ["127.0.0.1"]
jobs:
"""
JOB = """  - id: cpu-{index}
    schedule: "* * * * * ?"
    target: {{http: {{url: "http://127.0.0.1:{port}/hit"}}}}
"""


def tree_cpu_seconds(root: int) -> float:
    """User and system CPU of process `root` and its descendants (from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents, cpu = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        cpu[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo += [child for child, parent in parents.items() if parent == pid]
    return total


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{model}, {os.cpu_count()} cores, load average {load}, Python {platform.python_version()}"


class Sample:
    """The app's CPU, the emulators' CPU and the target's count at one moment."""

    def __init__(self, emulators: list[int], hits: Path):
        self.at, self.app = time.monotonic(), time.process_time()
        self.emulators = sum(tree_cpu_seconds(pid) for pid in emulators)
        self.hits = hits.stat().st_size if hits.exists() else 0


def measure(jobs: int, warmup: float, seconds: float) -> dict[str, float]:
    """CPU seconds per invocation: the app's (this process) and the emulators'."""
    work = Path(tempfile.mkdtemp(prefix="sundial-cpu-"))
    hits, port, target_port = work / "hits", free_port(), free_port()
    (work / "configs").mkdir()
    (work / "configs" / "cpu.yaml").write_text(CONFIG + "".join(JOB.format(index=i, port=target_port)
                                                                for i in range(jobs)))
    datastore, tasks = DatastoreEmulator(), TasksEmulator(target_port=port)
    for emulator in (datastore, tasks):
        reason = emulator.unavailable()
        if reason:
            raise SystemExit(f"cannot measure: {reason}")
    target = subprocess.Popen([sys.executable, "-c", TARGET, str(target_port), str(hits)])
    datastore.start()
    tasks.start()
    try:
        return _run(datastore, tasks, work, port, hits, warmup, seconds)
    finally:
        target.terminate()
        target.wait(10)
        tasks.stop()
        datastore.stop()


def _run(datastore, tasks, work: Path, port: int, hits: Path, warmup: float, seconds: float) -> dict[str, float]:
    env = {**cloud_server_env(datastore, tasks, "sundial", port), "SUNDIAL_CONFIG_DIR": str(work / "configs"),
           "SUNDIAL_LOG_LEVEL": "warning"}
    os.environ["DATASTORE_EMULATOR_HOST"] = datastore.host  # ndb reads it from the process's environment
    runtime = build_cloud(from_environment(env))
    application = Application()
    application.app = runtime.app
    server = open_listener("127.0.0.1", port, application)
    threading.Thread(target=server.run, name="bench-listener", daemon=True).start()
    runtime.start()
    emulators = [e.process.process.pid for e in (datastore, tasks) if e.process and e.process.process]
    time.sleep(warmup)
    first = Sample(emulators, hits)
    time.sleep(seconds)
    last = Sample(emulators, hits)
    runtime.stop()
    server.close()
    invocations = last.hits - first.hits
    if invocations < 1:
        raise SystemExit("no invocation reached the target while measuring")
    return {"invocations": invocations, "wall": last.at - first.at,
            "app": (last.app - first.app) / invocations,
            "emulators": (last.emulators - first.emulators) / invocations}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10, help="jobs firing every second")
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    figures = measure(args.jobs, args.warmup, args.seconds)
    print(f"cloud cpu: {figures['invocations']:.0f} invocations in {figures['wall']:.1f} s "
          f"({args.jobs} jobs every second)")
    print(f"  app CPU per invocation (this process)      {figures['app'] * 1000:7.1f} ms")
    print(f"  emulators' CPU per invocation (left out)   {figures['emulators'] * 1000:7.1f} ms")
    print(f"machine after: {machine()}")


if __name__ == "__main__":
    main()
