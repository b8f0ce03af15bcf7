"""The cyclic collector waits while an import parses and applies files (app/gc_pause.py),
and comes back as it was: after overlapping imports only when the last ends, never when
something else had disabled it, and after an import that raised."""

from __future__ import annotations

import gc

import pytest

from app.gc_pause import collector_paused
from app.importer import import_directory
from engine.adapters.local.sqlite_store import SqliteJobStore
from tests.engine.test_import_batches import engine_on


@pytest.fixture(autouse=True)
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_overlapping_pauses_resume_the_collector_when_the_last_ends():
    first, second = collector_paused(), collector_paused()
    first.__enter__()
    assert not gc.isenabled()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled()  # the second import still runs
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled():
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_an_import_that_raises_resumes_the_collector():
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("injected")
    assert gc.isenabled()


def test_an_import_pauses_the_collector_only_while_it_parses_and_applies(tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "p.yaml").write_text("jobs:\n  - id: a\n    schedule: '0 9 * * *'\n    target: {noop: {}}\n")
    engine = engine_on(SqliteJobStore(tmp_path / "s.db"))
    seen = []
    real = engine.configs.import_project
    monkeypatch.setattr(engine.configs, "import_project",
                        lambda snapshot: (seen.append(gc.isenabled()), real(snapshot))[1])
    assert import_directory(engine.configs, configs) == 1
    assert seen == [False] and gc.isenabled()
    assert import_directory(engine.configs, configs) == 0 and gc.isenabled()
