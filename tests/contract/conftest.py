"""One contract suite, every backend: each test gets a fresh backend of each kind.

The Datastore backend starts the emulator on first use (skipped with the
reason where it cannot run) and empties it before each test.
"""

from __future__ import annotations

import pytest

from tests.contract.backends import DatastoreBackend, SqliteBackend


@pytest.fixture(params=["sqlite", "datastore"])
def backend(request, tmp_path):
    if request.param == "sqlite":
        return SqliteBackend(tmp_path)
    return DatastoreBackend(request.getfixturevalue("datastore"))


@pytest.fixture
def store(backend):
    return backend.store
