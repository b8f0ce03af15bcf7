"""A target that echoes what it got leaves none of the attempt's credentials in the
answer Sundial keeps (engine/targets/http.py `_detail`, engine/delivery.py): a token
minted for `auth`, a literal credential header, the completion token, on both HTTP
stacks (the blocking pool, and the batch writer of staged requests), and with the
URL's credentials and a secret's value through engine/delivery.py."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import pytest

from engine import delivery as sending
from engine.ports import StoredJob
from engine.secrets import REDACTED as MASK  # what readers see instead of a credential
from engine.secrets import LocalSecrets
from engine.targets.http import HttpTarget
from statemachine import actions as act
from statemachine.definition import JobDefinition
from statemachine.record import new_record
from tests.support.echo import EchoServer
from tests.support.google_identity import Google
from tests.targets.support import delivery
from tests.targets.test_google_auth import minter_for

LITERAL = "literal-xauth-0123456789"
COMPLETION = "c0mpletion-token-" + "9" * 47


@pytest.fixture
def google():
    stand_ins = Google()
    yield stand_ins
    stand_ins.close()


@pytest.fixture
def echo():
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def target(google):
    made = HttpTarget(minter=minter_for(google, google.metadata.host, google.iam.url))
    yield made
    made.close()


def _request(google, echo):
    request = delivery(f"{echo.url}/run", headers={"X-Auth-Token": LITERAL}, async_=True,
                       completion_url="http://127.0.0.1:8080/complete", completion_token=COMPLETION)
    request.target["http"]["auth"] = {"oidc": {"service_account": google.own}}
    return request


def _staged(target: HttpTarget, staged):
    writer = target.batch_writer(lambda work: threading.Thread(target=work, daemon=True).start())
    writer.start()
    ended, box = threading.Event(), {}
    writer.submit([staged.outgoing(ready=lambda: True, done=lambda outcome: box.update(outcome=outcome)
                                   or ended.set())])
    assert ended.wait(10)
    writer.shutdown()
    return staged.answered(box["outcome"], 0.0) or staged.finish(box["outcome"], 0.0)


def _assert_nothing_echoed_is_kept(detail: str, echo: EchoServer) -> None:
    [(_, got)] = echo.received
    token = got["Authorization"].removeprefix("Bearer ")
    assert len(token) > 500 and got["X-Auth-Token"] == LITERAL  # it was sent, and echoed
    kept = [piece for piece in (token[:24], token[-24:], LITERAL, COMPLETION) if piece in detail]
    assert kept == [], detail
    assert detail.count(MASK) == 3 and detail.startswith("HTTP 200 OK\npath: /run")


@pytest.mark.parametrize("stack", ["blocking", "staged"])
def test_an_echoed_token_literal_and_completion_token_are_masked_in_the_answer(google, echo, target, stack):
    request = _request(google, echo)
    if stack == "blocking":
        result = target.deliver(request)
    else:
        staged = target.stage(request)
        assert staged is not None
        result = _staged(target, staged)
    assert result.outcome == "succeeded", result.reason
    _assert_nothing_echoed_is_kept(result.detail, echo)


def _job(echo, tmp_path) -> tuple[StoredJob, act.Deliver, LocalSecrets]:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "VENDOR").write_text("vendor-secret-value\n")
    definition = JobDefinition(id="job", schedule="every 1m", target={"http": {
        "url": f"{echo.url}/run?api_key=url-query-key-123&day=1",
        "headers": {"X-Vendor": {"secret": "VENDOR"}, "Content-Type": "text/plain"}}})
    action = act.Deliver("inv-1", datetime(2026, 1, 5, 10, 1, tzinfo=timezone.utc), "schedule", 0, 1, 1)
    return StoredJob(new_record("proj", "job"), definition, "config"), action, LocalSecrets(str(tmp_path))


@pytest.mark.parametrize("stack", ["blocking", "staged"])
def test_the_urls_credentials_and_a_secrets_value_are_masked_in_what_is_stored(echo, target, tmp_path, stack):
    job, action, secrets = _job(echo, tmp_path)
    targets = {"http": target}
    if stack == "blocking":
        result = sending.deliver(targets, job, action, (), ("", ""), secrets)
    else:
        staged = sending.stage(targets, job, action, (), ("", ""), secrets)
        assert staged is not None
        result = staged.recorded(_staged(target, staged.ready))
    [(path, got)] = echo.received
    assert "url-query-key-123" in path and got["X-Vendor"] == "vendor-secret-value"  # sent, and echoed
    stored = repr((result.reason, result.detail, result.sent))
    assert "url-query-key-123" not in stored and "vendor-secret-value" not in stored
    assert f"path: /run?api_key={MASK}&day=1\nX-Vendor: {MASK}" in result.detail
    assert result.sent["url"] == f"{echo.url}/run?api_key={MASK}&day=1"
    assert result.sent["headers"] == {"X-Vendor": MASK, "Content-Type": "text/plain"}
