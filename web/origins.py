"""The loopback-only mode's defence against web pages (docs/REFERENCE.md section 6).

With no identities configured, `serve` treats every caller as an owner and listens on
loopback only. A page open in the operator's browser can still reach that port: by a
cross-site form or fetch (CSRF), or through a name of its own that resolves to
127.0.0.1 (DNS rebinding). So in that mode:
- only a `Host` that names loopback (`127.0.0.1` or any 127/8 address, `localhost`,
  `[::1]`; any port) is served;
- a request that changes something (any method but GET, HEAD, OPTIONS) is refused when
  its `Origin` is not exactly the loopback origin it was sent to, the host and port of
  its `Host` (`Origin: null` included; `127.0.0.2` or `localhost` is another origin than
  `127.0.0.1`, since another local process may serve a page there on the same port), or
  when the browser marks it `Sec-Fetch-Site: cross-site`. A request with no `Origin`
  (curl, scripts) is a program on this machine, which is trusted in this mode.
Both answer 403 before anything is read or changed.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from flask import Flask, request

from web.errors import ApiError
from web.sessions import SAFE_METHODS


def install(app: Flask, open_access: bool) -> None:
    if not open_access:
        return  # callers prove who they are; the ACL decides

    @app.before_request
    def _only_this_machine() -> None:
        host, port = _host_and_port(request.host)
        if not _is_loopback(host):
            raise ApiError("PERMISSION_DENIED", f"host {request.host[:100]!r} is not served: with "
                                                "no API tokens set, only loopback names are")
        if request.method in SAFE_METHODS:
            return None
        origin = request.headers.get("Origin")
        if origin is not None and not _same_loopback_origin(origin, host, port):
            raise ApiError("PERMISSION_DENIED", f"a change from origin {origin[:100]!r} is refused: "
                                                "with no API tokens set, only this server's own "
                                                "pages may change anything")
        if request.headers.get("Sec-Fetch-Site", "").lower() == "cross-site":
            raise ApiError("PERMISSION_DENIED", "a cross-site change is refused")
        return None


def _host_and_port(value: str) -> tuple[str, int | None]:
    parts = urlsplit(f"//{value}")
    try:
        return (parts.hostname or ""), parts.port
    except ValueError:
        return "", None


def _is_loopback(host: str) -> bool:
    host = host.lower().rstrip(".")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _same_loopback_origin(origin: str, host: str, port: int | None) -> bool:
    """`origin` names the very host and port the request came to (`Host`), on loopback."""
    parts = urlsplit(origin)
    try:
        origin_port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return False
    return (parts.scheme in ("http", "https") and _is_loopback(parts.hostname or "")
            and _normal(parts.hostname or "") == _normal(host)
            and origin_port == (port or {"http": 80, "https": 443}.get(request.scheme)))


def _normal(host: str) -> str:
    return host.lower().rstrip(".")
