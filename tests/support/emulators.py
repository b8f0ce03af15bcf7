"""Start and stop the Google Cloud emulators the tests need, as subprocesses.

Each emulator runs on a free port of 127.0.0.1 in a process group of its own,
so that stopping it also stops the JVM a wrapper script started. `unavailable()`
says why an emulator cannot run here (a missing binary, java or virtualenv);
the fixtures in tests/conftest.py turn that into a skip with the reason.

- Cloud Datastore: the Google Cloud CLI's emulator, in memory, every job
  applied at once (--consistency=1.0), and --require_indexes with exactly the
  composite indexes of the repository's index.yaml: a query that needs an index
  index.yaml lacks fails the test that runs it. `reset()` empties it (POST /reset).
- Firestore in Datastore mode: the Cloud Firestore emulator's jar, run through
  its platform script (not `gcloud emulators firestore start`, which wraps the
  same script and only adds gcloud's own start-up), with
  --database-mode=datastore-mode. It answers the Datastore API, so the same
  ndb client talks to it. Unlike the Datastore emulator it enforces
  production's size limits (a property over 1,048,487 bytes is refused) and
  locks as production does: a transaction's reads hold locks, and a
  transaction that waits too long on one fails with `409 Transaction lock
  timeout` (ndb's ABORTED, the port's ConflictError). It does not enforce
  composite indexes. POST /reset empties it, as on the Datastore emulator
  (checked by tests/contract/test_emulators.py).
- Pub/Sub: the Google Cloud CLI's emulator.
- Cloud Tasks: gcloud-tasks-emulator from .venv-tasks (it needs protobuf<5; the
  Makefile builds that virtualenv). How it dispatches, as read in its source
  (0.6.2) and checked by tests/contract/test_emulators.py:
    * a gRPC API (no TLS) on --port; queues from -d/--default-queue or CreateQueue;
    * one thread per queue polls every 0.1 s and POSTs due tasks one at a time,
      in creation order; a task not yet due goes to the back of the queue;
    * HTTP tasks go to their own URL with their own headers plus X-CloudTasks-
      QueueName/TaskName/TaskRetryCount/TaskExecutionCount/TaskETA; App Engine
      tasks go to http://--target-host:--target-port + relative_uri with the
      X-AppEngine-* equivalents; no OIDC token is ever attached;
    * the body is sent as is, with Content-Type application/x-www-form-urlencoded
      unless the task's headers set one;
    * task names are NOT deduplicated: a name created twice is dispatched twice;
    * any 4xx/5xx answer puts the task straight back (no backoff), forever by
      default (--max-retries N stops after N); a target that never answers
      blocks its queue (no request timeout).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Callable
from xml.sax.saxutils import quoteattr

import yaml

ROOT = Path(__file__).resolve().parents[2]
GCLOUD_PLATFORM = Path(os.environ.get("SUNDIAL_GCLOUD_PLATFORM", "/usr/lib/google-cloud-sdk/platform"))
DATASTORE_BINARY = GCLOUD_PLATFORM / "cloud-datastore-emulator" / "cloud_datastore_emulator"
FIRESTORE_BINARY = GCLOUD_PLATFORM / "cloud-firestore-emulator" / "cloud_firestore_emulator"
PUBSUB_BINARY = GCLOUD_PLATFORM / "pubsub-emulator" / "bin" / "cloud-pubsub-emulator"
TASKS_VENV = Path(os.environ.get("SUNDIAL_TASKS_VENV", ROOT / ".venv-tasks"))
TASKS_BINARY = TASKS_VENV / "bin" / "gcloud-tasks-emulator"
HOST = "127.0.0.1"
START_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def http_ok(url: str, method: str = "GET") -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def tcp_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False


def missing(binary: Path, needs_java: bool) -> str | None:
    if not os.access(binary, os.X_OK):
        return f"{binary} is not installed"
    if needs_java and shutil.which(os.environ.get("JAVA", "java")) is None:
        return f"{binary.name} needs java, which is not on PATH"
    return None


class EmulatorProcess:
    """One emulator subprocess: started, waited for until `ready()`, stopped."""

    def __init__(self, name: str, argv: list[str], ready: Callable[[], bool]):
        self.name, self.argv, self.ready = name, argv, ready
        self.workdir = Path(tempfile.mkdtemp(prefix=f"sundial-{name}-"))
        self.log_path = self.workdir / "emulator.log"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = START_TIMEOUT) -> None:
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.workdir, start_new_session=True,  # its own group: stop() reaches the JVM too
            )
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        while not self.ready():
            problem = None
            if self.process.poll() is not None:
                problem = f"exited with {self.process.returncode}"
            elif time.monotonic() > deadline:
                problem = f"did not answer within {timeout:.0f}s"
            if problem:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"{self.name} {problem}:\n{tail}")
            time.sleep(0.1)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            self._signal_group(process, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                self._signal_group(process, signal.SIGKILL)
                process.wait(10)
        shutil.rmtree(self.workdir, ignore_errors=True)

    @staticmethod
    def _signal_group(process: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(process.pid, sig)  # the group we created for it, nothing else
        except ProcessLookupError:
            pass

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def datastore_indexes_xml(index_yaml: Path) -> str:
    """index.yaml as the datastore-indexes.xml the emulator reads (it ignores YAML)."""
    spec = yaml.safe_load(index_yaml.read_text()) or {}
    parts = ['<?xml version="1.0" encoding="utf-8"?>', '<datastore-indexes autoGenerate="false">']
    for index in spec.get("indexes") or []:
        ancestor = "true" if index.get("ancestor") in (True, "yes") else "false"
        parts.append(f"  <datastore-index kind={quoteattr(index['kind'])} ancestor=\"{ancestor}\">")
        for prop in index["properties"]:
            direction = prop.get("direction", "asc")
            parts.append(f"    <property name={quoteattr(prop['name'])} direction={quoteattr(direction)}/>")
        parts.append("  </datastore-index>")
    parts.append("</datastore-indexes>")
    return "\n".join(parts) + "\n"


class DatastoreEmulator:
    def __init__(self, index_yaml: Path = ROOT / "index.yaml", binary: Path = DATASTORE_BINARY):
        self.index_yaml, self.binary = index_yaml, binary
        self.port = 0
        self.process: EmulatorProcess | None = None

    def unavailable(self) -> str | None:
        return missing(self.binary, needs_java=True)

    @property
    def host(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self) -> "DatastoreEmulator":
        self.port = free_port()
        self.process = EmulatorProcess("datastore", [], lambda: http_ok(f"http://{self.host}/"))
        # The emulator reads its indexes from a project directory's WEB-INF;
        # it lives in the process's work directory, which stop() removes.
        project_dir = self.process.workdir / "project"
        (project_dir / "WEB-INF").mkdir(parents=True)
        (project_dir / "WEB-INF" / "datastore-indexes.xml").write_text(datastore_indexes_xml(self.index_yaml))
        self.process.argv = [
            str(self.binary), "start", f"--host={HOST}", f"--port={self.port}",
            "--store_on_disk=false", "--consistency=1.0", "--require_indexes", str(project_dir),
        ]
        self.process.start()
        return self

    def reset(self) -> None:
        """Delete every entity of every project (about 60 ms; 10 ms on Firestore's)."""
        if not http_ok(f"http://{self.host}/reset", method="POST"):
            raise RuntimeError(f"{self.process.name} emulator reset failed:\n{self.process.log_tail()}")

    def client(self, project: str = "sundial-test", namespace: str | None = None):
        """An ndb.Client on this emulator (ndb reads DATASTORE_EMULATOR_HOST only here)."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import ndb

        saved = os.environ.get("DATASTORE_EMULATOR_HOST")
        os.environ["DATASTORE_EMULATOR_HOST"] = self.host
        try:
            return ndb.Client(project=project, namespace=namespace, credentials=AnonymousCredentials())
        finally:
            if saved is None:
                os.environ.pop("DATASTORE_EMULATOR_HOST", None)
            else:
                os.environ["DATASTORE_EMULATOR_HOST"] = saved

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


class FirestoreEmulator(DatastoreEmulator):
    """The Firestore emulator in Datastore mode, behind DatastoreEmulator's interface
    (`host`, `reset()`, `client()`): the same tests run on either."""

    def __init__(self, binary: Path = FIRESTORE_BINARY):
        super().__init__(binary=binary)

    def start(self) -> "FirestoreEmulator":
        self.port = free_port()
        argv = [str(self.binary), "start", f"--host={HOST}", f"--port={self.port}",
                "--database-mode=datastore-mode"]
        self.process = EmulatorProcess("firestore", argv, lambda: http_ok(f"http://{self.host}/"))
        self.process.start()
        return self


class PubSubEmulator:
    def __init__(self, binary: Path = PUBSUB_BINARY):
        self.binary = binary
        self.port = 0
        self.process: EmulatorProcess | None = None

    def unavailable(self) -> str | None:
        return missing(self.binary, needs_java=True)

    @property
    def host(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self) -> "PubSubEmulator":
        self.port = free_port()
        argv = [str(self.binary), f"--host={HOST}", f"--port={self.port}"]
        self.process = EmulatorProcess("pubsub", argv, lambda: http_ok(f"http://{self.host}/"))
        self.process.start()
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


class TasksEmulator:
    """gcloud-tasks-emulator with one queue, `queue`, created at start.

    App Engine tasks go to 127.0.0.1:`target_port` (a free port chosen here
    unless given: start the server under test on it); HTTP tasks go to their URL.
    """

    def __init__(
        self,
        target_port: int | None = None,
        queue: str = "projects/sundial-test/locations/us-central1/queues/sundial",
        binary: Path = TASKS_BINARY,
    ):
        self.target_port = target_port or free_port()
        self.queue, self.binary = queue, binary
        self.port = 0
        self.process: EmulatorProcess | None = None

    def unavailable(self) -> str | None:
        if not os.access(self.binary, os.X_OK):
            return (f"{self.binary} is missing: `make .venv-tasks/.installed` builds it (make test does),"
                    " or point SUNDIAL_TASKS_VENV at a virtualenv that has it")
        return None

    @property
    def host(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self) -> "TasksEmulator":
        self.port = free_port()
        argv = [
            str(self.binary), "start", f"--port={self.port}", f"--target-host={HOST}",
            f"--target-port={self.target_port}", f"--default-queue={self.queue}",
        ]
        self.process = EmulatorProcess("cloud-tasks", argv, lambda: tcp_open(self.port))
        self.process.start()
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def cloud_server_env(datastore: DatastoreEmulator, tasks: TasksEmulator, queue: str, port: int) -> dict[str, str]:
    """The environment of a `serve` process on the cloud backend, on these emulators,
    that Cloud Tasks calls back on 127.0.0.1:`port`."""
    return {
        "SUNDIAL_BACKEND": "cloud",
        "GOOGLE_CLOUD_PROJECT": "sundial-test",
        "DATASTORE_EMULATOR_HOST": datastore.host,
        "SUNDIAL_TASKS_EMULATOR_HOST": tasks.host,
        "SUNDIAL_TASKS_LOCATION": "us-central1",
        "SUNDIAL_TASKS_QUEUE": queue,
        "SUNDIAL_SERVICE_URL": f"http://127.0.0.1:{port}",
    }
