"""Session fixtures for the Google Cloud emulators (see tests/support/emulators.py).

Each starts the first time a test asks for it and stops when the session ends.
An emulator that cannot run here (no binary, no java, no .venv-tasks) skips the
tests that need it, with the reason; one that is installed but fails to start
is an error, not a skip.
"""

from __future__ import annotations

import os

import pytest

from tests.support.emulators import DatastoreEmulator, FirestoreEmulator, PubSubEmulator, TasksEmulator
from tests.support.parallel import RunLock, run_lock, slow_files_first


def _started(emulator):
    reason = emulator.unavailable()
    if reason:
        pytest.skip(reason)
    emulator.start()
    return emulator


@pytest.fixture(scope="session")
def datastore_emulator():
    emulator = _started(DatastoreEmulator())
    yield emulator
    emulator.stop()


@pytest.fixture(scope="session")
def firestore_emulator():
    """The Firestore emulator in Datastore mode (see tests/support/emulators.py)."""
    emulator = _started(FirestoreEmulator())
    yield emulator
    emulator.stop()


@pytest.fixture(scope="session")
def pubsub_emulator():
    emulator = _started(PubSubEmulator())
    yield emulator
    emulator.stop()


@pytest.fixture(scope="session")
def tasks_emulator():
    """gcloud-tasks-emulator; App Engine tasks go to 127.0.0.1:tasks_emulator.target_port."""
    emulator = _started(TasksEmulator())
    yield emulator
    emulator.stop()


@pytest.fixture
def datastore(datastore_emulator):
    """The Datastore emulator, emptied before the test."""
    datastore_emulator.reset()
    return datastore_emulator


@pytest.fixture
def firestore(firestore_emulator):
    """The Firestore emulator in Datastore mode, emptied before the test."""
    firestore_emulator.reset()
    return firestore_emulator


@pytest.fixture(params=["datastore", "firestore"])
def cloud_database(request):
    """The Datastore emulator, then the Firestore emulator in Datastore mode, emptied
    before the test (tests/support/cloud_stores.py says how a slow test narrows it)."""
    return request.getfixturevalue(request.param)


@pytest.fixture
def log_lines():
    """Every log record from here on as JSON lines (engine/logs.py); call it to read them."""
    import io
    import json
    import logging

    from engine.logs import configure_logging

    stream = io.StringIO()
    touched = [logging.getLogger(name) for name in ("", "sundial", "google")]  # configure_logging sets their levels
    levels = [logger.level for logger in touched]
    handler = configure_logging(stream=stream, level="DEBUG")
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    touched[0].removeHandler(handler)
    for logger, level in zip(touched, levels):
        logger.setLevel(level)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "serial: run with the other xdist worker paused (latency assertions; tests/support/parallel.py)")


def pytest_collection_modifyitems(session, config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        slow_files_first(items, config.rootpath)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under xdist, a `serial` test (its module fixtures' set-up and tear-down included)
    runs while the other worker waits; every other test shares the lock."""
    if RUN_LOCK not in item.config.stash:
        item.config.stash[RUN_LOCK] = run_lock(item.config)
    lock = item.config.stash[RUN_LOCK]
    if lock is None:
        return (yield)
    with lock.held(exclusive=item.get_closest_marker("serial") is not None):
        return (yield)


RUN_LOCK = pytest.StashKey[RunLock | None]()
