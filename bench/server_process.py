"""The server under test: `python main.py serve` as a subprocess (or several on one
database), its configs directory, and what /proc and its database say about it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

from bench.output import PROJECT, ROOT, line, note
from tests.support.records import MAX_JOB_RECORD_BYTES, RecordWatch

RECORD_SAMPLE_SECONDS = 2.0  # how often a run's job records are measured (a read of the jobs table)

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def proc_status(pid: int) -> dict[str, int]:
    """VmHWM / VmRSS in kB, and Threads, from /proc."""
    out = {}
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = row.partition(":")
        if key in ("VmHWM", "VmRSS", "Threads"):
            out[key] = int(value.split()[0])
    return out


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def child_pids(pid: int) -> list[int]:
    """The live children of `pid` (serve's dispatcher processes)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _gone_is_zero(read, pid: int, zero):
    try:
        return read(pid)
    except OSError:  # a child that exited between listing and reading
        return zero


class ServerProcess:
    """`python main.py serve` with default settings (plus `env`) on a free port."""

    def __init__(self, workdir: Path, env: dict[str, str], index: int = 0):
        self.workdir = workdir
        self.configs = workdir / "configs"
        self.db = workdir / "sundial.db"
        self.log_path = workdir / (f"server-{index}.log" if index else "server.log")
        self.port = free_port()
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
        self.process: subprocess.Popen | None = None
        self.spawned_at = 0.0
        self.profilers: list[subprocess.Popen] = []

    @property
    def pid(self) -> int:
        return self.process.pid

    def start(self) -> None:
        self.log = open(self.log_path, "ab")
        self.spawned_at = time.time()
        self.process = subprocess.Popen(
            [sys.executable, "main.py", "serve", "--port", str(self.port),
             "--db", str(self.db), "--configs", str(self.configs)],
            cwd=ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 60) -> float:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=5):
                    return time.time()
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"server did not start: {self.log_path.read_text()[-2000:]}")

    def wait_imported(self, timeout: float) -> float:
        """When the project row has a config hash (the importer writes it after every job;
        the bench starts on a new database, so any hash is this file's: the server's hash
        also covers its grants and names, app/importer.py, so it is not the file's sha256).
        Read straight from the database, read-only, so that polling costs the server nothing."""
        deadline = time.time() + timeout
        conn = None
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text()[-2000:]}")
            try:
                if conn is None:
                    conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5)
                row = conn.execute("SELECT config_hash FROM projects WHERE id = ?", (PROJECT,)).fetchone()
                if row and row[0]:
                    conn.close()
                    return time.time()
            except sqlite3.Error:
                if conn is not None:
                    conn.close()
                conn = None
            time.sleep(0.05)
        raise RuntimeError("config import did not finish in time")

    def status(self) -> dict[str, int]:
        """Summed over serve and its dispatcher processes (`serve --processes N`)."""
        total: Counter = Counter()
        for pid in self._pids():
            total.update(_gone_is_zero(proc_status, pid, {}))
        return dict(total)

    def cpu_seconds(self) -> float:
        return sum(_gone_is_zero(proc_cpu_seconds, pid, 0.0) for pid in self._pids())

    def _pids(self) -> list[int]:
        return [self.pid] + child_pids(self.pid)

    def start_profile(self, out: Path, seconds: float) -> None:
        """Two py-spy recordings in collapsed-stack text (bench/profile_summary.py reads
        them): `<out>-gil.txt` samples only the thread holding the GIL (where CPU goes),
        `<out>-wall.txt` every thread, idle ones included (where threads wait)."""
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if not Path(py_spy).exists():
            note("py-spy not found: no profile (pip install py-spy)")
            return
        for mode, flag in (("gil", "--gil"), ("wall", "--idle")):
            target = out.with_name(f"{out.stem}-{mode}.txt")
            self.profilers.append(subprocess.Popen(
                [py_spy, "record", "--pid", str(self.pid), "--duration", str(int(seconds)), "--rate", "100",
                 "--format", "raw", "--threads", "--nonblocking", flag, "-o", str(target)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))
            note(f"py-spy recording {int(seconds)} s into {target}")

    def stop(self) -> None:
        for profiler in self.profilers:
            try:
                profiler.wait(timeout=120)
            except subprocess.TimeoutExpired:
                profiler.send_signal(signal.SIGINT)
                profiler.wait(10)
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.log.close()


def invocation_counts(db: Path, low: float, high: float) -> Counter:
    """What the server recorded for the occurrences scheduled in [low, high): {(status, reason): count}."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        rows = conn.execute(
            "SELECT status, reason, count(*) FROM invocations WHERE scheduled_time >= ? AND scheduled_time < ?"
            " GROUP BY status, reason", (low, high)).fetchall()
    finally:
        conn.close()
    return Counter({(status, reason or ""): count for status, reason, count in rows})


def invocation_outcomes(db: Path, low: float, high: float) -> str:
    """The same as one line of text: status/reason counts, largest first."""
    try:
        counts = invocation_counts(db, low, high)
    except sqlite3.Error as error:
        return f"(cannot read the database: {error})"
    return ", ".join(f"{status}{'/' + reason if reason else ''} {count:,}"
                     for (status, reason), count in counts.most_common()) or "none"


class Fleet:
    """`count` server processes on one database and one configs directory (the embedded
    backend lets several processes share the queue); reads as one server."""

    def __init__(self, workdir: Path, env: dict[str, str], count: int = 1):
        self.members = [ServerProcess(workdir, env, index) for index in range(max(1, count))]
        first = self.members[0]
        self.configs, self.db = first.configs, first.db

    @property
    def spawned_at(self) -> float:
        return self.members[0].spawned_at

    def start(self) -> None:
        for member in self.members:
            member.start()

    def wait_ready(self) -> float:
        return max(member.wait_ready() for member in self.members)

    def wait_imported(self, timeout: float) -> float:
        return self.members[0].wait_imported(timeout)

    def cpu_seconds(self) -> float:
        return sum(member.cpu_seconds() for member in self.members)

    def status(self) -> dict[str, int]:
        total: Counter = Counter()
        for member in self.members:
            total.update(member.status())
        return dict(total)

    def start_profile(self, out: Path, seconds: float) -> None:
        self.members[0].start_profile(out, seconds)

    def stop(self) -> None:
        for member in self.members:
            member.stop()


def write_config(configs: Path, jobs: list[str]) -> None:
    configs.mkdir(parents=True, exist_ok=True)
    (configs / f"{PROJECT}.yaml").write_text("jobs:\n" + "".join(jobs))


def server_env(args) -> dict[str, str]:
    env = {}
    for item in args.env:
        key, _, value = item.partition("=")
        env[key] = value
    return env


def process_figures(server, cpu: float, wall: float) -> dict:
    """Peak RSS (VmHWM) and RSS now in MiB, threads, and CPU as a share of one core."""
    status = server.status()
    return {"rss_peak_mib": status.get("VmHWM", 0) / 1024, "rss_mib": status.get("VmRSS", 0) / 1024,
            "threads": status.get("Threads", 0), "cpu_s": cpu, "wall_s": wall,
            "cpu_share": cpu / wall if wall > 0 else 0.0}


def report_process(prefix: str, server, cpu: float, wall: float, what: str = "") -> dict:
    fig = process_figures(server, cpu, wall)
    processes = len(getattr(server, "members", [server]))
    what = what or ("server" if processes == 1 else f"{processes} servers'")
    line(f"{prefix} {what} peak RSS (VmHWM)", f"{fig['rss_peak_mib']:,.1f} MiB "
                                              f"(RSS now {fig['rss_mib']:,.1f} MiB, {fig['threads']} threads)")
    line(f"{prefix} {what} CPU", f"{cpu:,.1f} s over {wall:,.1f} s = {fig['cpu_share']:.0%} of one core"
                                 if wall > 0 else "n/a")
    return fig


def watch_records(server) -> RecordWatch:
    """The largest job record in the server's database over a run, sampled from now on
    (tests/support/records.py); `report_records` ends the watch and prints it."""
    return RecordWatch.of_sqlite(server.db).every(RECORD_SAMPLE_SECONDS)


def report_records(prefix: str, watch: RecordWatch) -> dict:
    """Print the largest stored job record against MAX_JOB_RECORD_BYTES;
    `record_within_bound` False makes the bench exit 1 after printing everything."""
    peak = watch.stop()
    within = peak.bytes <= MAX_JOB_RECORD_BYTES
    line(f"{prefix} largest stored job record", f"{peak}, {watch.samples} samples; bound "
         f"{MAX_JOB_RECORD_BYTES:,} bytes: {'within' if within else 'OVER THE BOUND'}")
    return {"largest_job_record_bytes": peak.bytes, "record_within_bound": within}
