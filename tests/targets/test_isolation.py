"""Projects share the dispatcher and its keep-alive connections, never each other's
requests or credentials (docs/REFERENCE.md section 6): no target sets the request's framing,
credentials stay on the host they were written for, and idle connections are kept per
project."""

from __future__ import annotations

import pytest

from tests.targets.support import Receiver, delivery

FRAMING = ["Content-Length", "transfer-encoding", "Connection", "Keep-Alive", "TE", "Trailer",
           "Upgrade", "Host", "Proxy-Authorization", "Proxy-Connection"]


@pytest.fixture
def other_host():
    with Receiver() as server:
        yield server


@pytest.mark.parametrize("name", FRAMING)
def test_a_stored_framing_header_is_not_sent(receiver, http_target, name):
    # A definition stored before validation refused these must not frame the request.
    result = http_target.deliver(delivery(f"{receiver.url}/a", body="POST /steal HTTP/1.1\r\n\r\n",
                                          headers={name: "0"}))
    assert result.outcome == "succeeded"
    follow = http_target.deliver(delivery(f"{receiver.url}/b", body="next"))
    assert follow.outcome == "succeeded"
    first, second = receiver.requests
    assert (first.path, first.body) == ("/a", b"POST /steal HTTP/1.1\r\n\r\n")
    assert (second.path, second.body) == ("/b", b"next")
    sent = {key.lower(): value for key, value in first.headers.items()}
    if name.lower() == "content-length":
        assert sent["content-length"] == str(len(first.body))
    elif name.lower() == "host":
        assert sent["host"] == receiver.url.removeprefix("http://")
    else:
        assert name.lower() not in sent


def test_a_smuggled_body_cannot_capture_the_next_projects_request(receiver, http_target):
    smuggler = delivery(f"{receiver.url}/harmless", project="beta", headers={"Content-Length": "0"},
                        body="POST /steal HTTP/1.1\r\nHost: x\r\nContent-Length: 250\r\n\r\n")
    victim = delivery(f"{receiver.url}/victim", project="alpha",
                      headers={"Authorization": "Bearer alpha-secret"})
    assert http_target.deliver(smuggler).outcome == "succeeded"
    assert http_target.deliver(victim).outcome == "succeeded"
    assert [r.path for r in receiver.requests] == ["/harmless", "/victim"]
    assert receiver.requests[1].headers["Authorization"] == "Bearer alpha-secret"


def test_idle_connections_are_kept_per_project(receiver, http_target):
    for project in ("alpha", "alpha", "beta"):
        assert http_target.deliver(delivery(f"{receiver.url}/x", project=project)).outcome == "succeeded"
    alpha1, alpha2, beta = (r.client_port for r in receiver.requests)
    assert alpha1 == alpha2 and beta != alpha1


CREDENTIALS = {"Authorization": "Bearer from-secret", "X-Api-Key": "key-1", "Cookie": "session=abc",
               "X-Vendor-Token": "from-secret-2", "X-Trace": "kept"}


@pytest.mark.parametrize("code", [302, 307])
def test_a_redirect_to_another_host_drops_every_credential(receiver, other_host, http_target, code):
    elsewhere = other_host.url.replace("127.0.0.1", "localhost") + "/landing"
    request = delivery(f"{receiver.url}/redirect-to?code={code}&url={elsewhere}", headers=CREDENTIALS,
                       async_=True, completion_url="http://127.0.0.1:9/c", completion_token="tok-c",
                       secret_headers=frozenset({"Authorization", "X-Vendor-Token"}))
    http_target.deliver(request)
    first, = receiver.requests
    landed, = other_host.requests
    assert first.headers["X-Sundial-Completion-Token"] == "tok-c"
    assert all(first.headers[name] == value for name, value in CREDENTIALS.items())
    for name in ("Authorization", "X-Api-Key", "Cookie", "X-Vendor-Token", "X-Sundial-Completion-Token"):
        assert name not in landed.headers, name
    assert landed.headers["X-Trace"] == "kept" and landed.headers["X-Sundial-Invocation"] == "inv-0001"


def test_a_redirect_on_the_same_host_keeps_the_credentials(receiver, http_target):
    request = delivery(f"{receiver.url}/redirect-to?code=307&url=/landing", headers=CREDENTIALS,
                       secret_headers=frozenset({"Authorization"}))
    assert http_target.deliver(request).outcome == "succeeded"
    assert receiver.requests[1].path == "/landing"
    assert all(receiver.requests[1].headers[name] == value for name, value in CREDENTIALS.items())
