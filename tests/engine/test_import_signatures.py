"""The config import reads a file again only when its stat changed (app/file_signatures.py),
and still notices every change: a same-size edit that keeps the mtime, an edit in the
same clock tick as the last read, a project row changed in the store behind its back."""

from __future__ import annotations

import os
import pathlib
import time

import pytest

from app.file_signatures import DOUBT_SECONDS, FileSignatures
from app.importer import import_directory
from engine.adapters.memory import build_memory_backend
from engine.clock import SystemClock
from engine.service import build_engine
from engine.targets import build_targets
from statemachine.policy import Tuning

HOUR_NS = 3600 * 10**9


def later() -> FileSignatures:
    """Signatures whose reads happen well after the files' last change (the ctime of a
    file the test just wrote cannot be set back): trusted at once."""
    return FileSignatures(clock=lambda: time.time() + 2 * DOUBT_SECONDS)


def _project(schedule: str) -> str:
    return f"jobs:\n  - id: j\n    schedule: \"{schedule}\"\n    target: {{http: {{url: 'https://x.example.com/'}}}}\n"


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """An in-memory store, a real engine, a configs directory with one project file, and a count
    of the files read."""
    configs = tmp_path / "configs"
    configs.mkdir()
    path = configs / "p.yaml"
    path.write_text(_project("0 0 3 * * ?"))
    store, _ = build_memory_backend()
    engine = build_engine(store, build_targets("local"), SystemClock(), Tuning(), secret=b"t")
    reads = []
    real_read = pathlib.Path.read_bytes
    monkeypatch.setattr(pathlib.Path, "read_bytes", lambda self: reads.append(self.name) or real_read(self))
    return store, engine, configs, path, reads


def _age(path: pathlib.Path, ns: int | None = None) -> int:
    """Set the file's atime and mtime an hour back (or to `ns`); returns the mtime."""
    mtime = ns if ns is not None else path.stat().st_mtime_ns - HOUR_NS
    os.utime(path, ns=(mtime, mtime))
    return mtime


def _schedule(store) -> str:
    return store.get_job("p", "j").definition.schedule


def test_an_unchanged_file_is_not_read_again(setup):
    _, engine, configs, _, reads = setup
    seen = later()
    assert import_directory(engine.configs, configs, seen=seen) == 1
    assert import_directory(engine.configs, configs, seen=seen) == 0
    assert import_directory(engine.configs, configs, seen=seen) == 0
    assert reads == ["p.yaml"]


def test_a_same_size_edit_that_keeps_the_mtime_is_noticed(setup):
    store, engine, configs, path, reads = setup
    seen = later()
    import_directory(engine.configs, configs, seen=seen)
    mtime = path.stat().st_mtime_ns
    path.write_text(_project("0 0 4 * * ?"))  # same size, as `cp -p` or `rsync -t` would leave it
    _age(path, mtime)
    assert path.stat().st_size == len(_project("0 0 3 * * ?"))
    assert import_directory(engine.configs, configs, seen=seen) == 1
    assert _schedule(store) == "0 0 4 * * ?"


def test_a_file_read_in_the_tick_it_was_written_is_read_again_until_it_is_older():
    stat = os.stat(__file__)
    written = max(stat.st_mtime_ns, stat.st_ctime_ns) / 1e9
    seen = FileSignatures()
    seen.remember("p", stat, "digest", read_at=written + DOUBT_SECONDS / 2)
    assert seen.digest("p", stat) is None  # a second write in the same tick would look the same
    seen.remember("p", stat, "digest", read_at=written + DOUBT_SECONDS * 2)
    assert seen.digest("p", stat) == "digest"


def test_a_fresh_file_is_read_at_every_look_until_it_is_trusted(setup):
    _, engine, configs, _, reads = setup
    now = [time.time()]  # the file was written just now: within the doubt of these reads
    seen = FileSignatures(clock=lambda: now[0])
    import_directory(engine.configs, configs, seen=seen)
    import_directory(engine.configs, configs, seen=seen)
    assert reads == ["p.yaml", "p.yaml"]
    now[0] += 2 * DOUBT_SECONDS
    import_directory(engine.configs, configs, seen=seen)
    import_directory(engine.configs, configs, seen=seen)
    assert reads == ["p.yaml"] * 3


def test_the_store_has_the_last_word(setup):
    store, engine, configs, _, reads = setup
    seen = later()
    import_directory(engine.configs, configs, seen=seen)
    engine.configs.remove_project("p")  # the row changed behind the import's back
    assert import_directory(engine.configs, configs, seen=seen) == 1
    assert [row.id for row in store.list_projects()] == ["p"]
    assert reads == ["p.yaml", "p.yaml"]
