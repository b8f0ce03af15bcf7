"""HttpTarget against a real HTTP server on 127.0.0.1: headers, outcomes, safety."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from config.targets import refusal
from engine.targets.http import ForbiddenTarget, HttpTarget, check_address, refused_ip
from tests.targets.support import delivery

SUNDIAL_HEADERS = {
    "X-Sundial-Job": "billing/exporter-hourly",
    "X-Sundial-Invocation": "inv-0001",
    "X-Sundial-Scheduled-Time": "2018-03-22T00:09:00.000Z",
    "X-Sundial-Attempt": "1",
}


def sundial_headers_of(received) -> dict[str, str]:
    return {k: v for k, v in received.headers.items() if k.lower().startswith("x-sundial-")}


# --- what is sent --------------------------------------------------------------------


def test_sends_method_body_and_exactly_the_contract_headers(receiver, http_target):
    result = http_target.deliver(
        delivery(
            receiver.url + "/run",
            headers={"Content-Type": "application/json", "X-Team": "billing"},
            body='{"endDateTime":"2018-03-21T17:00:00.000-07:00"}',
        )
    )
    assert (result.outcome, result.reason) == ("succeeded", "")
    [received] = receiver.requests
    assert (received.method, received.path) == ("POST", "/run")
    assert received.body == b'{"endDateTime":"2018-03-21T17:00:00.000-07:00"}'
    assert sundial_headers_of(received) == SUNDIAL_HEADERS
    assert received.headers["Content-Type"] == "application/json"
    assert received.headers["X-Team"] == "billing"
    assert received.headers["User-Agent"] == "Sundial"


def test_body_is_utf8_and_method_is_used_as_given(receiver, http_target):
    http_target.deliver(delivery(receiver.url, method="put", body="día ☀"))
    [received] = receiver.requests
    assert received.method == "PUT"
    assert received.body == "día ☀".encode()


def test_get_without_body_sends_none(receiver, http_target):
    http_target.deliver(delivery(receiver.url, method="GET"))
    [received] = receiver.requests
    assert (received.method, received.body) == ("GET", b"")


def test_fanout_event_header_and_attempt(receiver, http_target):
    http_target.deliver(delivery(receiver.url, attempt=3, event_index=2, event_count=5))
    [received] = receiver.requests
    assert sundial_headers_of(received) == {
        **SUNDIAL_HEADERS,
        "X-Sundial-Attempt": "3",
        "X-Sundial-Event": "2/5",
    }


def test_user_headers_cannot_override_sundial_headers(receiver, http_target):
    http_target.deliver(
        delivery(
            receiver.url,
            headers={
                "X-Sundial-Job": "evil/job",
                "x-sundial-attempt": "99",
                "X-Sundial-Completion-Token": "forged",
            },
        )
    )
    [received] = receiver.requests
    assert sundial_headers_of(received) == SUNDIAL_HEADERS


# --- outcomes ------------------------------------------------------------------------


@pytest.mark.parametrize("code", [200, 201, 204])
def test_2xx_succeeds(receiver, http_target, code):
    result = http_target.deliver(delivery(f"{receiver.url}/status/{code}"))
    assert (result.outcome, result.reason) == ("succeeded", "")
    assert result.detail.startswith(f"HTTP {code}")
    assert result.duration.total_seconds() > 0


@pytest.mark.parametrize("code", [500, 404])
def test_other_status_fails_with_reason_and_logs_the_answer(receiver, http_target, code):
    result = http_target.deliver(delivery(f"{receiver.url}/status/{code}"))
    assert (result.outcome, result.reason) == ("failed", f"http {code}")
    assert result.detail.splitlines()[0].startswith(f"HTTP {code} ")
    assert result.detail.splitlines()[1] == f"answer {code}"


def test_detail_snippet_is_bounded(receiver, http_target):
    result = http_target.deliver(delivery(f"{receiver.url}/big"))
    assert result.reason == "http 500"
    status_line, snippet = result.detail.split("\n", 1)
    assert snippet == "x" * 500


def test_202_with_async_is_accepted_and_carries_completion_headers(receiver, http_target):
    request = delivery(
        f"{receiver.url}/status/202",
        async_=True,
        completion_url="http://127.0.0.1:8080/api/v1/complete/inv-0001",
        completion_token="tok-123",
    )
    result = http_target.deliver(request)
    assert (result.outcome, result.reason) == ("accepted", "")
    [received] = receiver.requests
    assert sundial_headers_of(received) == {
        **SUNDIAL_HEADERS,
        "X-Sundial-Completion-Url": "http://127.0.0.1:8080/api/v1/complete/inv-0001",
        "X-Sundial-Completion-Token": "tok-123",
    }


def test_202_without_async_is_plain_success(receiver, http_target):
    request = delivery(f"{receiver.url}/status/202", completion_token="tok-123")
    result = http_target.deliver(request)
    assert (result.outcome, result.reason) == ("succeeded", "")
    [received] = receiver.requests
    assert sundial_headers_of(received) == SUNDIAL_HEADERS  # no completion headers


def test_200_with_async_is_immediate_success(receiver, http_target):
    result = http_target.deliver(delivery(receiver.url, async_=True))
    assert result.outcome == "succeeded"


def test_slow_server_times_out(receiver, http_target):
    started = time.monotonic()
    result = http_target.deliver(delivery(f"{receiver.url}/slow", timeout="300ms"))
    assert (result.outcome, result.reason) == ("failed", "timeout")
    assert time.monotonic() - started < 2
    assert 0.25 < result.duration.total_seconds() < 2


def test_closed_port_is_a_connection_error(http_target):
    with socket.socket() as probe:  # find a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = http_target.deliver(delivery(f"http://127.0.0.1:{port}/", timeout="2s"))
    assert result.outcome == "failed"
    assert result.reason == "connection error: connection refused"


def test_unresolvable_host_is_a_connection_error(http_target):
    result = http_target.deliver(delivery("http://no-such-host.invalid/", timeout="2s"))
    assert result.outcome == "failed"
    assert result.reason == "connection error: cannot resolve no-such-host.invalid"


def test_a_redirect_is_followed_and_a_post_becomes_a_get_on_302(receiver, http_target):
    result = http_target.deliver(delivery(f"{receiver.url}/redirect", body="x"))
    assert (result.outcome, result.reason) == ("succeeded", "")
    assert [(r.method, r.path, r.body) for r in receiver.requests] == [
        ("POST", "/redirect", b"x"), ("GET", "/status/200", b"")]
    assert receiver.requests[1].headers["X-Sundial-Invocation"] == "inv-0001"


def test_a_307_keeps_the_method_and_the_body(receiver, http_target):
    result = http_target.deliver(delivery(f"{receiver.url}/redirect-to?code=307&url=/status/201", body="x"))
    assert result.outcome == "succeeded"
    assert [(r.method, r.body) for r in receiver.requests] == [("POST", b"x"), ("POST", b"x")]


def test_a_redirect_loop_fails_after_five_hops(receiver, http_target):
    result = http_target.deliver(delivery(f"{receiver.url}/loop"))
    assert result.reason == "too many redirects (more than 5)"
    assert len(receiver.requests) == 6


@pytest.mark.parametrize("where, refused", [
    ("http://localhost:{port}/status/200", ("127.0.0.1", "::1")),
    ("http://169.254.169.254/computeMetadata/v1/", ("169.254.169.254",)),
    ("http://metadata.google.internal/", ("metadata.google.internal",)),
])
def test_every_redirect_is_checked_like_the_first_url(receiver, make_target, where, refused):
    # The first hop is allowed by allowed_hosts; where it sends the request is not.
    url = where.format(port=receiver.server_address[1])
    result = make_target("cloud").deliver(delivery(f"{receiver.url}/redirect-to?url={url}",
                                                   allowed_hosts=("127.0.0.1",)))
    assert result.outcome == "failed" and result.reason.startswith("forbidden target ")
    assert result.reason.split()[-1] in refused
    assert [r.path for r in receiver.requests] == [f"/redirect-to?url={url}"]


def test_the_connection_goes_to_the_checked_address_not_a_later_dns_answer(receiver, http_target, monkeypatch):
    # A rebinding name: the first answer passes the check, later ones would not.
    real, answers = socket.getaddrinfo, []

    def rebinding(host, port, *args, **kwargs):
        if host == "rebind.test":
            answers.append(host)
            address = "127.0.0.1" if len(answers) == 1 else "10.255.255.1"
            return real(address, port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    port = receiver.server_address[1]
    result = http_target.deliver(delivery(f"http://rebind.test:{port}/status/200", timeout="2s"))
    assert result.outcome == "succeeded" and answers == ["rebind.test"]  # resolved once, by the check
    assert receiver.requests[0].headers["Host"] == f"rebind.test:{port}"


@pytest.mark.parametrize("url", ["", "ftp://example.com/x", "http:///nohost", "http://h:99999/"])
def test_bad_url_fails_without_raising(http_target, url):
    result = http_target.deliver(delivery(url))
    assert result.outcome == "failed"
    assert result.reason.startswith("invalid request: ")


def test_bad_timeout_fails_without_raising(receiver, http_target):
    result = http_target.deliver(delivery(receiver.url, timeout="soon"))
    assert result.reason.startswith("invalid request: ")
    assert receiver.requests == []


# --- target safety -------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, address",
    [
        ("http://169.254.169.254/computeMetadata/v1/", "169.254.169.254"),
        ("http://metadata.google.internal/computeMetadata/v1/", "metadata.google.internal"),
        ("http://METADATA.google.internal./x", "metadata.google.internal"),
        ("http://[fe80::1]:8080/", "fe80::1"),
    ],
)
@pytest.mark.parametrize("backend", ["local", "cloud"])
def test_link_local_and_metadata_are_refused_without_sending(make_target, url, address, backend):
    target = make_target(backend)
    started = time.monotonic()
    result = target.deliver(delivery(url, timeout="5s"))
    assert (result.outcome, result.reason) == ("failed", f"forbidden target {address}")
    assert time.monotonic() - started < 1  # refused before any connection attempt


def test_loopback_is_allowed_locally_and_refused_on_cloud(receiver, make_target):
    local, cloud = make_target("local"), make_target("cloud")
    assert local.deliver(delivery(receiver.url)).outcome == "succeeded"
    result = cloud.deliver(delivery(receiver.url))
    assert (result.outcome, result.reason) == ("failed", "forbidden target 127.0.0.1")
    assert len(receiver.requests) == 1  # only the local one arrived


def test_cloud_checks_the_resolved_address_of_a_name(receiver, make_target):
    port = receiver.server_address[1]
    result = make_target("cloud").deliver(delivery(f"http://localhost:{port}/"))
    assert result.outcome == "failed"
    assert result.reason.startswith("forbidden target ")
    assert result.reason.split()[-1] in ("127.0.0.1", "::1")
    assert receiver.requests == []


def test_allowed_hosts_lift_the_refusal(receiver, make_target):
    target = make_target("cloud")
    result = target.deliver(delivery(receiver.url, allowed_hosts=("127.0.0.1",)))
    assert result.outcome == "succeeded"


@pytest.mark.parametrize(
    "address, local, cloud",
    [
        ("169.254.169.254", True, True),
        ("fe80::1", True, True),
        ("::ffff:169.254.169.254", True, True),
        ("127.0.0.1", False, True),
        ("::1", False, True),
        ("10.1.2.3", False, True),
        ("192.168.0.1", False, True),
        ("172.16.0.1", False, True),
        ("100.64.0.1", False, True),
        ("0.0.0.0", False, True),
        ("fd00::1", False, True),
        ("8.8.8.8", False, False),
        ("2001:4860:4860::8888", False, False),
        # IPv6 forms that carry an IPv4 address inside them, and other non-global IPv6:
        # the cloud backend let each of these through before.
        ("::a9fe:a9fe", True, True),  # IPv4-compatible 169.254.169.254
        ("::127.0.0.1", False, True),
        ("::ffff:0:a9fe:a9fe", True, True),  # IPv4-translated
        ("64:ff9b::a9fe:a9fe", True, True),  # NAT64
        ("64:ff9b::10.0.0.1", False, True),
        ("64:ff9b:1::a00:1", False, True),  # the local-use NAT64 prefix
        ("2002:a9fe:a9fe::1", True, True),  # 6to4 of 169.254.169.254
        ("2002:0a00:0001::1", False, True),  # 6to4 of 10.0.0.1
        ("fec0::1", False, True),  # site-local
        ("ff02::1", False, True),  # multicast
        ("224.0.0.1", False, True),
        ("64:ff9b::808:808", False, False),  # NAT64 of a public address
    ],
)
def test_address_classes(address, local, cloud):
    assert bool(refused_ip(address, "local")) is local
    assert bool(refused_ip(address, "cloud")) is cloud
    # Validation decides a literal host exactly as delivery decides its address.
    assert bool(refusal(address, (), "local")) is local
    assert bool(refusal(address, (), "cloud")) is cloud


def test_check_address_names_the_address_and_honours_allowed_hosts():
    with pytest.raises(ForbiddenTarget, match="^forbidden target 169.254.169.254$"):
        check_address("169.254.169.254", (), "local")
    check_address("169.254.169.254", ("169.254.169.254",), "local")
    check_address("metadata.google.internal", ("Metadata.Google.Internal",), "cloud")
    check_address("127.0.0.1", (), "local")


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError):
        HttpTarget(backend="mars")


# --- the shared pool -----------------------------------------------------------------


def test_32_concurrent_deliveries_on_one_session(receiver, http_target):
    def send(i: int):
        return http_target.deliver(delivery(receiver.url, invocation_id=f"inv-{i:04d}"))

    barrier = threading.Barrier(32)

    def send_together(i: int):
        barrier.wait()
        return send(i)

    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(send_together, range(32)))
    assert [r.outcome for r in results] == ["succeeded"] * 32
    invocations = sorted(r.headers["X-Sundial-Invocation"] for r in receiver.requests)
    assert invocations == [f"inv-{i:04d}" for i in range(32)]


def test_connections_are_reused(receiver, http_target):
    for _ in range(3):
        assert http_target.deliver(delivery(receiver.url)).outcome == "succeeded"
    assert len({r.client_port for r in receiver.requests}) == 1


def test_cookies_are_never_kept_between_deliveries(receiver, http_target):
    http_target.deliver(delivery(receiver.url + "/set-cookie"))
    http_target.deliver(delivery(receiver.url))
    assert "Cookie" not in receiver.requests[1].headers
