"""The HTTP target: one attempt of one event is one HTTP request (docs/REFERENCE.md section 4).

One keep-alive connection pool per target instance (`http_pool.py`), shared by every
dispatcher thread. Nothing else is shared between deliveries: no cookies are kept, and
neither environment proxies nor ~/.netrc are read (a proxy would connect somewhere
other than the address checked, and a netrc would hand its credentials to any host a
job names).
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import time
from datetime import timedelta
from typing import Any, Callable, Iterable
from urllib.parse import urljoin

from engine.ports import DeliveryRequest, DeliveryResult
from engine.targets.google_tokens import MintError, TokenMinter
from engine.targets.http_batch import PARALLEL, BatchWriter, Outgoing
from engine.targets.http_pool import Answer, ConnectionPool, Endpoint, PoolKey, encode_request, parse_endpoint
from engine.targets.in_flight import InvocationKey
from statemachine.durations import parse_duration, rfc3339_millis
from statemachine.safety import (
    COMPLETION_TOKEN_HEADER,
    address_refusal,
    is_credential_header,
    is_framing_header,
    redact_echoes,
    sent_credentials,
)
from statemachine.vocabulary import DeliveryOutcome

DEFAULT_TIMEOUT = timedelta(seconds=60)
POOL_SIZE = 64  # idle connections kept per host: about the dispatcher's thread count
MAX_REDIRECTS = 5
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
SNIPPET_CHARS = 500  # of the response body, for the invocation log
_READ_LIMIT = 4 * SNIPPET_CHARS  # bytes read for the snippet; the rest is never read
_RESERVED_PREFIX = "x-sundial-"
METADATA_HOSTS = frozenset({"metadata.google.internal"})

_NextHop = tuple[Endpoint, str | None, str, bytes | None, dict[str, str]]  # endpoint, address, method, body, headers


class ForbiddenTarget(Exception):
    """The target's address may not be called from this backend (docs/REFERENCE.md section 6)."""

    def __init__(self, address: str, why: str) -> None:
        super().__init__(f"forbidden target {address}")
        self.address = address
        self.why = why


# --- target safety -------------------------------------------------------------------


def _normal_host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def refused_ip(address: str, backend: str) -> str | None:
    """Why a literal IP address is refused on `backend` ("local" or "cloud"), or None."""
    return address_refusal(ipaddress.ip_address(address.split("%", 1)[0]), backend)  # no zone id


def check_address(host: str, allowed_hosts: Iterable[str], backend: str, port: int = 80) -> str | None:
    """Refuse a host that is, or resolves to, an address this backend may not call;
    return the address to connect to (None for a host of `allowed_hosts`, which is
    never refused and connects as it resolves).

    Every resolved address is checked, since the connection may use any of them, and
    the connection then goes to the returned address without resolving the name again
    (http_pool.py), so a DNS answer that changes in between (rebinding) cannot turn
    an approved name into a refused address.

    :raises ForbiddenTarget: naming the refused name or address.
    :raises OSError: (socket.gaierror) the name does not resolve.
    """
    name = _normal_host(host)
    if name in {_normal_host(allowed) for allowed in allowed_hosts}:
        return None
    if name in METADATA_HOSTS:
        raise ForbiddenTarget(name, "the metadata server")
    addresses = _resolve(name, port)
    for address in addresses:
        why = refused_ip(address, backend)
        if why:
            raise ForbiddenTarget(address, f"{name} is {address}, {why}")
    return addresses[0]


def _resolve(name: str, port: int) -> list[str]:
    try:
        return [str(ipaddress.ip_address(name.split("%", 1)[0]))]  # a literal: no lookup
    except ValueError:
        pass
    infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    return [str(sockaddr[0]) for *_, sockaddr in infos]


# --- the target ----------------------------------------------------------------------


