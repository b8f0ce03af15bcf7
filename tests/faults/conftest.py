"""Each engine-level fault runs on the embedded backend (SQLite store and queue)
and on the cloud store through the emulator: Datastore with the contract suite's
EtaQueue standing in for Cloud Tasks (tests/contract/backends.py)."""

from __future__ import annotations

import pytest

from tests.engine.harness import Harness


@pytest.fixture(params=["sqlite", "datastore"])
def backend_name(request):
    return request.param


@pytest.fixture
def make_harness(request, backend_name, tmp_path):
    """Harness(tuning) on the backend under test; the Datastore emulator starts on first use."""

    def make(tuning=None) -> Harness:
        if backend_name == "sqlite":
            return Harness(tmp_path, tuning)
        from tests.contract.backends import DatastoreBackend

        return Harness(tmp_path, tuning, backend=DatastoreBackend(request.getfixturevalue("datastore")))

    return make
