"""A large import parses its later files in a spawned worker process (app/parse_ahead.py)
while the first are applied: the store ends exactly as an import without the worker
leaves it, errors naming the same file, line and field; a worker that dies changes
nothing but where the files are parsed."""

from __future__ import annotations

import json
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool

import pytest

import app.parse_ahead
from app.importer import import_directory
from engine.adapters.local.sqlite_store import SqliteJobStore
from tests.engine.test_import_batches import engine_on, state


def write_projects(directory) -> None:
    directory.mkdir()
    for project in ("a", "b", "c"):
        entries = "".join(f"  - id: j{i}\n    schedule: \"{i} 9 * * *\"\n"
                          f"    target: {{http: {{url: 'https://x.example.com/{project}/{i}'}}}}\n"
                          for i in range(6))
        (directory / f"{project}.yaml").write_text(
            "jobs:\n" + entries + "  - id: broken\n    schedule: \"0 9 * * *\"\n    target: {http: {url: ftp://x}}\n")
    (directory / "d.yaml").write_text("jobs:\n  - id: x\n    schedule: [\n")  # the whole file fails


def import_into(tmp_path, name: str) -> dict:
    store = SqliteJobStore(tmp_path / f"{name}.db")
    assert import_directory(engine_on(store).configs, tmp_path / "configs") == 4
    return state(tmp_path / f"{name}.db")


class Pools:
    """The real process pool, counting the workers started and how."""

    started: list[str] = []

    def __new__(cls, workers, mp_context, **options):
        cls.started.append(mp_context.get_start_method())
        return app.parse_ahead.__dict__["_real_pool"](workers, mp_context=mp_context, **options)


@pytest.fixture
def no_worker(tmp_path):
    write_projects(tmp_path / "configs")
    return import_into(tmp_path, "alone")


def test_files_parsed_by_the_worker_are_imported_as_without_it(tmp_path, monkeypatch, no_worker):
    monkeypatch.setattr(app.parse_ahead, "MIN_BYTES", 0)
    monkeypatch.setattr(app.parse_ahead, "spare_cores", lambda: 1.0)
    monkeypatch.setattr(app.parse_ahead, "_real_pool", app.parse_ahead.ProcessPoolExecutor, raising=False)
    monkeypatch.setattr(app.parse_ahead, "ProcessPoolExecutor", Pools)
    Pools.started = []
    assert import_into(tmp_path, "ahead") == no_worker
    assert Pools.started == ["spawn"]  # never a fork of this (threaded) process
    errors = "\n".join(json.dumps(list(row)) for row in no_worker["projects"])
    assert "c.yaml:22: job 'broken': target.http.url: 'ftp://x' is not" in errors
    assert "d.yaml:4: bad YAML" in errors


class DeadPool:
    def __init__(self, *_args, **_kwargs):
        self.shut = False

    def submit(self, *_args):
        future: Future = Future()
        future.set_exception(BrokenProcessPool("injected: the worker died"))
        return future

    def shutdown(self, **_kwargs):
        self.shut = True


def test_a_dead_worker_leaves_its_files_to_this_process(tmp_path, monkeypatch, no_worker):
    monkeypatch.setattr(app.parse_ahead, "MIN_BYTES", 0)
    monkeypatch.setattr(app.parse_ahead, "spare_cores", lambda: 1.0)
    monkeypatch.setattr(app.parse_ahead, "ProcessPoolExecutor", DeadPool)
    assert import_into(tmp_path, "dead") == no_worker


def test_a_small_import_or_a_busy_machine_starts_no_worker(tmp_path, monkeypatch):
    def no_pool(*_args, **_kwargs):
        raise AssertionError("no worker for a small import, nor without a spare core")

    monkeypatch.setattr(app.parse_ahead, "ProcessPoolExecutor", no_pool)
    write_projects(tmp_path / "configs")
    monkeypatch.setattr(app.parse_ahead, "spare_cores", lambda: 2.0)
    assert import_into(tmp_path, "small")["jobs"]
    monkeypatch.setattr(app.parse_ahead, "MIN_BYTES", 0)
    monkeypatch.setattr(app.parse_ahead, "spare_cores", lambda: 0.4)
    assert import_into(tmp_path, "busy")["jobs"]


@pytest.mark.parametrize("average, running, spare", [
    (1.4, "1/120", 2.0),    # a run that ended a minute ago: nothing runs besides this process now
    (2.5, "3/120", 0.0),    # two others busy now and over the minute
    (0.2, "3/120", 1.8),    # busy this instant only: the minute's average is the lower
    (1.4, None, 0.6),       # no count of the tasks running now: the average alone
])
def test_spare_cores_count_the_lower_of_the_minute_and_now(tmp_path, monkeypatch, average, running, spare):
    loadavg = tmp_path / "loadavg"
    if running is not None:
        loadavg.write_text(f"{average} 1.00 1.00 {running} 4242\n")
    monkeypatch.setattr(app.parse_ahead, "LOADAVG", str(loadavg))
    monkeypatch.setattr(app.parse_ahead.os, "getloadavg", lambda: (average, 1.0, 1.0))
    monkeypatch.setattr(app.parse_ahead.os, "sched_getaffinity", lambda _pid: {0, 1})
    assert app.parse_ahead.spare_cores() == pytest.approx(spare)
