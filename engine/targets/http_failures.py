"""What an HTTP attempt's failure is called: one vocabulary for both HTTP stacks.

Sundial sends a request on one of two stacks: the blocking pool (http_pool.py: a manual
trigger, a retry, a hook, every cloud delivery) and the batch writer (http_batch.py: a
scheduled occurrence on one machine). Each stack hands on a failure as the socket's own
error (OSError, ssl, TimeoutError) or as one of the two answer errors below, never as
its parser's own type (http.client's on one, h11's on the other). `describe` turns any
of them into the attempt's reason and detail, so a failure reads the same on the
scheduled path as on the manual one.
"""

from __future__ import annotations

import ssl


class ClosedWithoutAnswer(ConnectionError):
    """The target closed the connection after the request, before any byte of an answer."""

    def __init__(self) -> None:
        super().__init__("remote end closed connection without response")


class NotHttp(ConnectionError):
    """What came back is not an HTTP/1.x answer (`why`: where it broke, for debugging;
    never in the reason, since it quotes whatever the peer sent)."""

    def __init__(self, why: str = "") -> None:
        super().__init__("the answer is not HTTP")
        self.why = why


# What an attempt may fail with; anything else is a bug, and is raised as one.
ATTEMPT_FAILURES = (OSError, ValueError)


def describe(error: BaseException, timeout: float) -> tuple[str, str]:
    """(reason, detail) of an attempt that failed with `error` (one of ATTEMPT_FAILURES),
    whose timeout was `timeout` seconds."""
    if isinstance(error, TimeoutError):  # before OSError, of which it is one
        return "timeout", f"no answer within {timeout:g}s"
    cause = cause_of(error)
    # OSError first: a refused TLS certificate (ssl.SSLCertVerificationError) is a ValueError too.
    if isinstance(error, ValueError) and not isinstance(error, OSError):  # e.g. a header with a line break
        return f"invalid request: {cause}", cause
    return f"connection error: {cause}", cause


def cause_of(error: BaseException) -> str:
    """The innermost cause of an error, e.g. `connection refused`."""
    seen = set()
    while not isinstance(error, (ClosedWithoutAnswer, NotHttp)) and (inner := _inner(error)) is not None \
            and id(inner) not in seen:
        seen.add(id(error))
        error = inner
    if isinstance(error, ssl.SSLCertVerificationError):  # "certificate has expired", ...
        return f"TLS certificate verify failed: {error.verify_message}"
    if isinstance(error, ssl.SSLError):
        return f"TLS error: {error.reason or error}"
    text = str(error) or type(error).__name__
    if isinstance(error, OSError) and error.strerror:
        text = error.strerror  # "Connection refused", not "[Errno 111] Connection refused"
    if text[1:2].islower():  # a sentence, not an acronym like "SSL: ..."
        text = text[:1].lower() + text[1:]
    return text[:200]


def _inner(error: BaseException) -> BaseException | None:
    # ssl and urllib-style errors keep the cause in `.reason`, others in `.args`
    # or chain it with `raise ... from`.
    reason = getattr(error, "reason", None)
    if isinstance(reason, BaseException):
        return reason
    if error.__cause__ is not None:
        return error.__cause__
    return next((arg for arg in error.args if isinstance(arg, BaseException)), None)
