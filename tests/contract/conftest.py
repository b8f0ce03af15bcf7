"""One contract suite, every backend: each test gets a fresh backend of each kind.

The Datastore and Firestore backends start their emulator on first use (skipped
with the reason where it cannot run) and empty it before each test.
"""

from __future__ import annotations

import pytest

from tests.contract.backends import DatastoreBackend, FirestoreBackend, MemoryBackend, SqliteBackend


@pytest.fixture(params=["sqlite", "memory", "datastore", "firestore"])
def backend(request, tmp_path):
    if request.param == "sqlite":
        made = SqliteBackend(tmp_path)
    elif request.param == "memory":
        made = MemoryBackend()
    elif request.param == "firestore":
        made = FirestoreBackend(request.getfixturevalue("firestore"))
    else:
        made = DatastoreBackend(request.getfixturevalue("datastore"))
    yield made
    made.close()


@pytest.fixture
def store(backend):
    return backend.store