class HttpTarget:
    """Delivers `{"http": {url, method, headers, body, timeout, async, auth}}` targets."""

    def __init__(self, backend: str = "local", pool_size: int = POOL_SIZE,
                 minter: TokenMinter | None = None) -> None:
        if backend not in ("local", "cloud"):
            raise ValueError(f"backend must be 'local' or 'cloud', got {backend!r}")
        self.backend = backend
        self._pool = ConnectionPool(max_idle_per_host=pool_size)
        self._minter = minter or TokenMinter()  # for targets with `auth`

    def close(self) -> None:
        self._pool.close()

    @property
    def pool(self) -> ConnectionPool:
        return self._pool

    def batch_writer(self, hand_off: Callable[[Callable[[], None]], None]) -> BatchWriter:
        """The writer that sends this target's staged requests at their time, on this
        target's connections; `hand_off(work)` runs an answer it will not read itself."""
        return BatchWriter(self._pool, hand_off=hand_off)

    def stage(self, request: DeliveryRequest) -> "StagedHttp | None":
        """deliver() up to the write, done ahead of the request's time (a staged attempt):
        checks, headers, a minted token, the request encoded (`StagedHttp.warm` opens its
        connection). None when any of it fails: deliver() at the time then fails it the
        same way."""
        spec = request.target.get("http") or {}
        try:
            endpoint = parse_endpoint(str(spec.get("url") or ""))
            timeout = _timeout_seconds(spec.get("timeout"))
            address = check_address(endpoint.host, request.allowed_hosts, self.backend, endpoint.port)
            headers = _headers(request, spec, endpoint)
            if isinstance(spec.get("auth"), dict):  # the project's grant is checked before minting
                token = self._minter.bearer(spec["auth"], str(spec.get("url")), request.project)
                headers["Authorization"] = f"Bearer {token}"
            method = str(spec.get("method") or "POST").upper()
            body = spec.get("body")
            payload = body.encode("utf-8") if isinstance(body, str) and body else None
            data = encode_request(endpoint, method, headers, payload)
        except (ValueError, OSError, ForbiddenTarget, MintError):
            return None
        key = ConnectionPool.key_of(endpoint, address, request.project)
        return StagedHttp(self, request, spec, endpoint, address, headers, method, payload, timeout, key, data)

    def deliver(self, request: DeliveryRequest) -> DeliveryResult:
        started = time.monotonic()
        outcome, reason, detail = self._attempt(request)
        elapsed = timedelta(seconds=time.monotonic() - started)
        return DeliveryResult(outcome, reason, detail, elapsed)

    def _attempt(self, request: DeliveryRequest) -> tuple[DeliveryOutcome, str, str]:
        spec = request.target.get("http") or {}
        try:
            endpoint = parse_endpoint(str(spec.get("url") or ""))
            timeout = _timeout_seconds(spec.get("timeout"))
        except ValueError as error:
            return DeliveryOutcome.FAILED, f"invalid request: {error}", str(error)
        try:
            address = check_address(endpoint.host, request.allowed_hosts, self.backend, endpoint.port)
        except ForbiddenTarget as refused:
            return DeliveryOutcome.FAILED, str(refused), refused.why
        except OSError as error:
            return DeliveryOutcome.FAILED, f"connection error: cannot resolve {endpoint.host}", _short_cause(error)
        headers = _headers(request, spec, endpoint)
        if isinstance(spec.get("auth"), dict):  # minted only for a target that passed the checks
            try:  # the project's grant first: a refused identity fails as `forbidden identity: ...`
                token = self._minter.bearer(spec["auth"], str(spec.get("url")), request.project)
                headers["Authorization"] = f"Bearer {token}"
            except MintError as error:
                return DeliveryOutcome.FAILED, str(error), str(error)
        return self._send(request, spec, endpoint, timeout, address, headers)

    def _send(self, request: DeliveryRequest, spec: dict[str, Any], endpoint: Endpoint, timeout: float,
              address: str | None, headers: dict[str, str], first: Answer | BaseException | None = None,
              deadline: float | None = None) -> tuple[DeliveryOutcome, str, str]:
        """Send, following up to MAX_REDIRECTS redirects, each checked like the first
        URL; the whole chain shares the target's timeout. A credential header, the
        minted token's too, is not sent on to another host. `first`: the first hop's
        answer (or error), when the batch writer sent it (http_batch.py)."""
        method = str(spec.get("method") or "POST").upper()
        body = spec.get("body")
        payload = body.encode("utf-8") if isinstance(body, str) and body else None
        deadline = deadline if deadline is not None else time.monotonic() + timeout
        sent = headers  # the first hop's: every credential this request carried
        for hop in range(MAX_REDIRECTS + 1):
            try:
                if hop == 0 and first is not None:
                    if isinstance(first, BaseException):
                        raise first
                    answer = first
                else:
                    answer = self._pool.request(endpoint, method, headers, payload,
                                                max(deadline - time.monotonic(), 0.001), _READ_LIMIT,
                                                address, owner=request.project, invocation=InvocationKey.of(request))
            except TimeoutError:  # before OSError, of which it is one
                return DeliveryOutcome.FAILED, "timeout", f"no answer within {timeout:g}s"
            except (OSError, http.client.HTTPException) as error:
                cause = _short_cause(error)
                return DeliveryOutcome.FAILED, f"connection error: {cause}", cause
            except ValueError as error:  # e.g. a header value with a line break
                cause = _short_cause(error)
                return DeliveryOutcome.FAILED, f"invalid request: {cause}", cause
            location = _to_follow(answer)
            if location is None:
                break
            if hop == MAX_REDIRECTS:
                return DeliveryOutcome.FAILED, f"too many redirects (more than {MAX_REDIRECTS})", _detail(answer, sent)
            try:
                endpoint, address, method, payload, headers = self._redirect(
                    request, endpoint, answer, method, payload, headers)
            except ForbiddenTarget as refused:
                return DeliveryOutcome.FAILED, str(refused), f"redirected to {location[:200]}: {refused.why}"
            except ValueError as error:
                return DeliveryOutcome.FAILED, f"invalid redirect: {error}", _detail(answer, sent)
            except OSError as error:
                cause = _short_cause(error)
                return DeliveryOutcome.FAILED, "connection error: cannot resolve the redirect's host", cause
        return _ending(answer, spec, sent)

    def _redirect(self, request: DeliveryRequest, endpoint: Endpoint, answer: Answer, method: str,
                  payload: bytes | None, headers: dict[str, str]) -> _NextHop:
        """The next hop: its endpoint (checked), address, method, body and headers."""
        here = f"{endpoint.scheme}://{endpoint.host}:{endpoint.port}{endpoint.target}"
        target = parse_endpoint(urljoin(here, answer.location))
        address = check_address(target.host, request.allowed_hosts, self.backend, target.port)
        if answer.status == 303 or (answer.status in (301, 302) and method == "POST"):
            # What browsers and requests do: the body is not sent on.
            method, payload = "GET", None
            headers = {k: v for k, v in headers.items() if k.lower() not in ("content-type", "content-length")}
        if (target.scheme, target.host, target.port) != (endpoint.scheme, endpoint.host, endpoint.port):
            headers = _without_credentials(headers, request.secret_headers)
            if target.authorization:
                headers["Authorization"] = target.authorization
        return target, address, method, payload, headers


