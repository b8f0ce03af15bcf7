"""One project's jobs cannot hog the server (docs/REFERENCE.md section 6), through a real server:
a sub-second `every`, a zero backoff and a billion attempts are refused at PUT, and
`continuously` against a failing target backs off instead of running flat out."""

from __future__ import annotations

import time

import pytest

from tests.e2e.support import Server, free_port, wait_until


@pytest.fixture
def server(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "p.yaml").write_text("jobs: []\n")
    running = Server(configs, tmp_path / "s.db", tmp_path / "s.log").start()
    yield running
    running.stop()


@pytest.mark.parametrize("body, field", [
    ({"schedule": "every 1ms", "target": {"noop": {}}}, "schedule"),
    ({"schedule": "triggered", "retry": {"min_backoff": "0s", "max_backoff": "0s"}, "target": {"noop": {}}},
     "min_backoff"),
    ({"schedule": "triggered", "retry": {"max_attempts": 1_000_000_000}, "target": {"noop": {}}}, "max_attempts"),
    ({"schedule": "triggered", "timeout": "36500d", "target": {"noop": {}}}, "timeout"),
])
def test_a_job_that_would_hog_the_server_is_refused(server, body, field):
    status, answer = server.call("PUT", "/api/v1/projects/p/jobs/hog", body)
    assert status == 400 and field in answer["error"]["message"], answer


def test_continuously_against_a_failing_target_backs_off(server):
    refused = f"http://127.0.0.1:{free_port()}/"  # nothing listens: every attempt fails at once
    status, _ = server.call("PUT", "/api/v1/projects/p/jobs/spin",
                            {"schedule": "continuously", "target": {"http": {"url": refused}}})
    assert status == 201
    assert wait_until(lambda: server.invocations("p", "spin"), 10)
    time.sleep(4)
    rows = server.invocations("p", "spin")
    # min_backoff 1s doubling: 1 + 2 + 4 s leave room for at most 4 in these 4 seconds
    # (before the floor: about 580 a second).
    assert 1 <= len(rows) <= 5, len(rows)
    assert all(row["status"] == "FAILED" for row in rows[:-1])


def test_a_cloud_tasks_target_may_not_call_this_server(server):
    body = {"schedule": "triggered", "target": {"cloud_tasks": {
        "queue": "projects/p/locations/l/queues/q", "url": f"{server.url}/internal/tasks/trigger",
        "body": '{"payload": {"project": "victim"}}'}}}
    status, answer = server.call("PUT", "/api/v1/projects/p/jobs/forge", body)
    assert status == 400 and "is on Sundial's own service" in answer["error"]["message"], answer
