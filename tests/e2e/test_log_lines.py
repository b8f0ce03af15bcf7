"""Every line a serving process writes to stderr is one JSON object with Cloud Logging's
`severity`, `message` and `time`: its own log records, the libraries' records, Python's
warnings, uncaught exceptions (of the main thread and of others) and the exceptions
Python ignores; and SUNDIAL_LOG_LEVEL sets the threshold.

The servers are real processes (`main.py serve`, and app.yaml's gunicorn entrypoint).
What misbehaves in them is put there by a `sitecustomize` module on PYTHONPATH: a thread
(in each process, forked ones included) that waits for a file to appear, then warns
through a Google library, logs as a library would, lets a thread die and an exception
go unraised, and says it is done.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from tests.e2e.support import ROOT, Receiver, Server, free_port, wait_until

SITECUSTOMIZE = '''
import os
import threading
import time


def _misbehave(trigger, done):
    while not os.path.exists(trigger):
        time.sleep(0.05)
    import logging
    from datetime import date

    from google.api_core._python_version_support import check_python_version

    check_python_version("google.cloud.ndb", today=date(2100, 1, 1))  # a FutureWarning, as issue 31 saw
    logging.getLogger("google.auth._default").warning("a library's %s", "warning")

    def fail():
        raise RuntimeError("boom in a thread")

    thread = threading.Thread(target=fail, name="doomed")
    thread.start()
    thread.join()

    class Leaky:
        def __del__(self):
            raise ValueError("ignored in a finalizer")

    Leaky()
    open(done + "." + str(os.getpid()), "w").close()


def _start():
    threading.Thread(target=_misbehave, daemon=True,
                     args=(os.environ["LOG_LINES_TRIGGER"], os.environ["LOG_LINES_DONE"])).start()


if os.environ.get("LOG_LINES_TRIGGER"):
    _start()
    os.register_at_fork(after_in_child=_start)  # gunicorn's workers are forked from its master
'''
CONFIG = """
jobs:
  - id: fine
    schedule: triggered
    target: {{http: {{url: "{url}/fine"}}}}
  - id: broken
    schedule: triggered
    retry: {{max_attempts: 1}}
    target: {{http: {{url: "{url}/broken"}}}}
"""


def json_lines(path: Path) -> list[dict]:
    """Every line of the file, each of which must be one JSON object of Cloud Logging's shape."""
    entries = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            entry = json.loads(line)
        except ValueError:
            pytest.fail(f"{path.name} line {number} is not JSON: {line[:300]!r}")
        assert entry["severity"] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), entry
        assert isinstance(entry["message"], str) and entry["message"], entry
        assert entry["time"].endswith("Z")
        datetime.fromisoformat(entry["time"].replace("Z", "+00:00"))  # RFC 3339
        entries.append(entry)
    return entries


def misbehaving_env(tmp: Path) -> dict[str, str]:
    """The environment that makes a process misbehave once `tmp/trigger` exists."""
    (tmp / "site").mkdir(exist_ok=True)
    (tmp / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": str(tmp / "site") + (os.pathsep + path if path else ""),
            "LOG_LINES_TRIGGER": str(tmp / "trigger"), "LOG_LINES_DONE": str(tmp / "done")}


def misbehave(tmp: Path, processes: int = 1) -> None:
    (tmp / "trigger").touch()
    assert wait_until(lambda: len(list(tmp.glob("done.*"))) >= processes, 30), "the misbehaving thread never ended"


def assert_misbehaviour_logged(entries: list[dict]) -> None:
    by_message = {entry["message"]: entry for entry in entries}
    warning = next(e for e in entries if "google.cloud.ndb" in e["message"])
    assert (warning["severity"], warning["logger"], warning["category"]) == ("WARNING", "py.warnings", "FutureWarning")
    library = by_message["a library's warning"]
    assert (library["severity"], library["logger"]) == ("WARNING", "google.auth._default")
    thread = by_message["uncaught exception in a thread: RuntimeError: boom in a thread"]
    assert thread["severity"] == "ERROR" and thread["thread"] == "doomed"
    assert "Traceback" in thread["stack_trace"] and "in fail" in thread["stack_trace"]
    ignored = next(e for e in entries if "ValueError: ignored in a finalizer" in e["message"])
    assert ignored["severity"] == "ERROR" and "in __del__" in ignored["stack_trace"]


@pytest.fixture
def receiver():
    receiver = Receiver(statuses={"/broken": 500})
    yield receiver
    receiver.close()


def start_server(tmp: Path, receiver: Receiver, env: dict[str, str]) -> Server:
    configs = tmp / "configs"
    configs.mkdir()
    (configs / "logs.yaml").write_text(CONFIG.format(url=receiver.url))
    return Server(configs, tmp / "s.db", tmp / "stdout.log", env=env, stderr_log=tmp / "stderr.log").start()


def run_both_jobs(server: Server) -> None:
    for job, status in (("fine", "SUCCEEDED"), ("broken", "FAILED")):
        assert server.call("POST", f"/api/v1/projects/logs/jobs/{job}:trigger")[0] == 200
        assert wait_until(lambda: [i["status"] for i in server.invocations("logs", job)] == [status], 20)