def _to_follow(answer: Answer) -> str | None:
    """Where an answer redirects to, if it is a redirect to follow (up to MAX_REDIRECTS)."""
    return answer.location if answer.status in _REDIRECTS and answer.location else None


def _ending(answer: Answer, spec: dict[str, Any], sent: dict[str, str]) -> tuple[DeliveryOutcome, str, str]:
    """The outcome, reason and detail of an answer that ends the attempt (`sent`: the headers)."""
    outcome, reason = _classify(answer.status, bool(spec.get("async")))
    return outcome, reason, _detail(answer, sent)


def _without_credentials(headers: dict[str, str], secret_backed: frozenset[str]) -> dict[str, str]:
    """Credentials were meant for the first host only: every credential header, every
    secret-backed header and the completion token stay behind on another host."""
    secret_names = {name.lower() for name in secret_backed}
    return {name: value for name, value in headers.items()
            if not (is_credential_header(name) or name.lower() in secret_names
                    or name.lower() == COMPLETION_TOKEN_HEADER.lower())}


def _timeout_seconds(value: Any) -> float:
    if value is None or value == "":
        seconds = DEFAULT_TIMEOUT.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        seconds = parse_duration(value).total_seconds()
    if seconds <= 0:
        raise ValueError(f"timeout must be positive, got {value!r}")
    return seconds


def _headers(request: DeliveryRequest, spec: dict[str, Any], endpoint: Endpoint) -> dict[str, str]:
    """Ours, then the user's, then Sundial's; no user header can replace a Sundial one."""
    headers = {"User-Agent": "Sundial", "Accept": "*/*"}
    if endpoint.authorization:  # user:password@ in the URL, sent as requests did
        headers["Authorization"] = endpoint.authorization
    for name, value in (spec.get("headers") or {}).items():
        name = str(name)
        lower = name.lower()
        if lower.startswith(_RESERVED_PREFIX) or is_framing_header(name):
            continue  # refused at validation; a definition stored before that is not obeyed
        for same in [k for k in headers if k.lower() == lower]:
            del headers[same]  # the user's User-Agent, Accept or Authorization wins
        headers[name] = str(value)
    headers.update(sundial_headers(request, bool(spec.get("async"))))
    return headers


