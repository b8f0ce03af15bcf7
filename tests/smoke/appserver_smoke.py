"""Smoke run of the deployment: the app as App Engine would run it, under the Cloud
SDK's local App Engine server (`dev_appserver.py`) with the repository's app.yaml.

    python -m tests.smoke.appserver_smoke [--store datastore|firestore] [--keep]
    make appserver-smoke

What it does, and checks:

1. Stages the upload: the repository as `.gcloudignore` leaves it (so a file the app
   needs but the ignore list drops fails here), plus `configs/smoke.yaml`, one job
   every two seconds whose HTTP target is a receiver on 127.0.0.1.
2. Starts the Datastore emulator (with --require_indexes and index.yaml; or the
   Firestore emulator in Datastore mode) and gcloud-tasks-emulator, whose App Engine
   tasks go to the app's port and whose HTTP tasks go to SUNDIAL_SERVICE_URL, the same
   port: the chain reaches the app whichever task form it uses.
3. Starts dev_appserver.py on the staged app.yaml: it makes a virtualenv, pip-installs
   requirements.txt into it (PyPI or pip's cache must be reachable) and runs app.yaml's
   entrypoint (gunicorn main:app) with app.yaml's env_variables, GAE_APPLICATION set,
   as on App Engine.
4. The config import cron (`X-Appengine-Cron: true`, as App Engine's cron sends it)
   imports the project; the chain's ticks and starts go through the tasks emulator to
   the app, and the deliveries reach the receiver, one invocation id per occurrence.
5. The watchdog cron answers; a request from outside to /internal/tasks/* or
   /internal/cron/* without credentials is refused (403).

It prints how long each phase took and exits 1 on the first failed check, with the tail
of dev_appserver's log. Needs the Google Cloud CLI (dev_appserver.py and its bundled
Python, the app-engine-python component), java for the emulators and .venv-tasks.
Slow (a virtualenv and a pip install at every run), so `make test` leaves it out;
SUNDIAL_APPSERVER_SMOKE=1 runs it as tests/smoke/test_appserver_smoke.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.e2e.support import Receiver, wait_until  # noqa: E402
from tests.smoke.upload import load_rules, upload_set, working_tree_files  # noqa: E402
from tests.support.emulators import DatastoreEmulator, FirestoreEmulator, TasksEmulator, free_port  # noqa: E402

SDK = Path(os.environ.get("SUNDIAL_GCLOUD_SDK", "/usr/lib/google-cloud-sdk"))
DEV_APPSERVER = SDK / "bin" / "dev_appserver.py"
# dev_appserver runs on the SDK's own Python; the system's certifi breaks it.
SDK_PYTHON = SDK / "platform" / "bundledpythonunix" / "bin" / "python3"
PROJECT = "sundial-test"  # the tasks emulator's default queue lives in this project
CONFIG = """
allowed_hosts: ["127.0.0.1"]
jobs:
  - id: every-two
    schedule: "*/2 * * * * ?"
    target: {{http: {{url: "{url}/smoke"}}}}
"""
CRON = {"X-Appengine-Cron": "true"}
DELIVERIES = 3  # occurrences to see delivered: each a tick and a start task before it
START_TIMEOUT = 600.0  # a cold pip cache downloads every wheel
TASK_REQUEST = re.compile(r'"POST /internal/tasks/([a-z-]+) HTTP/1\.1" (\d{3})')


class SmokeFailure(Exception):
    pass


def unavailable() -> str | None:
    """Why the smoke cannot run here, or None."""
    for needed in (DEV_APPSERVER, SDK_PYTHON):
        if not needed.exists():
            return f"{needed} is missing (the Google Cloud CLI with the app-engine-python component)"
    return DatastoreEmulator().unavailable() or TasksEmulator().unavailable()


def stage_app(target: Path, receiver_url: str) -> Path:
    """The files `gcloud app deploy` would upload, and a configs/ directory of one project."""
    for relative in sorted(upload_set(load_rules(ROOT), working_tree_files(ROOT))):
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, target / relative)
    configs = target / "configs"
    configs.mkdir(exist_ok=True)
    (configs / "smoke.yaml").write_text(CONFIG.format(url=receiver_url))
    return target / "app.yaml"


def appserver_argv(app_yaml: Path, port: int, venv: Path, env: dict[str, str]) -> list[str]:
    runtime_python = os.environ.get("SUNDIAL_APPSERVER_PYTHON") or shutil.which("python3") or sys.executable
    return [
        str(SDK_PYTHON), str(DEV_APPSERVER), f"--port={port}", f"--admin_port={free_port()}",
        f"--api_port={free_port()}", "--host=127.0.0.1", "--admin_host=127.0.0.1",
        f"--runtime_python_path={runtime_python}", f"--python_virtualenv_path={venv}",
        "--skip_sdk_update_check=true", "--automatic_restart=false", f"--application={PROJECT}",
        *[f"--env_var={name}={value}" for name, value in env.items()], str(app_yaml),
    ]


def call(port: int, method: str, path: str, headers: dict | None = None, body: bytes | None = None):
    """(status, parsed JSON or None); status 0 when nothing answers."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            status, raw = answer.status, answer.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    except OSError:
        return 0, None
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, None


