"""An async `http` target's `cancel_url` (engine/cancels.py), on the in-memory backend with
a fake clock and a real HTTP server on 127.0.0.1: an invocation aborted by `overlap:
replace`, and one aborted by a user, each get one POST with the invocation's id, job,
scheduled time and reason and the target's headers, sent only once the abort is committed
(the server reads the invocation's status while it is being told), and the outcome is on
the invocation's log. A target without `cancel_url` is sent nothing."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.importer import import_directory
from engine import operations
from engine.adapters.local.inline import InlineDispatcher
from engine.adapters.memory import build_memory_backend
from engine.service import build_engine
from engine.targets import build_targets
from statemachine.policy import Tuning
from tests.engine.harness import FakeClock


class AsyncTarget:
    """Answers 202 on /run; notes each POST to /cancel/... with the invocation's stored
    status at that moment (`status_of`)."""

    def __init__(self) -> None:
        self.cancels: list[dict] = []
        self.status_of = lambda invocation: ""
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.startswith("/cancel"):
                    sent = json.loads(body)
                    outer.cancels.append({"path": self.path, "body": sent, "key": self.headers.get("X-Key"),
                                          "status": outer.status_of(sent["invocation_id"])})
                self.send_response(202 if self.path == "/run" else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def target():
    served = AsyncTarget()
    yield served
    served.close()


def _engine(tmp_path, target: AsyncTarget, cancel: str):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "p.yaml").write_text(f"""
jobs:
  - id: job
    schedule: triggered
    overlap: replace
    target:
      http: {{url: "{target.url}/run", async: true, headers: {{X-Key: k1}}{cancel}}}
""")
    store, queue = build_memory_backend()
    clock = FakeClock()
    engine = build_engine(store, build_targets("local"), clock, Tuning(), secret=b"t")
    import_directory(engine.configs, configs)
    dispatcher = InlineDispatcher(queue, engine.tasks.handle, clock)
    target.status_of = lambda invocation: store.run_in_transaction(
        lambda tx: tx.get_invocation("p", "job", invocation)).status
    return engine, clock, dispatcher


def test_replaced_and_aborted_invocations_are_told_once_after_the_commit(tmp_path, target):
    engine, clock, dispatcher = _engine(tmp_path, target, ', cancel_url: "' + target.url + '/cancel/${jobId}"')
    first = operations.trigger(engine, "p", "job", request_id="one")
    dispatcher.run_due_now()
    clock.advance(seconds=5)
    second = operations.trigger(engine, "p", "job", request_id="two")
    dispatcher.run_due_now()
    assert [(c["path"], c["body"]["invocation_id"], c["body"]["reason"], c["key"], c["status"])
            for c in target.cancels] == [("/cancel/job", first.id, "replaced", "k1", "ABORTED")]
    assert target.cancels[0]["body"]["job"] == "job"
    assert target.cancels[0]["body"]["scheduled_time"].startswith(first.scheduled_time.strftime("%Y-%m-%dT%H:%M"))

    operations.abort(engine, "p", "job", reason="by hand")
    dispatcher.run_due_now()
    assert [(c["body"]["invocation_id"], c["body"]["reason"], c["status"]) for c in target.cancels[1:]] == [
        (second.id, "by hand", "ABORTED")]
    dispatcher.run_due_now()
    assert len(target.cancels) == 2  # once each
    row = engine.queries.invocation("p", "job", first.id)
    assert "cancel sent" in [entry["message"] for entry in row.log]


def test_a_target_without_cancel_url_is_not_told(tmp_path, target):
    engine, _, dispatcher = _engine(tmp_path, target, "")
    operations.trigger(engine, "p", "job", request_id="one")
    dispatcher.run_due_now()
    operations.abort(engine, "p", "job", reason="by hand")
    dispatcher.run_due_now()
    assert target.cancels == []
