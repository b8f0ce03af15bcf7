"""The literal-address rule of docs/REFERENCE.md section 6, applied to http urls at
validation time (config/targets.py): a host that is the metadata server or a literal
link-local address (on the cloud backend also loopback, private, multicast or other
non-public addresses, IPv6 outside global unicast, IPv4 inside NAT64/6to4/compatible
forms, and `localhost`; statemachine/safety.py decides, for delivery too) is refused
unless the project's `allowed_hosts` lists it. Also how a URL's scheme and host are read.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from functools import lru_cache
from urllib.parse import urlsplit

from statemachine.safety import address_refusal

__all__ = ["BACKENDS", "canonical_host", "refusal", "scheme_and_host"]

BACKENDS = ("local", "cloud")
METADATA_HOSTS = frozenset({"metadata.google.internal"})
_NUMERIC_HOST = re.compile(r"[0-9a-fx.]+")  # what inet_aton may read as an IPv4 address


# `scheme://netloc`: what urlsplit reads the scheme, host and port from. A URL's path,
# query and fragment change none of them, and the jobs of a file name a few hosts.
_HEAD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*")


def _split_host(url: str) -> tuple[str, str | None, bool]:
    """(scheme, host, whether the port reads) as urlsplit gives them; urlsplit's own
    ValueError for a broken bracketed host."""
    parts = urlsplit(url)
    try:
        host, _ = parts.hostname, parts.port
    except ValueError:
        return parts.scheme.lower(), None, False
    return parts.scheme.lower(), host, True


_head_parts = lru_cache(maxsize=1024)(_split_host)  # by the URL's head only


def scheme_and_host(url: str) -> tuple[str, str | None, bool]:
    """(scheme in lower case, host, whether the port reads) of a URL without spaces or
    control characters, as urlsplit gives them; urlsplit's ValueError for a broken
    bracketed host."""
    head = _HEAD.match(url)
    return _head_parts(head.group()) if head else _split_host(url)


def canonical_host(host: str) -> str:
    """Lower case, no brackets or trailing dot, addresses in their standard spelling."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host.rstrip(".")
    try:  # what a resolver reads: fullwidth letters, ideographic full stops (IDNA 2003)
        host = host.encode("idna").decode("ascii").rstrip(".")
    except UnicodeError:
        pass
    address = _literal_address(host)
    return str(address) if address is not None else host


def _literal_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    # Resolvers read `169.254.169.254` also as `2852039166`, `0xa9fea9fe` or `169.254.43518`.
    if _NUMERIC_HOST.fullmatch(host) and any(char.isdigit() for char in host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


@lru_cache(maxsize=1024)  # every job of a file usually names one of a few hosts
def refusal(host: str, allowed_hosts: tuple[str, ...], backend: str) -> str | None:
    """Why `host` may not be named as a target ("a link-local address"), or None."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    host = canonical_host(host)
    if host in {canonical_host(allowed) for allowed in allowed_hosts}:
        return None
    if host in METADATA_HOSTS:
        return "the metadata server"
    address = _literal_address(host)
    if address is not None:
        return address_refusal(address, backend)
    if backend == "cloud" and (host == "localhost" or host.endswith(".localhost")):
        return "a loopback name on the cloud backend"
    return None
