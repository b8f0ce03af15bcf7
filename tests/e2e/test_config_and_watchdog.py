"""Config changes reach a running server; the watchdog mends a purged queue."""

import sqlite3
import time

import pytest

from tests.e2e.support import Receiver, Server, wait_until


def _job(job_id: str, schedule: str, url: str) -> str:
    return f'  - id: {job_id}\n    schedule: "{schedule}"\n    target: {{http: {{url: {url}}}}}\n'


@pytest.fixture
def env(tmp_path):
    receiver = Receiver()
    configs = tmp_path / "configs"
    configs.mkdir()
    servers = []

    def start(text: str, **settings) -> Server:
        (configs / "e2e.yaml").write_text(text)
        server = Server(configs, tmp_path / "sundial.db", tmp_path / "server.log", settings).start()
        servers.append(server)
        return server

    yield receiver, configs, start, tmp_path
    for server in servers:
        server.stop()
    receiver.close()


def test_editing_a_schedule_takes_effect_within_ten_seconds(env):
    receiver, configs, start, _ = env
    # The contract's pace (configs re-read within 10 s), not the tests' fast one.
    server = start("jobs:\n" + _job("edited", "* * * * * ?", f"{receiver.url}/before"),
                   SUNDIAL_IMPORT_PERIOD="5s")
    assert wait_until(lambda: receiver.at_path("/before"), timeout=5)
    edited_at = time.time()
    (configs / "e2e.yaml").write_text("jobs:\n" + _job("edited", "*/2 * * * * ?", f"{receiver.url}/after"))
    first = wait_until(lambda: receiver.at_path("/after"), timeout=10)
    assert first and first[0].at - edited_at < 10
    time.sleep(1.5)
    switched = first[0].at
    assert not [a for a in receiver.at_path("/before") if a.at > switched + 0.5]
    assert all(round(a.scheduled) % 2 == 0 for a in receiver.at_path("/after"))
    job = server.get("/api/v1/projects/e2e/jobs/edited")
    assert job["schedule"] == "*/2 * * * * ?"


def test_deleting_a_job_stops_it_and_keeps_its_history(env):
    receiver, configs, start, _ = env
    text = "jobs:\n" + _job("stays", "* * * * * ?", f"{receiver.url}/stays") + _job(
        "goes", "* * * * * ?", f"{receiver.url}/goes"
    )
    server = start(text)
    assert wait_until(lambda: len(receiver.at_path("/goes")) >= 2, timeout=5)
    (configs / "e2e.yaml").write_text("jobs:\n" + _job("stays", "* * * * * ?", f"{receiver.url}/stays"))
    assert wait_until(lambda: server.get("/api/v1/projects/e2e/jobs/goes")["state"] == "DISABLED", timeout=5)
    stopped_at = time.time()
    time.sleep(3)
    assert not [a for a in receiver.at_path("/goes") if a.at > stopped_at + 0.5]
    assert [a for a in receiver.at_path("/stays") if a.at > stopped_at + 1]
    assert server.invocations("e2e", "goes"), "history stays readable"


def test_a_yaml_error_changes_nothing_and_is_shown_by_the_api(env):
    receiver, configs, start, _ = env
    server = start("jobs:\n" + _job("steady", "* * * * * ?", f"{receiver.url}/steady"))
    assert wait_until(lambda: receiver.at_path("/steady"), timeout=5)
    (configs / "e2e.yaml").write_text("jobs:\n  - id: steady\n    schedule: [unclosed\n")

    def error_shown():
        projects = server.get("/api/v1/projects")["projects"]
        return [p for p in projects if p["id"] == "e2e" and p["config_error"]]

    shown = wait_until(error_shown, timeout=5)
    assert shown and "e2e.yaml:4: bad YAML" in shown[0]["config_error"]
    broken_at = time.time()
    time.sleep(2.5)
    assert [a for a in receiver.at_path("/steady") if a.at > broken_at + 1]
    assert server.get("/api/v1/projects/e2e/jobs/steady")["state"] in ("SCHEDULED", "QUEUED", "RUNNING")


def test_the_watchdog_restarts_jobs_whose_tasks_were_deleted(env):
    receiver, configs, start, tmp_path = env
    text = "jobs:\n" + "".join(_job(f"j{i}", "* * * * * ?", f"{receiver.url}/j{i}") for i in range(3))
    start(text)
    assert wait_until(lambda: all(receiver.at_path(f"/j{i}") for i in range(3)), timeout=5)
    with sqlite3.connect(tmp_path / "sundial.db", timeout=10) as conn:
        conn.execute("DELETE FROM tasks")
    purged_at = time.time()
    time.sleep(1.5)
    quiet = [a for i in range(3) for a in receiver.at_path(f"/j{i}") if a.at > purged_at + 1.2]
    assert not quiet, "with the queue purged nothing fires until the watchdog"
    # One watchdog period (2 s) plus the tick grace (2 s), and a little slack.
    limit = 2 + 2 + 1.5

    def all_firing():
        return all([a for a in receiver.at_path(f"/j{i}") if a.at > purged_at + 1.5] for i in range(3))

    assert wait_until(all_firing, timeout=limit)
    assert time.time() - purged_at < limit + 0.5
