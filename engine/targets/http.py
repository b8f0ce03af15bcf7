"""The HTTP target: one attempt of one event is one HTTP request (CONTRACT section 4).

One `requests.Session` per target instance, shared by every dispatcher thread: its
connection pools are thread-safe, and the only other shared state a session keeps
(cookies) is switched off, so one job's target cannot hand cookies to another job's.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from datetime import timedelta
from http.cookiejar import DefaultCookiePolicy
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter

from engine.ports import DeliveryRequest, DeliveryResult
from statemachine.durations import parse_duration, rfc3339_millis

DEFAULT_TIMEOUT = timedelta(seconds=60)
POOL_SIZE = 64  # connections kept per host: about the dispatcher's thread count
SNIPPET_CHARS = 500  # of the response body, for the invocation log
_READ_LIMIT = 4 * SNIPPET_CHARS  # bytes read for the snippet; the rest is never read
_RESERVED_PREFIX = "x-sundial-"
METADATA_HOSTS = frozenset({"metadata.google.internal"})


class ForbiddenTarget(Exception):
    """The target's address may not be called from this backend (CONTRACT section 6)."""

    def __init__(self, address: str, why: str) -> None:
        super().__init__(f"forbidden target {address}")
        self.address = address
        self.why = why


# --- target safety -------------------------------------------------------------------


