"""on_failure and on_recovery through a real server and real receivers: a job failing
twice then succeeding tells its hooks twice then once, with the hook variables in JSON
bodies; a Slack-like webhook that parses strictly gets valid JSON whatever the reason
holds (quotes, backslashes, line breaks from an async target's own report). Embedded
backend here; the cloud backend (Datastore and Cloud Tasks emulators) runs the recovery
path too.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.e2e.support import Receiver, Server, free_port, wait_until
from tests.support.cloud_stores import ON_BOTH_IN_LONG_RUNS
from tests.support.emulators import cloud_server_env

# What an async target reports when its work fails: the reason quotes it verbatim.
NASTY = 'http 500: {"error":"bad \\"x\\""}\nsecond line\t\\ end'
ALERT = ('{"status":"${status}","reason":"${reason}","attempts":${attempts},"failures":${failures},'
         '"url":"${invocationUrl}"}')
FLAKY = """
  - id: flaky
    schedule: "* * * * * ?"
    retry: {{max_attempts: 2, min_backoff: 100ms, max_backoff: 100ms}}
    target: {{http: {{url: "{url}/flaky"}}}}
    on_failure: {{http: {{url: "{url}/alert", body: '{alert}'}}}}
    on_recovery: {{http: {{url: "{url}/recovered"}}}}
"""
SLACK_FAILED = '{"text":"${jobId} ${status}: ${reason}"}'
SLACK_RECOVERED = '{"text":"${jobId} ${status} after ${failures} failures"}'
SLACK = """
  - id: slack
    schedule: "* * * * * ?"
    target: {{http: {{url: "{url}/async", async: true}}}}
    on_failure: {{http: {{url: "{slack}/hook", body: '{failed}'}}}}
    on_recovery: {{http: {{url: "{slack}/hook", body: '{recovered}'}}}}
