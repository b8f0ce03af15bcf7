"""An async target's `cancel_url` on every backend (engine/cancels.py): the commit that
ABORTS an invocation (`overlap: replace`, a user's abort) enqueues one `cancel` task on
that backend's queue, and running it POSTs once to a real HTTP server on 127.0.0.1, which
finds the invocation already ABORTED in the store while it is being told."""

from __future__ import annotations

from datetime import timedelta

import pytest

from app.importer import import_directory
from engine import operations
from engine.service import build_engine
from engine.targets import build_targets
from statemachine.policy import Tuning
from tests.engine.harness import FakeClock
from tests.engine.test_cancel_url import AsyncTarget


@pytest.fixture
def target():
    served = AsyncTarget()
    yield served
    served.close()


def test_replace_and_abort_tell_the_cancel_url_once(backend, target, tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "p.yaml").write_text(f"""
jobs:
  - id: job
    schedule: triggered
    overlap: replace
    target:
      http: {{url: "{target.url}/run", async: true, cancel_url: "{target.url}/cancel", headers: {{X-Key: k1}}}}
""")
    clock = FakeClock()
    engine = build_engine(backend.store, build_targets("local"), clock, Tuning(), secret=b"t")
    import_directory(engine.configs, configs)
    target.status_of = lambda invocation: backend.store.get_invocation("p", "job", invocation).status

    def run() -> None:
        for _ in range(3):  # what a task enqueues (a fold's start, an abort's cancel) runs too
            backend.run_due(clock.now() + timedelta(seconds=1), engine.tasks.handle)

    first = operations.trigger(engine, "p", "job", request_id="one")
    run()
    clock.advance(seconds=5)
    second = operations.trigger(engine, "p", "job", request_id="two")
    run()
    operations.abort(engine, "p", "job", reason="by hand")
    run()
    assert [(c["body"]["invocation_id"], c["body"]["reason"], c["key"], c["status"]) for c in target.cancels] == [
        (first.id, "replaced", "k1", "ABORTED"), (second.id, "by hand", "k1", "ABORTED")]
