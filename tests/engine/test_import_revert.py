"""An import that fails after its jobs are written, and a file reverted before the next
look: the revert must still be applied (found by the simulator, sim/, seed 1)."""

from __future__ import annotations

import pytest

from engine.ports import StoreError
from tests.engine.harness import BEFORE, Harness


def _schedule(harness: Harness) -> str:
    return harness.store.inner.get_job("proj", "job").definition.schedule


def test_a_file_reverted_after_an_import_failed_midway_is_imported_again():
    harness = Harness()
    harness.define(content="v1", schedule_text="every 1m")
    # The next import writes its jobs, then every later commit fails: its project row
    # is never given the new file's hash.
    harness.store.fault = lambda step: BEFORE if _schedule(harness) == "every 2m" else None
    with pytest.raises(StoreError):
        harness.define(content="v2", schedule_text="every 2m")
    assert _schedule(harness) == "every 2m"
    harness.store.fault = None
    harness.define(content="v1", schedule_text="every 1m")  # the file as it was: v1 again
    assert _schedule(harness) == "every 1m"
    assert harness.store.inner.get_job("proj", "job").record.live_policy.schedule_text == "every 1m"
