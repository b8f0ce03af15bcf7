"""A job whose entry breaks in a running server's config file keeps delivering its last
good definition and says which error it carries, in the API and on the jobs list, until
the entry is fixed: on the embedded backend and on Datastore with Cloud Tasks."""

from __future__ import annotations

import time
import urllib.request

import pytest

from tests.e2e.support import Receiver, Server, free_port, wait_until
from tests.support.emulators import cloud_server_env

GOOD = """\
allowed_hosts: ["127.0.0.1"]
jobs:
  - id: steady
    schedule: "* * * * * ?"
    target: {{http: {{url: {url}/steady}}}}
"""
BROKEN = GOOD.replace('"* * * * * ?"', '"every so often"')


def html(server: Server, path: str) -> str:
    with urllib.request.urlopen(server.url + path, timeout=10) as response:
        return response.read().decode()


def check_the_error_comes_and_goes(server: Server, receiver: Receiver, path) -> None:
    job_url = "/api/v1/projects/e2e/jobs/steady"
    assert wait_until(lambda: receiver.at_path("/steady"), timeout=10)
    path.write_text(BROKEN.format(url=receiver.url))
    error = wait_until(lambda: server.get(job_url)["config_error"], timeout=10)
    [project] = [p for p in server.get("/api/v1/projects")["projects"] if p["id"] == "e2e"]
    assert project["job_errors"] == [error] and "job 'steady': schedule:" in error
    assert "⚠ config error" in html(server, "/p/e2e")
    broken_at = time.time()
    # The last good definition keeps firing every second.
    assert wait_until(lambda: [a for a in receiver.at_path("/steady") if a.at > broken_at + 1], timeout=10)
    path.write_text(GOOD.format(url=receiver.url))
    assert wait_until(lambda: server.get(job_url)["config_error"] == "", timeout=10)
    assert "⚠ config error" not in html(server, "/p/e2e")


@pytest.fixture
def receiver():
    made = Receiver()
    yield made
    made.close()


def test_a_broken_entry_is_shown_on_its_job_on_the_embedded_backend(tmp_path, receiver):
    configs = tmp_path / "configs"
    configs.mkdir()
    path = configs / "e2e.yaml"
    path.write_text(GOOD.format(url=receiver.url))
    server = Server(configs, tmp_path / "s.db", tmp_path / "s.log").start()
    try:
        check_the_error_comes_and_goes(server, receiver, path)
    finally:
        server.stop()


@pytest.mark.parametrize("cloud_database", ["datastore"], indirect=True)
def test_a_broken_entry_is_shown_on_its_job_on_datastore(tmp_path, receiver, cloud_database, tasks_emulator):
    configs = tmp_path / "configs"
    configs.mkdir()
    path = configs / "e2e.yaml"
    path.write_text(GOOD.format(url=receiver.url))
    port = free_port()
    env = cloud_server_env(cloud_database, tasks_emulator, "sundial", port)
    server = Server(configs, tmp_path / "unused.db", tmp_path / "s.log", env, port=port).start()
    try:
        check_the_error_comes_and_goes(server, receiver, path)
    finally:
        server.stop()
