"""`last_success_time` on the API's Job (get and list), in the OpenAPI document and in
`jobs get`, from a real server after real deliveries: one job whose target answers 200,
one whose target answers 500."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

import cli
from tests.e2e.support import Receiver, Server, wait_until

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
JOBS = "/api/v1/projects/succ/jobs"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("last-success")
    receiver = Receiver(statuses={"/broken": 500})
    (tmp / "configs").mkdir()
    (tmp / "configs" / "succ.yaml").write_text(CONFIG.format(url=receiver.url))
    running = Server(tmp / "configs", tmp / "s.db", tmp / "server.log").start()
    yield running
    running.stop()
    receiver.close()


def run_once(server: Server, job: str, status: str) -> dict:
    """Trigger the job and wait for its invocation to end with `status`; the invocation."""
    answer, invocation = server.call("POST", f"{JOBS}/{job}:trigger")
    assert answer == 200
    # This trigger's invocation: an earlier test's run of the same job has ended already.
    rows = wait_until(lambda: [row for row in server.invocations("succ", job)
                               if row["id"] == invocation["id"] and row["status"] == status], 20)
    assert rows, f"{job} never ended {status}"
    return rows[-1]


def instant(text: str) -> datetime:
    assert text.endswith("Z")
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_succeeded_invocation_is_the_jobs_last_success_in_get_and_list(server):
    assert server.get(f"{JOBS}/fine")["last_success_time"] is None  # before any
    before = datetime.now(timezone.utc)
    succeeded = run_once(server, "fine", "SUCCEEDED")
    run_once(server, "broken", "FAILED")
    job = server.get(f"{JOBS}/fine")
    assert before <= instant(job["last_success_time"]) <= datetime.now(timezone.utc)
    assert job["last_success_time"] == succeeded["finished_time"]
    assert server.get(f"{JOBS}/broken")["last_success_time"] is None  # a failure is no success
    listed = {entry["id"]: entry["last_success_time"] for entry in server.get(JOBS)["jobs"]}
    assert listed == {"fine": succeeded["finished_time"], "broken": None}


def test_the_openapi_document_describes_it(server):
    job = server.get("/api/v1/openapi.json")["components"]["schemas"]["Job"]
    assert job["properties"]["last_success_time"]["format"] == "date-time"
    assert job["properties"]["last_success_time"]["nullable"] is True


def test_jobs_get_shows_it(server, capsys):
    finished = run_once(server, "fine", "SUCCEEDED")["finished_time"]
    assert cli.main(["jobs", "get", "succ", "fine", "--server", server.url]) == 0
    assert _field(capsys.readouterr().out, "last success") == finished.replace(".000Z", "Z")
    assert cli.main(["jobs", "get", "succ", "broken", "--server", server.url]) == 0
    assert _field(capsys.readouterr().out, "last success") == "-"


def _field(shown: str, name: str) -> str:
    """The value of `name` in `jobs get`'s aligned `name: value` lines."""
    [value] = [line.split(":", 1)[1].strip() for line in shown.splitlines() if line.startswith(f"{name}:")]
    return value