def sundial_headers(request: DeliveryRequest, is_async: bool = False) -> dict[str, str]:
    """The X-Sundial-* headers of docs/REFERENCE.md section 4 for one attempt of one event."""
    headers = {
        "X-Sundial-Job": f"{request.project}/{request.job_id}",
        "X-Sundial-Invocation": request.invocation_id,
        "X-Sundial-Scheduled-Time": rfc3339_millis(request.scheduled_time),
        "X-Sundial-Attempt": str(request.attempt),
    }
    if request.event_count > 1:
        headers["X-Sundial-Event"] = f"{request.event_index}/{request.event_count}"
    if is_async:
        headers["X-Sundial-Completion-Url"] = request.completion_url
        headers["X-Sundial-Completion-Token"] = request.completion_token
    return headers


def _classify(status: int, is_async: bool) -> tuple[DeliveryOutcome, str]:
    if 200 <= status < 300:
        # Only an async target's 202 means "started; completion comes later".
        return (DeliveryOutcome.ACCEPTED, "") if status == 202 and is_async else (DeliveryOutcome.SUCCEEDED, "")
    return DeliveryOutcome.FAILED, f"http {status}"


def _detail(answer: Answer, sent: dict[str, str]) -> str:
    """`HTTP 500 Internal Server Error` and the start of the body, for the log, with every
    credential the request's headers `sent` carried (a minted token, a secret's value, an
    Authorization literal) masked wherever the answer echoes it, before it is cut."""
    credentials = sent_credentials(sent)
    line = redact_echoes(f"HTTP {answer.status} {answer.reason or ''}".rstrip(), credentials)
    cut = not answer.complete or len(answer.body) >= _READ_LIMIT  # a token may straddle the end
    body = redact_echoes(answer.body.decode("utf-8", errors="replace"), credentials, cut)
    snippet = body[:SNIPPET_CHARS]
    return f"{line}\n{snippet}" if snippet else line


def _short_cause(error: BaseException) -> str:
    """The innermost cause of an error, e.g. `connection refused`."""
    seen = set()
    while (inner := _inner(error)) is not None and id(inner) not in seen:
        seen.add(id(error))
        error = inner
    if isinstance(error, http.client.BadStatusLine) and not isinstance(error, http.client.RemoteDisconnected):
        # Its text is whatever the peer sent.
        return "the answer is not HTTP"
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


class StagedHttp:
    """A request of a staged attempt, ready to be written (http_batch.Outgoing)."""

    def __init__(self, target: HttpTarget, request: DeliveryRequest, spec: dict[str, Any], endpoint: Endpoint,
                 address: str | None, headers: dict[str, str], method: str, payload: bytes | None,
                 timeout: float, key: PoolKey, data: bytes) -> None:
        self.target, self.request, self.spec, self.endpoint = target, request, spec, endpoint
        self.address, self.headers, self.method, self.payload = address, headers, method, payload
        self.timeout, self.key, self.data = timeout, key, data
        self.read_limit = _READ_LIMIT

    def warm(self) -> None:
        """Open a connection for this request ahead of its time, unless enough are idle."""
        try:
            self.target.pool.warm(self.key, self.timeout, PARALLEL)
        except OSError:
            pass  # the write connects again, and a failure then is the attempt's

    def outgoing(self, ready: Callable[[], bool], done: Callable[[Answer | BaseException | None], None]) -> Outgoing:
        """This request as the writer takes it: `ready()` is asked right before the write
        (False: not sent), `done(outcome)` gets the answer, an error, or None if not sent."""
        return Outgoing(self.key, self.data, self.method, self.timeout, self.read_limit, ready=ready, done=done,
                        invocation=InvocationKey.of(self.request))

    def answered(self, first: Answer | BaseException, written_at: float) -> DeliveryResult | None:
        """The result of an answer (or error) that ends the request, at once, on the
        writer's thread; None for a redirect to follow, which `finish` does on another."""
        if not isinstance(first, Answer):
            return self.finish(first, written_at)  # an error: classified as the blocking path does
        if _to_follow(first) is not None:
            return None
        return DeliveryResult(*_ending(first, self.spec, self.headers),
                              timedelta(seconds=time.monotonic() - written_at))

    def finish(self, first: Answer | BaseException, written_at: float) -> DeliveryResult:
        """The result, from the writer's answer (a redirect is followed from here, blocking)."""
        outcome, reason, detail = self.target._send(self.request, self.spec, self.endpoint, self.timeout,
                                                    self.address, self.headers, first, written_at + self.timeout)
        return DeliveryResult(outcome, reason, detail, timedelta(seconds=time.monotonic() - written_at))
