"""A request's bytes, as the batch writer sends them (engine/targets/http_pool.py
`encode_request`): built directly for the common request, and byte for byte what
http.client writes (or refuses) for any request at all."""

from __future__ import annotations

import http.client

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import engine.targets.http_pool as http_pool
from engine.targets.http_pool import Endpoint, encode_request


def _by_http_client(endpoint: Endpoint, method: str, headers: dict, body: bytes | None) -> bytes | type:
    """What encode_request gave when it always went through http.client."""
    try:
        encoder = http_pool._Encoder(endpoint)
        try:
            encoder.request(method, endpoint.target, body=body, headers=headers)
        except http.client.HTTPException as error:
            raise ValueError(str(error)) from error
    except (http.client.HTTPException, ValueError) as error:
        return type(error)
    return b"".join(encoder.captured)


def _ours(endpoint: Endpoint, method: str, headers: dict, body: bytes | None) -> bytes | type:
    try:
        return encode_request(endpoint, method, headers, body)
    except (http.client.HTTPException, ValueError) as error:
        return type(error)


_text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x2FF), max_size=12)
_names = st.one_of(st.sampled_from(["Content-Type", "X-Sundial-Job", "Accept-Encoding", "User-Agent", "host",
                                    "Content-Length", "Transfer-Encoding"]), _text)
_endpoints = st.builds(
    Endpoint, scheme=st.sampled_from(["http", "https"]),
    host=st.one_of(st.sampled_from(["127.0.0.1", "example.com", "::1", "bücher.example", "a b"]), _text),
    port=st.sampled_from([80, 443, 8080]),
    target=st.one_of(st.sampled_from(["/", "/a/b?x=1", "", "http://x/y", "/sp ace"]), _text),
    authorization=st.none())


@settings(max_examples=400, deadline=None)
@given(endpoint=_endpoints, method=st.one_of(st.sampled_from(["POST", "GET", "PUT", "patch", "DELETE"]), _text),
       headers=st.dictionaries(_names, _text, max_size=4), body=st.one_of(st.none(), st.binary(min_size=1, max_size=8)))
def test_every_request_encodes_as_http_client_encodes_it(endpoint, method, headers, body):
    expected = _by_http_client(endpoint, method, headers, body)
    got = _ours(endpoint, method, headers, body)
    assert got == expected  # the same bytes, or refused the same way


def test_the_common_request_does_not_build_an_http_connection(monkeypatch):
    def refuse(*args):
        raise AssertionError("the plain request went through http.client")
    monkeypatch.setattr(http_pool, "_Encoder", refuse)
    endpoint = Endpoint("http", "127.0.0.1", 8080, "/run?x=1", None)
    data = encode_request(endpoint, "POST", {"User-Agent": "Sundial", "X-Sundial-Job": "p/j"}, b"{}")
    assert data == (b"POST /run?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAccept-Encoding: identity\r\n"
                    b"Content-Length: 2\r\nUser-Agent: Sundial\r\nX-Sundial-Job: p/j\r\n\r\n{}")


@pytest.mark.parametrize("host", ["::1", "bücher.example"])
def test_hosts_that_need_http_clients_rules_go_through_it(host):
    endpoint = Endpoint("http", host, 80, "/", None)
    assert encode_request(endpoint, "GET", {}, None) == _by_http_client(endpoint, "GET", {}, None)
