"""How the server reads its configs directory, through a real server: it decodes files
exactly as `validate` does, takes project ids from whole file names, and treats a
directory it cannot list as "change nothing", never as "every project is gone"."""

from __future__ import annotations

import os
import time

import pytest

from app.file_signatures import DOUBT_SECONDS
from tests.e2e.support import Server, wait_until

EVERY_SECOND = "jobs:\n  - id: tick\n    schedule: every 1s\n    target: {noop: {}}\n"


@pytest.fixture
def configs(tmp_path):
    folder = tmp_path / "configs"
    folder.mkdir()
    return folder


def projects(server: Server) -> dict:
    return {p["id"]: p for p in server.get("/api/v1/projects")["projects"]}


def test_a_non_utf8_file_is_a_config_error_as_validate_says(tmp_path, configs):
    (configs / "gamma.yaml").write_bytes(b"jobs:\n  - id: j\n    schedule: triggered\n"
                                         b"    target: {http: {url: 'http://127.0.0.1:9/', body: 'caf\xe9'}}\n")
    server = Server(configs, tmp_path / "s.db", tmp_path / "s.log").start()
    try:
        gamma = wait_until(lambda: projects(server).get("gamma"), 10)
        assert "gamma.yaml:4: not UTF-8 text: byte 0xe9 cannot be decoded" in gamma["config_error"]
        assert gamma["job_count"] == 0
    finally:
        server.stop()


def test_a_file_name_with_a_line_break_makes_no_project(tmp_path, configs):
    (configs / "alpha.yaml").write_text("jobs: []\n")
    (configs / "alpha\n.yaml").write_text("jobs: []\n")
    server = Server(configs, tmp_path / "s.db", tmp_path / "s.log").start()
    try:
        wait_until(lambda: "alpha" in projects(server), 10)
        time.sleep(1.5)  # another import pass
        assert list(projects(server)) == ["alpha"]
        assert "config file ignored" in server.log_path.read_text()
    finally:
        server.stop()


def _without_root_override() -> tuple[str, ...]:
    """As root, chmod 000 stops nobody: drop the capabilities that let root past it."""
    if os.geteuid() != 0:
        return ()
    caps = "-dac_override,-dac_read_search"
    return ("setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}")


def test_an_unreadable_configs_directory_changes_nothing(tmp_path, configs):
    (configs / "p1.yaml").write_text(EVERY_SECOND)
    server = Server(configs, tmp_path / "s.db", tmp_path / "s.log", wrapper=_without_root_override()).start()
    try:
        assert wait_until(lambda: len(server.invocations("p1", "tick")) >= 2, 15)
        configs.chmod(0)
        try:
            assert wait_until(lambda: "config directory unreadable" in server.log_path.read_text(), 10)
            time.sleep(3)  # several import passes while the directory cannot be listed
            assert "p1" in projects(server)
            assert server.get("/api/v1/projects/p1/jobs/tick")["state"] != "DISABLED"
        finally:
            configs.chmod(0o755)
        time.sleep(1)
        times = [row["scheduled_time"] for row in server.invocations("p1", "tick")]
        assert "project removed" not in server.log_path.read_text()
        assert len(times) >= 6
        seconds = [int(time.mktime(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S"))) for t in times]
        assert all(later - earlier == 1 for earlier, later in zip(seconds, seconds[1:])), times
    finally:
        server.stop()


def test_the_first_import_is_done_before_the_server_answers(tmp_path, configs):
    jobs = "".join(f"  - id: j{i}\n    schedule: triggered\n    target: {{noop: {{}}}}\n" for i in range(2000))
    (configs / "big.yaml").write_text("jobs:\n" + jobs)
    server = Server(configs, tmp_path / "s.db", tmp_path / "s.log").start(timeout=60)
    try:
        assert projects(server)["big"]["job_count"] == 2000  # the very first answer after /healthz
    finally:
        server.stop()


def test_a_same_size_edit_that_keeps_the_mtime_reaches_the_server(tmp_path, configs):
    """The server reads a file again only when its stat changed (app/file_signatures.py):
    an edit that keeps its size and mtime (`cp -p`, `rsync -t`) still changes its ctime."""
    def text(hour: int) -> str:
        return f"jobs:\n  - id: daily\n    schedule: \"0 0 {hour} * * ?\"\n    target: {{noop: {{}}}}\n"

    path = configs / "delta.yaml"
    path.write_text(text(3))
    server = Server(configs, tmp_path / "s.db", tmp_path / "s.log", {"SUNDIAL_IMPORT_PERIOD": "1s"}).start()
    try:
        time.sleep(DOUBT_SECONDS + 1.5)  # a look after the file's timestamps left the doubt: trusted
        mtime = path.stat().st_mtime_ns
        path.write_text(text(4))
        os.utime(path, ns=(mtime, mtime))
        schedule = wait_until(lambda: server.get("/api/v1/projects/delta/jobs/daily")["schedule"] == "0 0 4 * * ?", 10)
        assert schedule, "the edit was not imported"
    finally:
        server.stop()
