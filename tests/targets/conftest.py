from __future__ import annotations

import pytest

from engine.targets.http import HttpTarget
from tests.targets.support import Receiver


@pytest.fixture
def receiver():
    with Receiver() as server:
        yield server


@pytest.fixture
def http_target():
    target = HttpTarget()
    yield target
    target.close()


@pytest.fixture
def make_target():
    """HttpTarget(backend=...) instances, closed after the test."""
    made = []

    def make(backend: str = "local") -> HttpTarget:
        made.append(HttpTarget(backend=backend))
        return made[-1]

    yield make
    for target in made:
        target.close()