def test_serves_stderr_is_json_lines_only_warnings_library_records_and_crashes_included(tmp_path, receiver):
    # Two processes: the server and a dispatcher child, which writes to the same stderr
    # and misbehaves while it is still starting (it takes a second or more).
    server = start_server(tmp_path, receiver, {**misbehaving_env(tmp_path), "SUNDIAL_PROCESSES": "2"})
    try:
        run_both_jobs(server)
        misbehave(tmp_path, processes=2)
    finally:
        server.stop()
    entries = json_lines(tmp_path / "stderr.log")
    assert_misbehaviour_logged(entries)
    assert sum("boom in a thread" in entry["message"] for entry in entries) == 2  # one from each
    messages = [entry["message"] for entry in entries]
    assert "imported project" in messages and "invocation failed" in messages  # its own lines, as before
    assert "serving on" in (tmp_path / "stdout.log").read_text()  # the banner is for people, on stdout


def test_sundial_log_level_warning_leaves_out_info_lines(tmp_path, receiver):
    server = start_server(tmp_path, receiver, {"SUNDIAL_LOG_LEVEL": "warning"})
    try:
        run_both_jobs(server)
    finally:
        server.stop()
    entries = json_lines(tmp_path / "stderr.log")
    assert {entry["severity"] for entry in entries} <= {"WARNING", "ERROR", "CRITICAL"}
    failed = [entry for entry in entries if entry["message"] == "delivered"]
    assert [(entry["severity"], entry["job"]) for entry in failed] == [("WARNING", "logs/broken")]
    assert "invocation failed" in [entry["message"] for entry in entries]


def test_an_unknown_log_level_stops_serve_with_one_line_naming_the_variable(tmp_path):
    done = subprocess.run([sys.executable, "main.py", "serve", "--port", str(free_port()),
                           "--db", str(tmp_path / "s.db"), "--configs", str(tmp_path)],
                          cwd=ROOT, env={**os.environ, "SUNDIAL_LOG_LEVEL": "LOUD"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr == "SUNDIAL_LOG_LEVEL: expected one of DEBUG, INFO, WARNING, ERROR, got 'LOUD'\n"
    assert "serving on" not in done.stdout


def gunicorn_entrypoint(port: int) -> list[str]:
    """app.yaml's entrypoint, with $PORT filled in and gunicorn from this virtualenv."""
    words = yaml.safe_load((ROOT / "app.yaml").read_text())["entrypoint"].replace("$PORT", str(port)).split()
    assert words[0] == "gunicorn"
    return [str(Path(sys.executable).parent / "gunicorn"), *words[1:]]


def test_app_yamls_gunicorn_writes_json_lines_only(tmp_path):
    # The embedded backend (the entrypoint is the same on either): gunicorn's own lines,
    # and the workers' (app.yaml starts 2), with what misbehaves in each of the three.
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "logs.yaml").write_text("jobs: []\n")
    port = free_port()
    env = {**os.environ, **misbehaving_env(tmp_path), "SUNDIAL_BACKEND": "local",
           "SUNDIAL_DB": str(tmp_path / "s.db"), "SUNDIAL_CONFIG_DIR": str(tmp_path / "configs")}
    with open(tmp_path / "stderr.log", "wb") as stderr, open(tmp_path / "stdout.log", "wb") as stdout:
        server = subprocess.Popen(gunicorn_entrypoint(port), cwd=ROOT, env=env, stdout=stdout, stderr=stderr)
    try:
        assert wait_until(lambda: _answers(port) or server.poll() is not None, 60)
        assert server.poll() is None, (tmp_path / "stderr.log").read_text()[-3000:]
        misbehave(tmp_path, processes=3)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    entries = json_lines(tmp_path / "stderr.log")
    assert_misbehaviour_logged(entries)
    gunicorns = [entry["message"] for entry in entries if entry["logger"] == "gunicorn.error"]
    assert gunicorns[0].startswith("Starting gunicorn") and "Shutting down: Master" in gunicorns
    assert "imported project" in [entry["message"] for entry in entries]
    assert (tmp_path / "stdout.log").read_text() == ""  # no access log: App Engine keeps its own


def _answers(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def test_the_cloud_backends_google_libraries_warn_in_json(tmp_path, receiver, datastore, tasks_emulator):
    # Issue 31: on the cloud backend the Google clients, imported as the server is built,
    # warned in plain text. They warn while this Python nears the end of their support.
    from tests.support.emulators import cloud_server_env

    port = free_port()
    env = {**cloud_server_env(datastore, tasks_emulator, "logs", port), **misbehaving_env(tmp_path)}
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "logs.yaml").write_text("allowed_hosts: [127.0.0.1]\n" + CONFIG.format(url=receiver.url))
    server = Server(configs, tmp_path / "unused.db", tmp_path / "stdout.log", env=env, port=port,
                    stderr_log=tmp_path / "stderr.log").start(timeout=60)
    try:
        run_both_jobs(server)
        misbehave(tmp_path)
        time.sleep(0.5)  # what the task handlers log after answering
    finally:
        server.stop()
    entries = json_lines(tmp_path / "stderr.log")
    assert_misbehaviour_logged(entries)
    if _python_draws_googles_warning():
        # google.api_core's own, as it was imported (the misbehaving thread's name google.cloud.ndb)
        assert [e for e in entries if e.get("category") == "FutureWarning" and "google.cloud.ndb" not in e["message"]]


def _python_draws_googles_warning() -> bool:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # importing google.api_core warns too
        from google.api_core._python_version_support import PythonVersionStatus, check_python_version

        return check_python_version() != PythonVersionStatus.PYTHON_VERSION_SUPPORTED
