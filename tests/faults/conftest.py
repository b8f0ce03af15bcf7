"""Each engine-level fault runs on the embedded backend (SQLite store and queue), on
the in-memory one (engine/adapters/memory, at the emulators' small scale) and on the
cloud store through the emulators: Datastore, and in long runs the Firestore emulator
in Datastore mode (tests/support/cloud_stores.py), with the contract suite's EtaQueue
standing in for Cloud Tasks (tests/contract/backends.py)."""

from __future__ import annotations

import pytest

from tests.engine.harness import Harness
from tests.support.cloud_stores import FIRESTORE_IN_LONG_RUNS


@pytest.fixture(params=["sqlite", "memory", "datastore", FIRESTORE_IN_LONG_RUNS])
def backend_name(request):
    return request.param


@pytest.fixture
def make_harness(request, backend_name, tmp_path):
    """Harness(tuning) on the backend under test; its emulator starts on first use."""

    def make(tuning=None) -> Harness:
        if backend_name == "sqlite":
            return Harness(tmp_path, tuning, sqlite=True)
        if backend_name == "memory":
            return Harness(tmp_path, tuning)
        from tests.contract.backends import DatastoreBackend, FirestoreBackend

        kind = FirestoreBackend if backend_name == "firestore" else DatastoreBackend
        return Harness(tmp_path, tuning, backend=kind(request.getfixturevalue(backend_name)))

    return make
