"""Fixtures of the cloud tests. The emulators (`pubsub_emulator`, `tasks_emulator`)
are the session fixtures of tests/conftest.py: started once, skipped with the reason
where one is not installed."""

from __future__ import annotations

import pytest

from tests.targets.support import Receiver


@pytest.fixture
def receiver():
    with Receiver() as server:
        yield server