def _normal_host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def refused_ip(address: str, backend: str) -> bool:
    """Whether a literal IP address is refused on `backend` ("local" or "cloud")."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:169.254.169.254 is 169.254.169.254
    if ip.is_link_local:
        return True  # the metadata server lives here, on every platform
    # On the cloud backend nothing but the public internet is a target: loopback,
    # private, shared (100.64/10), reserved and unspecified (0.0.0.0 reaches loopback).
    return backend == "cloud" and not ip.is_global


def check_address(host: str, allowed_hosts, backend: str, port: int = 80) -> None:
    """Refuse a host that is, or resolves to, an address this backend may not call.

    Every resolved address is checked, since the connection may use any of them.
    A host listed in `allowed_hosts` is never refused.

    The connection resolves the name again, so a DNS answer that changes in between
    (rebinding) is not caught yet; pinning the checked address comes with the issue
    that completes target safety, together with re-checking redirects.

    :raises ForbiddenTarget: naming the refused name or address.
    :raises OSError: (socket.gaierror) the name does not resolve.
    """
    name = _normal_host(host)
    if name in {_normal_host(allowed) for allowed in allowed_hosts}:
        return
    if name in METADATA_HOSTS:
        raise ForbiddenTarget(name, "the metadata server")
    for address in _resolve(name, port):
        if refused_ip(address, backend):
            raise ForbiddenTarget(
                address, f"{name} is {address}, not callable on the {backend} backend"
            )


def _resolve(name: str, port: int) -> list[str]:
    try:
        return [str(ipaddress.ip_address(name.split("%", 1)[0]))]  # a literal: no lookup
    except ValueError:
        pass
    infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    return [sockaddr[0] for *_, sockaddr in infos]


# --- the target ----------------------------------------------------------------------


class HttpTarget:
    """Delivers `{"http": {url, method, headers, body, timeout, async}}` targets."""

    def __init__(self, backend: str = "local", pool_size: int = POOL_SIZE) -> None:
        if backend not in ("local", "cloud"):
            raise ValueError(f"backend must be 'local' or 'cloud', got {backend!r}")
        self.backend = backend
        self._session = _new_session(pool_size)

    def close(self) -> None:
        self._session.close()

    def deliver(self, request: DeliveryRequest) -> DeliveryResult:
        started = time.monotonic()
        outcome, reason, detail = self._attempt(request)
        elapsed = timedelta(seconds=time.monotonic() - started)
        return DeliveryResult(outcome, reason, detail, elapsed)

    def _attempt(self, request: DeliveryRequest) -> tuple[str, str, str]:
        spec = request.target.get("http") or {}
        try:
            url, host, port = _parse_url(str(spec.get("url") or ""))
            timeout = _timeout_seconds(spec.get("timeout"))
        except ValueError as error:
            return "failed", f"invalid request: {error}", str(error)
        try:
            check_address(host, request.allowed_hosts, self.backend, port)
        except ForbiddenTarget as refused:
            return "failed", str(refused), refused.why
        except OSError as error:
            return "failed", f"connection error: cannot resolve {host}", _short_cause(error)
        return self._send(request, spec, url, timeout)

    def _send(self, request: DeliveryRequest, spec: dict, url: str, timeout: float):
        body = spec.get("body")
        try:
            # Redirects are NOT followed: a 3xx is a failed attempt ("http 302") for now.
            # Following one needs the target-safety check on every hop (CONTRACT
            # section 6), which comes with the issue that completes target safety.
            response = self._session.request(
                str(spec.get("method") or "POST").upper(),
                url,
                headers=_headers(request, spec),
                data=body.encode("utf-8") if isinstance(body, str) and body else None,
                timeout=(timeout, timeout),
                allow_redirects=False,
                stream=True,  # read only a bounded snippet of whatever the target answers
            )
        except requests.Timeout:  # before ConnectionError: ConnectTimeout is both
            return "failed", "timeout", f"no answer within {timeout:g}s"
        except requests.ConnectionError as error:
            cause = _short_cause(error)
            return "failed", f"connection error: {cause}", cause
        except (requests.RequestException, ValueError) as error:
            cause = _short_cause(error)
            return "failed", f"invalid request: {cause}", cause
        with response:
            detail = _detail(response, time.monotonic() + timeout)
        outcome, reason = _classify(response.status_code, bool(spec.get("async")))
        return outcome, reason, detail


def _new_session(pool_size: int) -> requests.Session:
    session = requests.Session()
    # Env proxies would connect somewhere other than the address checked, and a
    # ~/.netrc would hand its credentials to whatever host a job names.
    session.trust_env = False
    session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))  # keep none
    session.headers["User-Agent"] = "Sundial"
    # No transport retries: the engine retries with backoff and records every attempt.
    adapter = HTTPAdapter(pool_connections=pool_size, pool_maxsize=pool_size, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _parse_url(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"url must be http(s)://host/..., got {url[:200]!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)  # .port raises on junk
    return url, parts.hostname, port


def _timeout_seconds(value) -> float:
    if value is None or value == "":
        seconds = DEFAULT_TIMEOUT.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        seconds = parse_duration(value).total_seconds()
    if seconds <= 0:
        raise ValueError(f"timeout must be positive, got {value!r}")
    return seconds


def _headers(request: DeliveryRequest, spec: dict) -> dict[str, str]:
    """The user's headers, then Sundial's; no user header can replace a Sundial one."""
    headers = {
        str(name): str(value)
        for name, value in (spec.get("headers") or {}).items()
        if not str(name).lower().startswith(_RESERVED_PREFIX)
    }
    headers.update(sundial_headers(request, bool(spec.get("async"))))
    return headers


def sundial_headers(request: DeliveryRequest, is_async: bool = False) -> dict[str, str]:
    """The X-Sundial-* headers of CONTRACT section 4 for one attempt of one event."""
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


def _classify(status: int, is_async: bool) -> tuple[str, str]:
    if 200 <= status < 300:
        # Only an async target's 202 means "started; completion comes later".
        return ("accepted", "") if status == 202 and is_async else ("succeeded", "")
    return "failed", f"http {status}"


def _detail(response: requests.Response, deadline: float) -> str:
    """`HTTP 500 Internal Server Error` and the start of the body, for the log.

    Reading stops at _READ_LIMIT bytes or at `deadline`, whichever comes first, so a
    huge or trickling body costs neither memory nor a dispatcher thread's time.
    """
    line = f"HTTP {response.status_code} {response.reason or ''}".rstrip()
    try:
        raw = b""
        for chunk in response.iter_content(chunk_size=256):
            raw += chunk
            if len(raw) >= _READ_LIMIT or time.monotonic() > deadline:
                break
    except (requests.RequestException, OSError):
        # The status already decided the outcome; a body that fails to arrive only
        # shortens the log.
        return f"{line}\n(body unreadable)"
    snippet = raw.decode("utf-8", errors="replace")[:SNIPPET_CHARS]
    return f"{line}\n{snippet}" if snippet else line


def _short_cause(error: BaseException) -> str:
    """The innermost cause of a requests/urllib3 error, e.g. `connection refused`."""
    seen = set()
    while (inner := _inner(error)) is not None and id(inner) not in seen:
        seen.add(id(error))
        error = inner
    text = str(error) or type(error).__name__
    if isinstance(error, OSError) and error.strerror:
        text = error.strerror  # "Connection refused", not "[Errno 111] Connection refused"
    if text[1:2].islower():  # a sentence, not an acronym like "SSL: ..."
        text = text[:1].lower() + text[1:]
    return text[:200]


def _inner(error: BaseException) -> BaseException | None:
    # urllib3 keeps the cause in `.reason` (MaxRetryError), requests in `.args[0]`,
    # and both chain the socket error with `raise ... from`.
    reason = getattr(error, "reason", None)
    if isinstance(reason, BaseException):
        return reason
    if error.__cause__ is not None:
        return error.__cause__
    return next((arg for arg in error.args if isinstance(arg, BaseException)), None)
