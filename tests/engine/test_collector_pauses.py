"""The cyclic collector (engine/collector.py): paused while an import parses and applies
files, or while a process holds a burst, and back as it was: after overlapping pauses
only when the last ends, never when something else had disabled it, after an import
that raised; a burst held longer than the most it may pause gets one full pass."""

from __future__ import annotations

import gc

import pytest

from app.importer import import_directory
from engine.adapters.memory import build_memory_backend
from engine.collector import BulkPause, collector_paused, settle_collector
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
    engine = engine_on(build_memory_backend()[0])
    seen = []
    real = engine.configs.import_project
    monkeypatch.setattr(engine.configs, "import_project",
                        lambda snapshot: (seen.append(gc.isenabled()), real(snapshot))[1])
    assert import_directory(engine.configs, configs) == 1
    assert seen == [False] and gc.isenabled()
    assert import_directory(engine.configs, configs) == 0 and gc.isenabled()


def test_a_burst_pauses_the_collector_until_it_is_over():
    bulk = BulkPause(most=60.0)
    bulk.update(False, 0.0)
    assert gc.isenabled() and not bulk.paused
    bulk.update(True, 1.0)
    assert not gc.isenabled() and bulk.paused
    with collector_paused():  # an import meanwhile: the collector stays off until both end
        bulk.update(False, 2.0)
        assert not gc.isenabled()
    assert gc.isenabled() and not bulk.paused


def test_a_burst_held_longer_than_the_most_gets_one_full_pass_and_stays_paused():
    passes = []
    bulk = BulkPause(most=60.0, collect=lambda: passes.append(gc.isenabled()))
    bulk.update(True, 0.0)
    bulk.update(True, 59.0)
    assert passes == []
    bulk.update(True, 60.0)
    assert passes == [True] and not gc.isenabled()  # the pass ran with the collector on
    bulk.update(True, 100.0)
    assert passes == [True]  # the next minute counts from that pass
    bulk.update(False, 101.0)
    assert gc.isenabled()


def test_a_built_process_freezes_what_it_holds():
    held = [object() for _ in range(3)]
    try:
        settle_collector()
        assert gc.get_freeze_count() >= len(held)
    finally:
        gc.unfreeze()