"""


class FlakyReceiver(Receiver):
    """`/flaky` answers 500 to its first `failing` requests, then 200; `/async` answers
    202 and reports the work FAILED (reason NASTY) the first time, SUCCEEDED after."""

    def __init__(self, failing: int):
        super().__init__()
        self.failing, self.reports = failing, []

    def _serve(self, handler) -> None:
        if handler.path == "/flaky":  # one request at a time: the job's overlap is skip
            self.statuses["/flaky"] = 500 if len(self.at_path("/flaky")) < self.failing else 200
        if handler.path == "/async":
            self.statuses["/async"] = 202
        super()._serve(handler)
        if handler.path == "/async":
            first = len(self.at_path("/async")) == 1
            report = {"status": "FAILED", "message": NASTY} if first else {"status": "SUCCEEDED"}
            url, token = handler.headers["X-Sundial-Completion-Url"], handler.headers["X-Sundial-Completion-Token"]
            threading.Thread(target=self._complete, args=(url, token, report), daemon=True).start()

    def _complete(self, url: str, token: str, report: dict) -> None:
        request = urllib.request.Request(url, json.dumps(report).encode(), method="POST", headers={
            "Content-Type": "application/json", "X-Sundial-Completion-Token": token})
        with urllib.request.urlopen(request, timeout=10) as answer:  # at once: no 404 before it is recorded
            self.reports.append(answer.status)


class SlackLike:
    """An incoming webhook as Slack's behaves: JSON only, parsed strictly, with a string
    `text`; `ok` to a good message, 400 `invalid_payload` to anything else."""

    def __init__(self):
        self.texts, self.refused = [], []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                text = outer._text(self.headers.get("Content-Type", ""), raw)
                (outer.texts if text is not None else outer.refused).append(text if text is not None else raw)
                answer = b"ok" if text is not None else b"invalid_payload"
                self.send_response(200 if text is not None else 400)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    @staticmethod
    def _text(content_type: str, raw: str) -> str | None:
        if content_type.split(";")[0].strip() != "application/json":
            return None
        try:
            message = json.loads(raw)  # strict: a raw control character in a string is an error
        except ValueError:
            return None
        ok = isinstance(message, dict) and set(message) == {"text"} and isinstance(message["text"], str)
        return message["text"] if ok else None

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _project(receiver: Receiver, slack: SlackLike | None, allowed: str = "") -> str:
    jobs = FLAKY.format(url=receiver.url, alert=ALERT)
    if slack is not None:
        jobs += SLACK.format(url=receiver.url, slack=slack.url, failed=SLACK_FAILED, recovered=SLACK_RECOVERED)
    return f"{allowed}jobs:\n{jobs}"


def _check_failing_twice_then_recovering(server: Server, receiver: Receiver) -> None:
    [recovered] = wait_until(lambda: receiver.at_path("/recovered"), 20)
    rows = [r for r in server.invocations("hooks", "flaky") if r["status"] in ("FAILED", "SUCCEEDED")]
    failed, success = rows[:2], rows[2]
    assert [r["status"] for r in rows[:3]] == ["FAILED", "FAILED", "SUCCEEDED"]
    alerts = [json.loads(a.body) for a in receiver.at_path("/alert")]
    assert alerts == [{"status": "FAILED", "reason": "http 500", "attempts": 2, "failures": n,
                       "url": f"{server.url}/p/hooks/flaky/{row['id']}"} for n, row in enumerate(failed, 1)]
    assert json.loads(recovered.body) == {
        "project": "hooks", "job": "flaky", "invocation_id": success["id"], "scheduled_time": success["scheduled_time"],
        "trigger": "schedule", "status": "SUCCEEDED", "reason": "", "attempts": 1, "failures": 2}
    assert recovered.headers["Content-Type"] == "application/json"
    log = server.get(f"/api/v1/projects/hooks/jobs/flaky/invocations/{success['id']}")["log"]
    assert wait_until(lambda: any(e["message"] == "on_recovery attempt 1: notified" for e in server.get(
        f"/api/v1/projects/hooks/jobs/flaky/invocations/{success['id']}")["log"]), 5), log
    # Later successes are not recoveries.
    assert wait_until(lambda: len([r for r in server.invocations("hooks", "flaky") if r["status"] == "SUCCEEDED"]) >= 2,
                      10)
    assert len(receiver.at_path("/recovered")) == 1 and len(receiver.at_path("/alert")) == 2


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hooks")
    receiver, slack = FlakyReceiver(failing=4), SlackLike()
    configs = tmp / "configs"
    configs.mkdir()
    (configs / "hooks.yaml").write_text(_project(receiver, slack))
    server = Server(configs, tmp / "sundial.db", tmp / "server.log").start()
    yield server, receiver, slack
    server.stop()
    receiver.close()
    slack.close()


def test_two_failures_then_a_success_tell_on_failure_twice_then_on_recovery_once(embedded):
    server, receiver, _ = embedded
    _check_failing_twice_then_recovering(server, receiver)


def test_a_slack_like_webhook_gets_valid_json_whatever_the_reason_holds(embedded):
    _, _, slack = embedded
    assert wait_until(lambda: len(slack.texts) >= 2, 20), slack.refused
    assert slack.texts[:2] == [f"slack FAILED: {NASTY}", "slack SUCCEEDED after 1 failures"]
    assert slack.refused == []


@pytest.mark.parametrize("cloud_database", ON_BOTH_IN_LONG_RUNS, indirect=True)
def test_on_recovery_on_the_cloud_backend(tmp_path, cloud_database, tasks_emulator):
    receiver = FlakyReceiver(failing=4)
    configs = tmp_path / "configs"
    configs.mkdir()
    # The cloud backend refuses loopback targets unless the project allows them.
    (configs / "hooks.yaml").write_text(_project(receiver, None, 'allowed_hosts: ["127.0.0.1"]\n'))
    port = free_port()
    env = cloud_server_env(cloud_database, tasks_emulator, "sundial", port)
    server = Server(configs, tmp_path / "unused.db", tmp_path / "server.log", env, port=port).start()
    try:
        _check_failing_twice_then_recovering(server, receiver)
    finally:
        server.stop()
        receiver.close()
