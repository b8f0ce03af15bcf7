"""The batch writer's answer reader (engine/targets/http_framing.py) on bytes alone (it does
no I/O), and the failure vocabulary both HTTP stacks share (engine/targets/http_failures.py).
The same answers over real sockets, on both stacks, are tests/targets/test_target_faults.py."""

from __future__ import annotations

import http.client
import ssl

import pytest

from engine.targets.http_failures import ClosedWithoutAnswer, NotHttp, describe
from engine.targets.http_framing import AnswerReader
from engine.targets.http_pool import Answer

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def _fed(data: bytes, method: str = "POST", limit: int = 2000, step: int = 0) -> tuple[object, AnswerReader]:
    """What the reader ends with when given `data` (`step` bytes at a time; 0: at once)."""
    reader = AnswerReader(method, limit)
    pieces = [data[at:at + step] for at in range(0, len(data), step)] if step else [data]
    for piece in pieces:
        outcome = reader.feed(piece)
        if outcome is not None:
            return outcome, reader
    return None, reader


def test_an_answer_fed_a_byte_at_a_time_ends_at_its_last_byte():
    answer, reader = _fed(OK, step=1)
    assert answer == Answer(200, "OK", b"ok", True, None) and reader.reusable


@pytest.mark.parametrize("answer, reusable", [
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", False),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", False),
    (OK + b"HTTP/1.1 200 OK\r\n", False),  # bytes past the answer: the connection is not clean
    (b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", True),
])
def test_a_connection_is_reused_only_after_a_whole_answer_that_keeps_it(answer, reusable):
    ended, reader = _fed(answer)
    assert isinstance(ended, Answer) and ended.complete and reader.reusable is reusable


def test_a_body_past_the_limit_is_cut_and_the_connection_dropped():
    ended, reader = _fed(b"HTTP/1.1 500 Oops\r\nContent-Length: 100000\r\n\r\n" + b"x" * 3000, limit=2000)
    assert (ended.status, len(ended.body), ended.complete, reader.reusable) == (500, 2000, False, False)


def test_an_interim_answer_is_passed_over():
    ended, _ = _fed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 302 Found\r\nLocation: /next\r\nContent-Length: 0\r\n\r\n")
    assert (ended.status, ended.location, ended.complete) == (302, "/next", True)


def test_bytes_that_cannot_begin_an_answer_are_not_http_at_once():
    ended, _ = _fed(b"SSH-2", step=1)
    assert isinstance(ended, NotHttp)


def test_a_close_before_any_byte_and_one_after_the_status():
    reader = AnswerReader("POST", 2000)
    assert isinstance(reader.feed(b""), ClosedWithoutAnswer)
    reader = AnswerReader("POST", 2000)
    assert reader.feed(b"HTTP/1.1 503 Busy\r\nContent-Length: 10\r\n\r\nabc") is None
    assert reader.feed(b"") == Answer(503, "Busy", b"abc", False, None)


def test_at_the_deadline_the_status_decides_if_it_arrived():
    reader = AnswerReader("POST", 2000)
    reader.feed(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    assert reader.at_deadline() is None
    reader = AnswerReader("POST", 2000)
    reader.feed(b"HTTP/1.1 500 Oops\r\nContent-Length: 10\r\n\r\nab")
    assert reader.at_deadline() == Answer(500, "Oops", b"ab", False, None)


@pytest.mark.parametrize("error, reason", [
    (TimeoutError("timed out"), "timeout"),
    (ConnectionRefusedError(111, "Connection refused"), "connection error: connection refused"),
    (ClosedWithoutAnswer(), "connection error: remote end closed connection without response"),
    (NotHttp("begins b'SSH-'"), "connection error: the answer is not HTTP"),
    (ValueError("Invalid header value b'a\\nb'"), "invalid request: invalid header value b'a\\nb'"),
])
def test_each_failure_kind_has_one_reason(error, reason):
    assert describe(error, 2.0)[0] == reason


def test_a_failure_is_named_by_what_it_is_not_by_what_it_wraps():
    """The pool raises its answer errors from http.client's: the chain does not leak the
    parser's wording (or the peer's bytes) into the reason."""
    try:
        try:
            raise http.client.BadStatusLine("SSH-2.0-OpenSSH_9.2")
        except http.client.HTTPException as inner:
            raise NotHttp(str(inner)) from inner
    except NotHttp as error:
        assert describe(error, 2.0)[0] == "connection error: the answer is not HTTP"
    refused = ssl.SSLCertVerificationError(1, "certificate verify failed")
    refused.verify_message = "certificate has expired"
    assert describe(refused, 2.0)[0] == "connection error: TLS certificate verify failed: certificate has expired"