class Smoke:
    def __init__(self, store: str, keep: bool):
        self.store, self.keep = store, keep
        self.workdir = Path(tempfile.mkdtemp(prefix="sundial-appserver-smoke-"))
        self.log_path = self.workdir / "dev_appserver.log"
        self.port = free_port()
        self.receiver = Receiver()
        self.database = FirestoreEmulator() if store == "firestore" else DatastoreEmulator()
        self.tasks = TasksEmulator(target_port=self.port)  # App Engine tasks come to the app's port
        self.appserver: subprocess.Popen | None = None
        self.figures: dict[str, float | int | str] = {"store": store}
        self.started = time.monotonic()

    def mark(self, name: str, since: float) -> float:
        now = time.monotonic()
        self.figures[name] = round(now - since, 1)
        print(f"[smoke] {name}: {now - since:.1f}s", flush=True)
        return now

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            raise SmokeFailure(what)
        print(f"[smoke] ok: {what}", flush=True)

    def run(self) -> dict:
        began = time.monotonic()
        self.database.start()
        self.tasks.start()
        began = self.mark("emulators_s", began)
        self.start_appserver()
        began = self.mark("appserver_start_s", began)
        self.check(call(self.port, "GET", "/internal/cron/import-configs", CRON) == (200, {"import-configs": 1}),
                   "the import cron imported the staged project")
        self.check(wait_until(self.delivered_enough, timeout=60, interval=0.5),
                   f"{DELIVERIES} occurrences delivered to the receiver through the tasks emulator")
        began = self.mark("import_to_deliveries_s", began)
        self.check_deliveries()
        self.check(call(self.port, "GET", "/internal/cron/watchdog", CRON)[0] == 200, "the watchdog cron answered")
        self.check_refusals()
        self.count_task_requests()
        self.mark("total_s", self.started)
        return self.figures

    def start_appserver(self) -> None:
        app_yaml = stage_app(self.workdir / "app", self.receiver.url)
        env = {
            "GOOGLE_CLOUD_PROJECT": PROJECT,
            "DATASTORE_EMULATOR_HOST": self.database.host,
            "SUNDIAL_TASKS_EMULATOR_HOST": self.tasks.host,
            "SUNDIAL_SERVICE_URL": f"http://127.0.0.1:{self.port}",
        }
        argv = appserver_argv(app_yaml, self.port, self.workdir / "venv", env)
        with open(self.log_path, "wb") as log:
            self.appserver = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.workdir,
                env={**os.environ, "CLOUDSDK_PYTHON": str(SDK_PYTHON)}, start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while call(self.port, "GET", "/healthz")[0] != 200:
            if self.appserver.poll() is not None:
                raise SmokeFailure(f"dev_appserver exited with {self.appserver.returncode}")
            if time.monotonic() > deadline:
                raise SmokeFailure(f"the app did not answer /healthz within {START_TIMEOUT:.0f}s")
            time.sleep(1)
        log = self.log_path.read_text(errors="replace")
        self.check("Starting gunicorn" in log, "the app runs app.yaml's entrypoint (gunicorn)")

    def occurrences(self) -> dict[str, set[str]]:
        ids = defaultdict(set)
        for arrival in self.receiver.at_path("/smoke"):
            ids[arrival.headers["X-Sundial-Scheduled-Time"]].add(arrival.headers["X-Sundial-Invocation"])
        return ids

    def delivered_enough(self) -> bool:
        return len(self.occurrences()) >= DELIVERIES

    def check_deliveries(self) -> None:
        ids = self.occurrences()
        self.figures["occurrences_delivered"] = len(ids)
        self.check(all(len(group) == 1 for group in ids.values()), "one invocation id per occurrence")
        lateness = [a.lateness for a in self.receiver.at_path("/smoke")]
        self.figures["max_lateness_s"] = round(max(lateness), 2)

    def check_refusals(self) -> None:
        tick = json.dumps({"name": "forged", "kind": "tick", "payload": {}}).encode()
        for method, path, body in (("POST", "/internal/tasks/tick", tick),
                                   ("POST", "/internal/tasks/start-invocation", tick),
                                   ("GET", "/internal/cron/import-configs", None)):
            status, _ = call(self.port, method, path, body=body)
            self.check(status == 403, f"{method} {path} from outside, no credentials: {status}")

    def count_task_requests(self) -> None:
        counts: dict[str, int] = defaultdict(int)
        for handler, status in TASK_REQUEST.findall(self.log_path.read_text(errors="replace")):
            counts[f"{handler} {status}"] += 1
        self.figures["task_requests"] = json.dumps(dict(sorted(counts.items())))
        self.check(counts.get("tick 200", 0) >= DELIVERIES, "tick tasks reached the app and were answered 200")

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def close(self) -> None:
        if self.appserver is not None and self.appserver.poll() is None:
            os.killpg(self.appserver.pid, signal.SIGTERM)  # dev_appserver and the gunicorn it started
            try:
                self.appserver.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.appserver.pid, signal.SIGKILL)
                self.appserver.wait(10)
        self.tasks.stop()
        self.database.stop()
        self.receiver.close()
        if self.keep:
            print(f"[smoke] kept {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)


def run_smoke(store: str = "datastore", keep: bool = False) -> dict:
    """Run the smoke; its figures, or SmokeFailure with the log's tail."""
    smoke = Smoke(store, keep)
    try:
        return smoke.run()
    except SmokeFailure as failure:
        raise SmokeFailure(f"{failure}\n--- dev_appserver log (tail) ---\n{smoke.log_tail()}") from None
    finally:
        smoke.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("datastore", "firestore"), default="datastore")
    parser.add_argument("--keep", action="store_true", help="keep the staged app and dev_appserver's log")
    args = parser.parse_args(argv)
    reason = unavailable()
    if reason:
        print(f"[smoke] cannot run: {reason}", file=sys.stderr)
        return 2
    try:
        figures = run_smoke(args.store, args.keep)
    except SmokeFailure as failure:
        print(f"[smoke] FAILED: {failure}", file=sys.stderr)
        return 1
    print(f"[smoke] passed: {json.dumps(figures)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
